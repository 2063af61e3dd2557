"""A shared record is checked against the reader's own estimate and the class before it is
reused (gpu_sizer.records.checks): the forgeries of the attack run (a 3 GiB peak for
Llama-3-8B, whose bf16 weights alone are 14.96 GiB: 8,030,261,248 parameters x 2 bytes, the
model card; a 10**15-byte peak; an out-of-memory for a 1B model on an 80 GB GPU) fail, a genuine
measurement passes."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from gpu_sizer.api import MeasurementStatus, parse_spec
from gpu_sizer.api.record import GPUMeasurement, RecordScope, build_record, parse_record
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.records.checks import implausibilities
from gpu_sizer.records.sharing import candidate_keys
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_2_1B, LLAMA_3_8B

GIB = 1 << 30
NOW = datetime.datetime(2026, 12, 1, 2, 0, tzinfo=datetime.UTC)
CLASSES = {c.name: c for c in DEFAULT_CATALOG}
L4, A100 = CLASSES["nvidia-l4"], CLASSES["nvidia-a100-80gb"]


def spec_doc(arch: dict[str, Any], engine: str = "transformers") -> dict[str, Any]:
    return {
        "model": {"name": "m", "architecture": arch, "dtype": "bfloat16"},
        "inference": {"engine": engine, "maxModelLen": 2048, "maxNumSeqs": 4},
    }


def record(doc: dict[str, Any], cls: Any, **result: Any) -> GPUMeasurement:
    spec = parse_spec(doc)
    key = candidate_keys(spec, cls, probe_image="probe:1", drivers=())[0]
    fields: dict[str, Any] = {
        "spec_hash": "0" * 16,
        "gpu_class": cls.name,
        "gpu_memory_bytes": cls.memory_bytes,
        "device": "cuda",
        "started_at": "2026-12-01T01:50:00Z",
        "completed_at": "2026-12-01T01:55:00Z",
    }
    fields.update(result)
    body = build_record(
        key,
        spec,
        result=MeasurementStatus(**fields),
        source_namespace="tenant",
        source_name="forger",
        estimate=None,
        now=NOW - datetime.timedelta(minutes=1),
        ttl_seconds=86400,
        scope=RecordScope.Cluster,
    )
    parsed = parse_record(body)
    assert parsed is not None
    return parsed


def estimate(doc: dict[str, Any]) -> Any:
    est = assess(parse_spec(doc), DEFAULT_CATALOG).estimate
    assert est is not None
    return est


LLAMA_8B = spec_doc(LLAMA_3_8B)


def test_the_weights_of_llama_3_8b_are_what_the_model_card_says() -> None:
    assert estimate(LLAMA_8B).per_gpu.weights_bytes == pytest.approx(8_030_261_248 * 2, rel=0.01)


def test_a_genuine_measurement_is_plausible() -> None:
    est = estimate(LLAMA_8B)
    peak = est.per_gpu.total_bytes + GIB
    rec = record(
        LLAMA_8B,
        A100,
        peak_allocated_bytes=peak - 2 * GIB,
        peak_reserved_bytes=peak - GIB,
        peak_device_used_bytes=peak,
    )
    assert implausibilities(rec, A100, est, NOW) == []


def test_a_3_gib_peak_for_15_gib_of_weights_is_refused() -> None:
    rec = record(LLAMA_8B, L4, peak_device_used_bytes=3 * GIB, peak_allocated_bytes=3 * GIB)
    problems = implausibilities(rec, L4, estimate(LLAMA_8B), NOW)
    assert any("below 90% of the estimated weights" in p for p in problems), problems


def test_a_peak_beyond_the_device_is_refused_even_as_an_out_of_memory() -> None:
    for oom in (False, True):
        rec = record(LLAMA_8B, A100, peak_device_used_bytes=10**15, out_of_memory=oom)
        problems = implausibilities(rec, A100, estimate(LLAMA_8B), NOW)
        assert any("peakDeviceUsedBytes 1000000000000000 bytes is outside" in p for p in problems)


def test_an_out_of_memory_needs_an_estimate_that_fills_the_class() -> None:
    tiny = spec_doc(LLAMA_3_2_1B)
    forged = record(tiny, A100, out_of_memory=True, reason="OutOfMemory")
    problems = implausibilities(forged, A100, estimate(tiny), NOW)
    assert any("an out-of-memory on nvidia-a100-80gb" in p for p in problems), problems
    big = record(LLAMA_8B, L4, out_of_memory=True, reason="OutOfMemory")
    assert implausibilities(big, L4, estimate(LLAMA_8B), NOW) == []


def test_a_peak_far_over_the_estimate_is_refused_for_engines_that_do_not_preallocate() -> None:
    tiny = spec_doc(LLAMA_3_2_1B)
    est = estimate(tiny)
    rec = record(tiny, A100, peak_device_used_bytes=75 * GIB)
    assert any("over 3 times the estimate" in p for p in implausibilities(rec, A100, est, NOW))
    # vLLM takes its gpuMemoryUtilization of any GPU: 75 GiB of an 80 GB card is its pool.
    pool = spec_doc(LLAMA_3_2_1B, engine="vllm")
    pooled = record(pool, A100, peak_device_used_bytes=72 * GIB)
    assert implausibilities(pooled, A100, estimate(pool), NOW) == []


def test_consistency_of_the_record_itself() -> None:
    est = estimate(LLAMA_8B)
    peak = est.per_gpu.total_bytes
    swapped = record(LLAMA_8B, A100, peak_allocated_bytes=peak, peak_reserved_bytes=peak - GIB)
    assert any("exceeds peakReservedBytes" in p for p in implausibilities(swapped, A100, est, NOW))
    wrong_device = record(LLAMA_8B, A100, peak_device_used_bytes=peak, gpu_memory_bytes=24 * GIB)
    assert any("gpuMemoryBytes" in p for p in implausibilities(wrong_device, A100, est, NOW))
    other_class = record(LLAMA_8B, A100, peak_device_used_bytes=peak)
    assert any("is not the key's class" in p for p in implausibilities(other_class, L4, est, NOW))
    future = record(LLAMA_8B, A100, peak_device_used_bytes=peak)
    future.spec.recorded_at = "2027-06-01T00:00:00Z"
    assert any("in the future" in p for p in implausibilities(future, A100, est, NOW))
    reversed_times = record(
        LLAMA_8B, A100, peak_device_used_bytes=peak, started_at="2026-12-01T02:05:00Z"
    )
    assert any("startedAt is after" in p for p in implausibilities(reversed_times, A100, est, NOW))
    # startedAt is the operator's clock, completedAt the node's: 4 minutes apart is skew.
    skewed = record(LLAMA_8B, A100, peak_device_used_bytes=peak, started_at="2026-12-01T01:59:00Z")
    assert not any("startedAt" in p for p in implausibilities(skewed, A100, est, NOW))
