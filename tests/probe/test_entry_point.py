"""The invocation contract: spec sources, termination log handling, invalid input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpu_sizer.api import parse_spec, spec_hash, spec_to_wire

from .conftest import ROOT, inference_spec, run_probe


def test_spec_from_environment_and_gpu_class_recorded(tmp_path: Path) -> None:
    spec = inference_spec()
    # Exactly what the measurement Job puts in GPU_SIZER_SPEC: spec_to_wire, compact, sorted.
    wire = json.dumps(spec_to_wire(parse_spec(spec)), separators=(",", ":"), sort_keys=True)
    log = tmp_path / "log"
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.probe",
            "--termination-log",
            str(log),
            "--gpu-class",
            "nvidia-l4-24gb",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT / "operator"),
            "GPU_SIZER_SPEC": wire,
        },
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["gpuClass"] == "nvidia-l4-24gb"
    assert result["specHash"] == spec_hash(parse_spec(spec))
    assert json.loads(log.read_text())["status"] == "Succeeded"


def test_gpu_sizer_probe_subcommand_reads_stdin(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.cli",
            "probe",
            "--spec",
            "-",
            "--termination-log",
            str(tmp_path / "log"),
        ],
        input=json.dumps(inference_spec()),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "Succeeded"


def test_unwritable_termination_log_is_skipped_with_a_note(tmp_path: Path) -> None:
    code, result, _, _ = run_probe(
        inference_spec(),
        "--termination-log",
        "/nonexistent-dir/termination-log",
        tmp_path=tmp_path,
    )
    assert code == 0
    assert any("not writable" in note for note in result["notes"])


def test_invalid_spec_is_a_failed_result_naming_the_field(tmp_path: Path) -> None:
    spec = inference_spec(maxNumSeqs=0)
    code, result, log, _ = run_probe(spec, tmp_path=tmp_path)
    assert code == 2
    assert result["status"] == "Failed"
    assert "spec.inference.maxNumSeqs" in result["message"]
    assert json.loads(log)["status"] == "Failed"


def test_importing_the_probe_package_does_not_import_torch() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, gpu_sizer.probe.command, gpu_sizer.probe.command_mode, "
            "gpu_sizer.cli; print('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
    )
    assert proc.stdout.strip() == "False", proc.stderr


def test_device_cuda_without_a_gpu_fails_with_the_reason(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover - GPU machine
        return
    code, result, _, proc = run_probe(inference_spec(), "--device", "cuda", tmp_path=tmp_path)
    assert code == 1
    assert result["status"] == "Failed" and "sees no CUDA device" in result["message"]
    assert "Traceback" not in proc.stderr
