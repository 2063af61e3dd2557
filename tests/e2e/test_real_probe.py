"""Job success with the real probe's output: the tests play kubelet by running
``python -m gpu_sizer.probe`` exactly as the Job's container would (its command and env), and
hand back the termination log it wrote. Also the local-process backend end to end."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from gpu_sizer_testbed import demo

from tests.e2e.conftest import GW, ROOT, Kubelet, condition, eventually, workload
from tests.e2e.test_lifecycle import phase_is

#: The demo's built-in CPU smoke workload: small enough for the probe's CPU fallback (under its
#: 2 GiB limit), shaped like a Llama config.
TINY = demo.TINY["spec"]
#: A real probe run imports torch: minutes on a loaded machine (the wait ends when it is done).
PROBE_PATIENCE = 600.0


async def run_probe_like_the_container(job: dict, tmp: Path) -> str:
    """Run the Job's container command locally; return its termination log."""
    (ctr,) = job["spec"]["template"]["spec"]["containers"]
    argv = list(ctr["command"])
    assert argv[:3] == ["python", "-m", "gpu_sizer.probe"]
    log = tmp / "termination-log"
    argv[argv.index("--termination-log") + 1] = str(log)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "operator"))
    env.update({e["name"]: e["value"] for e in ctr["env"]})
    env["HOME"] = str(tmp)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *argv[1:], env=env, stdout=asyncio.subprocess.DEVNULL
    )
    assert await proc.wait() == 0
    return log.read_text()


@pytest.mark.emulated_kubelet
@pytest.mark.timeout(PROBE_PATIENCE + 300)
async def test_job_success_with_the_real_probe(
    cluster, start_operator, kubelet: Kubelet, tmp_path
) -> None:
    await cluster.create(GW, workload("tiny", TINY))
    start_operator()
    job = await kubelet.wait_job()
    message = await run_probe_like_the_container(job, tmp_path)
    assert len(message.encode()) <= 4096
    await kubelet.succeed(job, message, node="l4-1")
    ready = await eventually(lambda: phase_is(cluster, "tiny", "Ready"), PROBE_PATIENCE)
    m = ready["status"]["measurement"]
    assert m["device"] == "cpu"
    assert "peakDeviceUsedBytes" not in m, "CPU runs carry no GPU figures"
    assert condition(ready, "Measured")["reason"] == "CpuSmokeRun"
    assert ready["status"]["recommendation"]["basis"] == "Estimate"


@pytest.mark.local_operator
@pytest.mark.timeout(PROBE_PATIENCE + 300)
async def test_local_process_backend(cluster, start_operator) -> None:
    await cluster.create(GW, workload("local", TINY))
    start_operator("--measurement-backend", "local")
    ready = await eventually(lambda: phase_is(cluster, "local", "Ready"), PROBE_PATIENCE)
    assert ready["status"]["measurement"]["device"] == "cpu"
    assert ready["status"]["measurement"]["nodeName"].startswith("local/")
    assert condition(ready, "Measured")["reason"] == "CpuSmokeRun"
