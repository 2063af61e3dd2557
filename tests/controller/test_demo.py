"""`gpu-sizer demo`, the README's main job, end to end: every workload settles, exit 0; and when
it cannot wait any longer, it says for which workloads and why. On kmock's emulator (the
default) and on a real control plane (``KUBEBUILDER_ASSETS``), where the API server validates
every example against the CRD and a refused one fails the demo."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_sizer_testbed import controlplane, demo

ROOT = Path(__file__).resolve().parents[2]
ASSETS = controlplane.assets_from_env()
needs_control_plane = pytest.mark.skipif(ASSETS is None, reason=controlplane.HOW_TO_GET)


def _demo(
    tmp_path: Path, *args: str, assets: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the demo on the emulator, or on a real control plane from ``assets``."""
    full = dict(os.environ, TMPDIR=str(tmp_path), **env)  # the operator's log goes to TMPDIR
    full.pop(controlplane.ASSETS_ENV, None)
    if assets is not None:
        full[controlplane.ASSETS_ENV] = str(assets)
    full["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "operator"), full.get("PYTHONPATH")])
    )
    return subprocess.run(
        [sys.executable, "-m", "gpu_sizer.cli", "demo", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=1700,
    )


@pytest.mark.timeout(1800)  # no fixed limit in the demo: it waits while the operator progresses
@pytest.mark.parametrize(
    "api", ["emulator", pytest.param("control-plane", marks=needs_control_plane)]
)
def test_demo_settles_every_workload_despite_stray_settings(tmp_path: Path, api: str) -> None:
    # A GPU_SIZER_* variable left in the user's shell must not reconfigure the demo's operator
    # (GPU_SIZER_NAMESPACE with -A used to stop it at start-up, and the demo settled nothing).
    assets = ASSETS if api == "control-plane" else None
    done = _demo(tmp_path, assets=assets, GPU_SIZER_NAMESPACE="nothing-here")
    out = done.stdout + done.stderr
    if assets is not None:
        # Every example passed the real API server's schema and CEL rules (none refused).
        assert "refused by the API server" not in out, out[-4000:]
        assert re.search(r"^Kubernetes API \(real control plane from KUBEBUILDER_ASSETS, "
                         r"kube-apiserver v\d", out, re.MULTILINE), out[:2000]  # fmt: skip
        assert not list(tmp_path.glob("gpu-sizer-envtest-*")), "control plane's folder removed"
    else:
        assert "Kubernetes API (kmock emulator) on http://127.0.0.1:" in out, out[:2000]
    assert done.returncode == 0, out[-4000:]
    settled = re.search(r"^(\d+)/(\d+) workloads settled", out, re.MULTILINE)
    assert settled and settled.group(1) == settled.group(2), out[-4000:]
    examples = len(demo._load(ROOT / "examples"))
    # every example and the built-in CPU smoke runs (a tiny LLM and a tiny SD pipeline)
    assert int(settled.group(2)) == examples + len(demo.BUILT_IN)
    assert "cpu-smoke" in out and "NoSafeHeadroom" in out
    # Both built-ins round-trip through the probe on the CPU: a tiny LLM and a tiny SD pipeline.
    for name in ("tiny-llama-cpu-smoke", "tiny-sd-cpu-smoke"):
        assert re.search(rf"^demo/{name} .*True \(CpuSmokeRun\)$", out, re.MULTILINE), out[-4000:]
    # Progress is reported as each workload settles, and the temporary log is gone.
    assert f"{settled.group(2)}/{settled.group(2)} settled" in out
    assert not list(tmp_path.glob("gpu-sizer-demo-*.log")), "log removed after a good run"


def test_demo_that_gives_up_names_what_it_waited_for(tmp_path: Path) -> None:
    done = _demo(tmp_path, "--timeout", "0")
    assert done.returncode == 1
    err = done.stderr
    assert "Gave up: --timeout 0 s reached. Still waiting for" in err, err
    waiting = [line for line in err.splitlines() if line.startswith("  ") and ": " in line]
    assert any("demo/tiny-llama-cpu-smoke" in line for line in waiting), err
    (log,) = tmp_path.glob("gpu-sizer-demo-*.log")
    assert f"full log kept: {log}" in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--stall-seconds", "-1"),
        ("--stall-seconds", "0"),
        ("--timeout", "-5"),
        ("--probe-seconds", "nan"),
        ("--probe-concurrency", "0"),
    ],
)
def test_demo_refuses_nonpositive_settings(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    from gpu_sizer.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["demo", flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be" in err


@needs_control_plane
@pytest.mark.timeout(1800)
def test_demo_on_a_control_plane_reports_what_the_api_server_refused(tmp_path: Path) -> None:
    # The emulator stores any GPUWorkload; a real API server runs the CRD's schema. A workload it
    # refuses is named with the server's message, the rest still settle, and the demo fails.
    examples = tmp_path / "examples"
    examples.mkdir()
    good = (ROOT / "examples" / "llama-3-8b-vllm-bf16.yaml").read_text()
    (examples / "good.yaml").write_text(good)
    bad = good.replace("maxNumSeqs: 16", "maxNumSeqs: 2000000000")
    (examples / "bad.yaml").write_text(bad.replace("name: llama-3-8b-chat", "name: too-many-seqs"))
    done = _demo(tmp_path, "--examples", str(examples), assets=ASSETS)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    refused = re.search(r"^refused by the API server: inference/too-many-seqs: HTTP 422 (.*)$",
                        done.stderr, re.MULTILINE)  # fmt: skip
    assert refused and "spec.inference.maxNumSeqs" in refused.group(1), done.stderr[-4000:]
    assert "less than or equal to 65536" in refused.group(1)
    assert "1 workload(s) refused by the API server" in done.stderr
    settled = re.search(r"^(\d+)/(\d+) workloads settled", out, re.MULTILINE)
    assert settled and settled.groups() == ("3", "3"), out[-4000:]  # good.yaml and the built-ins


def test_demo_without_the_testbed_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu_sizer.cli import main

    monkeypatch.setitem(sys.modules, "gpu_sizer_testbed", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "gpu_sizer_testbed.demo", raising=False)
    assert main(["demo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'gpu-sizer[demo]'" in err[0], err


def _fake_assets(folder: Path) -> Path:
    for name in ("etcd", "kube-apiserver"):
        (folder / name).write_text("#!/bin/sh\nexit 1\n")
        (folder / name).chmod(0o755)
    return folder


def test_demo_refuses_port_with_a_control_plane(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # --port fixes the emulator's port; the control plane's ports are the kernel's: say so
    # rather than ignore the flag.
    from gpu_sizer.cli import main

    monkeypatch.setenv(controlplane.ASSETS_ENV, str(_fake_assets(tmp_path)))
    assert main(["demo", "--port", "18080"]) == 2
    err = capsys.readouterr().err
    assert "--port sets the emulator's port" in err and f"unset {controlplane.ASSETS_ENV}" in err


def test_demo_names_assets_without_binaries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpu_sizer.cli import main

    monkeypatch.setenv(controlplane.ASSETS_ENV, str(tmp_path))
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert f"{controlplane.ASSETS_ENV}={tmp_path}: no executable etcd, kube-apiserver" in err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "-1"], "argument --port: must be a TCP port from 0 to 65535, not -1"),
        (["--port", "70000"], "argument --port: must be a TCP port from 0 to 65535, not 70000"),
        (["--kubeconfig", "/proc/nope/k"], "--kubeconfig /proc/nope/k: directory /proc/nope does"),
        (["--examples", "/nonexistent"], "--examples /nonexistent: no such directory"),
    ],
)
def test_unusable_flags_are_said_before_anything_starts(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """Each names the flag and the path or value as given, exits 2 (a usage error, never 0),
    and prints no traceback; nothing was started for it (no API server, no operator)."""
    done = _demo(tmp_path, *args)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out[-2000:]
    assert said in out and "Traceback" not in out, out[-2000:]
    assert "Kubernetes API" not in out and "operator started" not in out


def test_examples_directory_without_yaml_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _demo(tmp_path, "--examples", str(empty))
    assert done.returncode == 2
    assert f"--examples {empty}: no *.yaml files in this directory" in done.stderr
