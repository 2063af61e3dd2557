"""The probe's KV pool for pre-allocating engines, sized by the engine's own formula. Pure part.

The GPU path (a profile forward pass, then the pool from ``cudaMemGetInfo``) runs only on a
GPU: hack/gpu-check.sh exercises it. Here the formulas, with the figures vLLM logs.
"""

from __future__ import annotations

import math

from gpu_sizer.api import Engine
from gpu_sizer.probe.inference import pool_bytes

GIB = 1 << 30


def test_vllm_pool_is_requested_less_non_kv_memory() -> None:
    """vllm-project/vllm#10511 (H100, Llama-3-8B, 0.9): 71.29 - 14.96 - 1.79 - 1.26 = 53.29."""
    total = round(79.22 * GIB)
    pool = pool_bytes(
        Engine.vllm,
        0.9,
        total=total,
        free_at_start=total,
        free_now=0,
        weights=round(14.96 * GIB),
        activation_peak=round(1.26 * GIB),
        non_torch_increase=round(1.79 * GIB),
    )
    expected = math.ceil(total * 0.9) - round(14.96 * GIB) - round(1.26 * GIB) - round(1.79 * GIB)
    assert pool == expected
    assert abs(pool / GIB - 53.29) < 0.02


def test_sglang_pool_is_free_memory_less_the_non_static_share() -> None:
    pool = pool_bytes(Engine.sglang, 0.83, total=80 * GIB, free_at_start=78 * GIB,
                      free_now=63 * GIB, weights=0, activation_peak=0,
                      non_torch_increase=0)  # fmt: skip
    assert pool == int(63 * GIB - 78 * GIB * (1 - 0.83))


def test_tgi_pool_is_free_memory_beyond_the_wiggle_room() -> None:
    pool = pool_bytes(Engine.tgi, 1.0, total=80 * GIB, free_at_start=79 * GIB, free_now=60 * GIB,
                      weights=0, activation_peak=0, non_torch_increase=0)  # fmt: skip
    assert pool == int(60 * GIB - (1 - 0.90) * 80 * GIB)
