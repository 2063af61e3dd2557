"""Measurements of pre-allocating engines: the footprint scales with the GPU, the fraction moves.

A vLLM/SGLang/TGI process holds its fraction of the GPU plus what lies outside it; a measured
peak above the headroom says the outside part was underestimated. Moving to a larger class would
only grow the pool, so the recommendation keeps the class and lowers the fraction by the excess,
when the smaller pool still holds targetConcurrency requests.
"""

from __future__ import annotations

import copy
from typing import Any

from gpu_sizer.api import Phase, parse_spec
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.sizing.pool_verdict import class_plans
from tests.architectures import LLAMA_3_8B
from tests.controller.test_reconcile import cond, gpu_result, observe, start

GIB = 1 << 30
L4 = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-l4")


def vllm_on_l4(**inference: Any) -> dict[str, Any]:
    return {
        "model": {"name": "m", "architecture": copy.deepcopy(LLAMA_3_8B)},
        "inference": {"engine": "vllm", "maxModelLen": 4096, "maxNumSeqs": 16, **inference},
        "placement": {"gpuClasses": ["nvidia-l4"]},
    }


def test_estimate_recommendation_carries_the_engine_args() -> None:
    plan = start(vllm_on_l4())
    rec = plan.status.recommendation
    assert rec is not None and rec.engine_args is not None
    assert rec.engine_args["--gpu-memory-utilization"] == "0.86"
    assert rec.gpu_memory_bytes == L4.usable
    est = plan.status.estimate
    assert est is not None and est.gpu_class == "nvidia-l4" and est.kv_cache_capacity_tokens


def test_measured_within_the_headroom_keeps_the_engine_args() -> None:
    doc = vllm_on_l4()
    measuring = start(doc).status
    assert measuring.recommendation is not None
    done = observe(doc, measuring, gpu_result(int(0.88 * L4.usable)))
    rec = done.status.recommendation
    assert done.status.phase is Phase.Ready and rec is not None and rec.basis == "Measurement"
    assert rec.engine_args == measuring.recommendation.engine_args


def test_measured_above_the_headroom_lowers_the_fraction_on_the_same_class() -> None:
    doc = vllm_on_l4()
    measuring = start(doc).status
    peak = int(0.93 * L4.usable)  # 3 % of the GPU more than planned beyond the fraction
    done = observe(doc, measuring, gpu_result(peak))
    status = done.status
    assert status.phase is Phase.Ready
    headroom = cond(status, "HeadroomSufficient")
    assert headroom.status == "False" and headroom.reason == "FractionLowered"
    rec = status.recommendation
    assert rec is not None and rec.gpu_class == "nvidia-l4"
    assert rec.engine_args is not None
    lowered = float(rec.engine_args["--gpu-memory-utilization"])
    assert lowered <= 0.86 - 0.03
    assert rec.headroom_fraction >= 0.10
    assert "lowered from 0.86" in headroom.message


def test_measured_above_the_headroom_rejects_when_the_pool_would_fall_short() -> None:
    held = int(class_plans(parse_spec(vllm_on_l4()), [L4])[0].max_concurrency)
    doc = vllm_on_l4(targetConcurrency=held)
    measuring = start(doc).status
    done = observe(doc, measuring, gpu_result(int(0.97 * L4.usable)))
    assert done.status.phase is Phase.Rejected
    headroom = cond(done.status, "HeadroomSufficient")
    assert headroom.reason == "NoSafeHeadroom"
    assert "targetConcurrency" in headroom.message
