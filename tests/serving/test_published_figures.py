"""Every published serving figure of ``tests.serving.figures`` against the engine plan.

Two checks per run: where the engine refused to start, gpu-sizer never admits the spec on that
GPU (the fail-safe rule: its plan refuses, or the verdict finds no safe headroom); where it
logged its KV pool, the planned pool is within the run's tolerance (``TOLERANCE``, with the
reason for any wider one). docs/accuracy.md tabulates the same runs (hack/serving-accuracy.py).
"""

from __future__ import annotations

import pytest

from gpu_sizer.budget.estimate import engine_plans
from gpu_sizer.sizing.pool_verdict import serves
from tests.serving.figures import FIGURES, GIB, Figure

#: Relative KV-pool tolerance per run (default 5 %).
TOLERANCE: dict[str, float] = {
    # V0 profile run on a 24 GB Ampere: the 20k-token unchunked prefill's reserved memory
    "vllm-10517-llama-3.1-8b-20k": 0.10,
    # vLLM 0.10 in the vllm/vllm-openai image, whose FlashInfer sampler warms up lighter than the
    # PyTorch path the plan takes for 0.8-0.10 (fail safe: the notes give the difference, and
    # tests/budget/test_engines.py checks the pool with it within 5 %)
    "vllm-22177-qwen3-coder-30b-bf16-tp8": 0.10,
    "vllm-22177-qwen3-coder-30b-fp8-tp8": 0.10,
    # vLLM 0.9 without FlashInfer (the native sampler path the plan takes): 8.60 GiB planned;
    # the other 0.49 GiB the run held is not identified (+6 %)
    "vllm-21348-qwen3-235b-fp8-tp4": 0.07,
    # DP8 x EP: the MoE activations gathered over 8 ranks are planned unchunked (safe side)
    "recipes-12-qwen3-coder-480b-dp8-ep-0.90": 0.16,
    "recipes-12-qwen3-coder-480b-dp8-ep-0.95": 0.16,
}


def _plan(figure: Figure):  # type: ignore[no-untyped-def]
    spec = figure.parsed()
    return spec, engine_plans(spec, [figure.gpu], spec.placement.min_headroom_fraction)[0]


def test_the_runs_are_half_moe_or_multi_gpu() -> None:
    """44 runs (30 MoE or multi-GPU), 48 checked quantities (37 logged pools, 11 refusals), on
    vLLM (V0, 0.8-0.10, 0.11, 0.19), SGLang and TGI; the issue asks for 30, half MoE or
    multi-GPU."""
    assert len(FIGURES) >= 44
    assert sum(f.moe_or_multi_gpu for f in FIGURES) * 2 >= len(FIGURES)
    figures = sum((f.kv_gib is not None) + f.refused for f in FIGURES)
    assert figures >= 48
    assert {f.engine for f in FIGURES} == {"vllm", "sglang", "tgi"}


@pytest.mark.parametrize("figure", [f for f in FIGURES if f.refused], ids=lambda f: f.id)
def test_a_run_the_engine_refused_is_never_admitted(figure: Figure) -> None:
    spec, plan = _plan(figure)
    assert not serves(spec, plan), (figure.source, plan)


# The llm-d row for gpt-oss-120b does not add up (64.38 GiB of weights + 7.38 of activations +
# 0.13 non-PyTorch + 3.33 of KV cache = 75.22 GiB > the 71.26 GiB budget); with vLLM's padded
# MXFP4 experts the plan refuses it: a false rejection, the safe side.
_SAFE_MISSES = {"llmd-gpt-oss-120b"}


@pytest.mark.parametrize(
    "figure",
    [f for f in FIGURES if f.kv_gib is not None and not f.refused],
    ids=lambda f: f.id,
)
def test_the_kv_pool_matches_the_engine_log(figure: Figure) -> None:
    _, plan = _plan(figure)
    assert figure.kv_gib is not None
    if figure.id in _SAFE_MISSES:
        assert plan.kv_pool / GIB < figure.kv_gib
        return
    assert plan.error is None, (figure.source, plan.error)
    error = (plan.kv_pool / GIB - figure.kv_gib) / figure.kv_gib
    assert abs(error) <= TOLERANCE.get(figure.id, 0.05), (figure.source, error)


@pytest.mark.parametrize(
    "figure", [f for f in FIGURES if f.kv_gib is not None and f.refused], ids=lambda f: f.id
)
def test_refused_runs_with_a_logged_pool_are_close_or_smaller(figure: Figure) -> None:
    """A refusal whose log names the pool: the planned pool is within tolerance or smaller
    (never larger by more than tolerance: that is the direction that admits)."""
    _, plan = _plan(figure)
    assert figure.kv_gib is not None
    pool = plan.kv_pool / GIB
    assert pool <= figure.kv_gib * (1 + TOLERANCE.get(figure.id, 0.05)) or plan.error
