"""`gpu-sizer demo`, the README's main job, end to end: every workload settles, exit 0; and when
it cannot wait any longer, it says for which workloads and why."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_sizer_testbed import demo

ROOT = Path(__file__).resolve().parents[2]


def _demo(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, TMPDIR=str(tmp_path), **env)  # the operator's log goes to TMPDIR
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
def test_demo_settles_every_workload_despite_stray_settings(tmp_path: Path) -> None:
    # A GPU_SIZER_* variable left in the user's shell must not reconfigure the demo's operator
    # (GPU_SIZER_NAMESPACE with -A used to stop it at start-up, and the demo settled nothing).
    done = _demo(tmp_path, GPU_SIZER_NAMESPACE="nothing-here")
    out = done.stdout + done.stderr
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
