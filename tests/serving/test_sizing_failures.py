"""A spec that passes validation always gets a verdict: compressed-tensors checkpoints estimate on
every pre-allocating engine, and a forced failure inside sizing is a named denial and a status
reason, never an exception that leaves the webhook answering HTTP 500 or the object without
status."""

from __future__ import annotations

from typing import Any

import pytest

import gpu_sizer.sizing.verdict as sizing
from gpu_sizer.api import parse_spec
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.lifecycle import estimated_status
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess
from tests.api.test_hf_quantization import FP8_DYNAMIC, W4A16, W8A8_INT8

LLAMA_8B_HF = {
    "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}  # fmt: skip


def _spec(qc: dict[str, Any], engine: str) -> Any:
    model = model_from_hf_config({**LLAMA_8B_HF, "quantization_config": qc}, serving=True)
    return parse_spec(
        {"model": model, "inference": {"engine": engine, "maxModelLen": 8192, "maxNumSeqs": 16}}
    )


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tgi"])
@pytest.mark.parametrize(
    ("qc", "gib"),
    [(FP8_DYNAMIC, 8.5), (W8A8_INT8, 8.5), (W4A16, 5.2)],
    ids=["fp8", "w8a8", "w4a16"],
)
def test_compressed_tensors_checkpoints_estimate_on_every_engine(
    qc: dict[str, Any], gib: float, engine: str
) -> None:
    """FP8-dynamic, W8A8 and W4A16 as llm-compressor writes them (the configGroups dict once
    made the spec unhashable as a cache key: ``TypeError("unhashable type: 'dict'")``)."""
    a = assess(_spec(qc, engine))
    assert a.verdict is Verdict.Fits, a.message
    assert a.estimate.per_gpu.weights_bytes / (1 << 30) == pytest.approx(gib, abs=0.15)
    assert a.estimate.kv_cache_capacity_tokens


def _boom(*_: Any, **__: Any) -> None:
    raise TypeError("unhashable type: 'dict'")


def test_a_forced_failure_is_a_status_reason_for_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = _spec(FP8_DYNAMIC, "vllm")
    monkeypatch.setattr(sizing, "assess_or_raise", _boom)
    a = assess(spec)
    assert a.verdict is Verdict.SizingFailed and a.recommendation is None
    assert "TypeError: unhashable type: 'dict'" in a.message
    status = estimated_status(spec, a, spec_hash="h", generation=1, now="2026-12-01T00:00:00Z")
    assert status.phase.value == "Rejected"
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.reason == "SizingFailed" and "gpu-sizer bug" in ready.message
