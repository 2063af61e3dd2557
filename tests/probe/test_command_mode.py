"""Command mode: pass-through, exit status, deadline, vLLM report and OOM lines (no GPU)."""

from __future__ import annotations

import io
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_sizer.measurement.result import parse_result
from gpu_sizer.probe.command_mode import TIMEOUT_EXIT_CODE, run_command
from gpu_sizer.probe.nvml import NvmlSampler

from .conftest import inference_spec, run_probe


def _command_spec(code: str, timeout: int = 60) -> dict[str, Any]:
    spec = inference_spec()
    spec["measurement"] = {
        "mode": "Command",
        "command": [sys.executable, "-c", textwrap.dedent(code)],
        "timeoutSeconds": timeout,
    }
    return spec


def test_success_passes_output_through_to_stderr(tmp_path: Path) -> None:
    code, result, log, proc = run_probe(
        _command_spec("print('hello from the workload')"), tmp_path=tmp_path
    )
    assert code == 0
    assert "hello from the workload" in proc.stderr
    assert "hello from the workload" not in proc.stdout  # stdout is the result document only
    assert result["status"] == "Succeeded" and result["mode"] == "Command"
    assert result["exitCode"] == 0
    # No GPU here: the basis is the command's peak RSS, and NVML says why it is absent.
    assert result["device"] == "cpu" and result["peakRssBytes"] > 0
    assert "peakDeviceUsedBytes" not in result
    assert result["nvml"]["available"] is False
    assert parse_result(log).status == "Succeeded"


def test_exit_status_is_propagated(tmp_path: Path) -> None:
    code, result, _, _ = run_probe(_command_spec("import sys; sys.exit(3)"), tmp_path=tmp_path)
    assert code == 3
    assert result["status"] == "Failed" and result["exitCode"] == 3
    assert "status 3" in result["message"]


def test_signal_death_maps_to_128_plus_signal(tmp_path: Path) -> None:
    code, result, _, _ = run_probe(
        _command_spec("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
        tmp_path=tmp_path,
    )
    assert code == 137 and result["exitCode"] == 137


def test_missing_command_is_a_failed_result(tmp_path: Path) -> None:
    spec = _command_spec("")
    spec["measurement"]["command"] = ["/nonexistent/workload"]
    code, result, _, _ = run_probe(spec, tmp_path=tmp_path)
    assert code == 1
    assert result["status"] == "Failed" and "cannot run" in result["message"]


def test_deadline_stops_the_command(tmp_path: Path) -> None:
    # The command would serve for 600 s; only the 1 s deadline ends it before run_probe's own
    # timeout, so a Timeout result proves the deadline stopped it.
    code, result, log, _ = run_probe(
        _command_spec("import time\nprint('serving', flush=True)\ntime.sleep(600)"),
        "--deadline-seconds",
        "1",
        tmp_path=tmp_path,
    )
    assert code == TIMEOUT_EXIT_CODE
    assert result["status"] == "Timeout" and result["exitCode"] == TIMEOUT_EXIT_CODE
    assert "deadline" in result["message"]
    assert parse_result(log).status == "Timeout"


def test_sigterm_ignored_escalates_to_sigkill() -> None:
    code = textwrap.dedent(
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print('ready', flush=True)
        time.sleep(600)
        """
    )
    sink = io.StringIO()
    # The 10 s deadline leaves the interpreter ample time to ignore SIGTERM first ('ready');
    # the command sleeps 600 s, so returning at all means SIGKILL ended it.
    outcome = run_command(
        [sys.executable, "-c", code],
        deadline=time.monotonic() + 10.0,
        sampler=NvmlSampler(0),
        grace_seconds=0.5,
        sink=sink,
    )
    assert outcome.timed_out and outcome.exit_code == TIMEOUT_EXIT_CODE
    assert "ready" in sink.getvalue()


def test_vllm_report_and_oom_lines_are_read_from_the_output(tmp_path: Path) -> None:
    lines = [
        "INFO 09-21 12:30:37 [gpu_model_runner.py:2581] Model loading took 14.99 GiB and 4.1 "
        "seconds",
        "INFO 09-21 12:30:52 [gpu_worker.py:298] Available KV cache memory: 54.96 GiB",
        "INFO 09-21 12:30:52 [kv_cache_utils.py:864] GPU KV cache size: 450,224 tokens",
    ]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB."
    script = (
        "import sys\n"
        + "".join(f"print({line!r})\n" for line in lines)
        + f"print({oom!r}, file=sys.stderr)\nsys.exit(1)\n"
    )
    code, result, _, _ = run_probe(_command_spec(script), tmp_path=tmp_path)
    assert code == 1
    assert result["status"] == "OutOfMemory" and result["outOfMemory"] is True
    assert result["oomRequestedBytes"] == int(1.5 * (1 << 30))
    assert result["vllm"]["modelLoadingBytes"] == round(14.99 * (1 << 30))
    assert result["vllm"]["kvCacheBytes"] == round(54.96 * (1 << 30))
    assert result["vllm"]["kvCacheTokens"] == 450_224


@pytest.mark.parametrize("hz", [0.0, 100.0])
def test_sampler_without_nvml_reports_a_reason(hz: float) -> None:
    sampler = NvmlSampler(hz).start()
    sampler.stop()
    info = sampler.info()
    if info.available:  # pragma: no cover - a machine with a GPU
        pytest.skip("NVML is available here")
    assert info.reason
    assert sampler.peak_used() is None
