"""Tiny specs and helpers for the probe tests (CPU, torch 2.13.0 CPU build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

TINY_LLAMA: dict[str, Any] = {
    "modelType": "llama",
    "numHiddenLayers": 2,
    "hiddenSize": 64,
    "intermediateSize": 128,
    "numAttentionHeads": 4,
    "numKeyValueHeads": 2,
    "vocabSize": 256,
    "maxPositionEmbeddings": 512,
}


def inference_spec(arch: dict[str, Any] | None = None, **inference: Any) -> dict[str, Any]:
    inf = {"maxModelLen": 128, "maxNumSeqs": 4, "maxNumBatchedTokens": 256, **inference}
    return {
        "model": {"architecture": arch or TINY_LLAMA},
        "inference": inf,
        "measurement": {"concurrencyLevels": [1, inf["maxNumSeqs"]]},
    }


def training_spec(arch: dict[str, Any] | None = None, **training: Any) -> dict[str, Any]:
    tr = {"microBatchSize": 2, "sequenceLength": 32, "gradientAccumulationSteps": 2, **training}
    return {"model": {"architecture": arch or TINY_LLAMA}, "training": tr}


def run_probe(
    spec: dict[str, Any],
    *args: str,
    tmp_path: Path,
    env: dict[str, str] | None = None,
    timeout: float = 240,
) -> tuple[int, dict[str, Any], str, subprocess.CompletedProcess[str]]:
    """Run ``python -m gpu_sizer.probe`` in a subprocess; (exit status, stdout result,
    termination log text, the completed process)."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    log = tmp_path / "termination-log"
    full_env = {**os.environ, "PYTHONPATH": str(ROOT / "operator"), **(env or {})}
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.probe",
            "--spec",
            str(spec_file),
            "--termination-log",
            str(log),
            *args,
        ],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    result = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, result, log.read_text() if log.exists() else "", proc


@pytest.fixture(autouse=True)
def _quiet_numpy_warning() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
