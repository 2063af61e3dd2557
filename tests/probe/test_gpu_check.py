"""hack/gpu-check.sh: the CPU-reachable parts (matrix, estimate column, component isolation)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate

from .conftest import ROOT

GIB = 1 << 30


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "hack" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dry_run_writes_the_matrix_with_estimates(tmp_path: Path) -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "gpu-check.sh"), "--dry-run"],
        env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    table = (tmp_path / "gpu-check.md").read_text()
    gc = _gpu_check()
    assert set(gc.MATRIX) == {
        "llama8b-bf16",
        "llama8b-fp8kv",
        "llama1b-full",
        "llama1b-full-ckpt",
        "llama7b-lora",
        "deepseek-v2-lite-mla",
        "nemotron-nano-9b-hybrid",
        "llama8b-vllm-pool",  # issue 9: the pre-allocating engines' pools
        "llama8b-sglang-pool",
        "llama8b-tgi-pool",
        "llama1b-fsdp2",
        "llama1b-fsdp1",
        "llama1b-ddp",
        "llama1b-zero2",
    }
    for name, (_, doc) in gc.MATRIX.items():
        total = estimate(parse_spec(doc)).per_gpu.total_bytes
        assert f"| {name} | total: NVML peak less baseline | {total / GIB:.2f} | — | — |" in table
    assert "Not measured (dry run)" in table
    # Three concurrency levels for the 8B inference configurations.
    assert gc.MATRIX["llama8b-bf16"][1]["measurement"]["concurrencyLevels"] == [1, 8, 16]
    assert gc.MATRIX["llama8b-fp8kv"][1]["inference"]["kvCacheDtype"] == "fp8"


def test_components_are_isolated_from_phase_peaks() -> None:
    gc = _gpu_check()
    doc = gc.MATRIX["llama8b-bf16"][1]
    spec = parse_spec(doc)
    est = estimate(spec)
    result = {
        "peakAllocatedBytes": 32 * GIB,
        "peakReservedBytes": 33 * GIB,
        "peakDeviceUsedBytes": 35 * GIB,
        "nvml": {"devices": [{"baselineUsedBytes": GIB}]},
        "phases": [
            {"name": "load", "peakAllocatedBytes": 15 * GIB},
            {"name": "kv-cache", "peakAllocatedBytes": 31 * GIB},
            {"name": "prefill@16", "peakAllocatedBytes": 32 * GIB},
            {"name": "decode@16", "peakAllocatedBytes": 31 * GIB + GIB // 2},
        ],
    }
    rows = {name: (e, m) for name, e, m in gc.components(spec, est, result)}
    assert rows["weights (after load)"] == (est.per_gpu.weights_bytes, 15 * GIB)
    assert rows["KV cache allocation"] == (est.per_gpu.kv_cache_bytes, 16 * GIB)
    assert rows["activations (prefill/decode peak)"][1] == GIB
    assert rows["total: NVML peak less baseline"] == (est.per_gpu.total_bytes, 34 * GIB)
    assert gc._err(110, 100) == "+10.0%"
    assert gc._err(90, 100) == "-10.0%"
    assert gc._err(None, 100) == "—"


def test_script_refuses_without_cuda_instead_of_inventing_figures(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # pragma: no cover - GPU machine
        return
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "gpu-check.sh")],
        env={**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 3
    assert "no CUDA device" in proc.stderr
    assert not (tmp_path / "gpu-check.md").exists()


@pytest.mark.timeout(1600)  # seven probe runs; minutes on a loaded machine
def test_measuring_path_on_tiny_models(tmp_path: Path) -> None:
    """The non-dry path end to end (probe subprocesses, result parsing, table, overhead) on the
    CPU with tiny architectures; CPU runs carry no GPU figures, so those cells stay empty."""
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            str(ROOT / "hack" / "gpu_check.py"),
            "--tiny",
            "--out",
            str(tmp_path),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT / "operator")},
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr
    table = (tmp_path / "gpu-check.md").read_text()
    assert "TINY CPU PLUMBING RUN" in table
    for name in (
        "llama8b-bf16",
        "llama8b-fp8kv",
        "llama1b-full",
        "llama1b-full-ckpt",
        "llama7b-lora",
    ):
        assert f"- `{name}` " in table and ": Succeeded in " in table
        assert (tmp_path / "results" / f"{name}.json").exists()
    assert "| peak reserved (GiB) | — | — | — | — |" in table
    assert "not measurable here (no GPU figures)" in table
    assert (tmp_path / "results" / "overhead-sampler-100hz.json").exists()
