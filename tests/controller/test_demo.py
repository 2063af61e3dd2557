"""`gpu-sizer demo`, the README's main job, end to end: every workload settles, exit 0."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_settles_every_workload_despite_stray_settings() -> None:
    # A GPU_SIZER_* variable left in the user's shell must not reconfigure the demo's operator
    # (GPU_SIZER_NAMESPACE with -A used to stop it at start-up, and the demo settled nothing).
    env = dict(os.environ, GPU_SIZER_NAMESPACE="nothing-here")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "operator"), env.get("PYTHONPATH")])
    )
    done = subprocess.run(
        [sys.executable, "-m", "gpu_sizer.cli", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    settled = re.search(r"^(\d+)/(\d+) workloads settled", out, re.MULTILINE)
    assert settled and settled.group(1) == settled.group(2), out[-4000:]
    assert int(settled.group(2)) >= 10  # nine examples and the built-in CPU smoke run
    assert "cpu-smoke" in out and "NoSafeHeadroom" in out
