"""What vLLM reserves per request, by release, from its source: the start check and "Maximum
concurrency" of sliding-window models under V1, V0's start check that ignores windows, and V0's
padded MLA entry. Each figure is derived by hand from the source named in its test."""

from __future__ import annotations

from typing import Any

from gpu_sizer.api import parse_spec
from gpu_sizer.budget.engines import EnginePlan
from gpu_sizer.budget.estimate import engine_plans
from gpu_sizer.catalog import GPUClass
from tests.architectures import MISTRAL_7B
from tests.serving.figures import BY_NAME, _hf, _serve

H100, L4 = BY_NAME["nvidia-h100-80gb"], BY_NAME["nvidia-l4"]


def _plan(doc: dict[str, Any], gpu: GPUClass = H100) -> EnginePlan:
    return engine_plans(parse_spec(doc), [gpu], 0.0)[0]


def test_v1_sliding_window_layers_reserve_the_window_behind_a_chunk_plus_a_block() -> None:
    """gpt-oss-20b (24 layers, 12 sliding over 128 tokens and 12 full; 8 KV heads of 64 in bf16:
    2,048 bytes per token and layer) at --max-model-len 131072 --max-num-batched-tokens 8192 on
    vLLM 0.19. ``SlidingWindowSpec.max_memory_usage_bytes`` (``v1/kv_cache_interface.py``):
    ``cdiv(min(128 - 1 + 8192, 131072), 16) + 1 = 521`` pages per sliding layer, 8,192 per full
    one; one request is ``12 x (8192 + 521) x 16 x 2048`` bytes = 4,357 blocks of the 786,432
    bytes a 16-token block takes over all 24 layers (``get_max_concurrency_for_kv_cache_config``).
    Counting only the window (8 pages) would give 4,100 blocks, 6 % more concurrency than vLLM
    reports: the optimistic side."""
    p = _plan(
        _serve(
            _hf("gpt-oss-20b"),
            maxModelLen=131072,
            maxNumBatchedTokens=8192,
            maxNumSeqs=64,
            gpuMemoryUtilization=0.9,
            engineVersion="0.19.1",
        )
    )
    assert p.start_error is None and p.kv_token_bytes == 24 * 2048
    block = 16 * 24 * 2048
    assert -(-12 * (8192 + 521) * 16 * 2048 // block) == 4357
    blocks = p.kv_pool // block
    assert p.capacity_tokens == blocks * 16
    assert p.max_concurrency == blocks / 4357
    assert p.max_concurrency < blocks / 4100


def test_v0_checks_max_model_len_against_the_pool_windows_or_not() -> None:
    """Mistral-7B-v0.1 (4,096-token window on every layer) at --max-model-len 32768 on an L4:
    vLLM 0.6's ``raise_if_cache_size_invalid`` (``worker/worker.py``) compares max_model_len with
    the tokens the pool stores, whatever the window, and its unchunked 32k-token profile run
    leaves about 20,800 of them: it refuses. V1 (0.11) chunks the prefill at 2,048 tokens on this
    class and checks one request's window-sized reservation: it starts."""
    inference = {"maxModelLen": 32768, "maxNumSeqs": 16, "gpuMemoryUtilization": 0.9}
    doc = {"model": {"architecture": MISTRAL_7B}, "inference": inference}
    v0 = _plan({**doc, "inference": {**doc["inference"], "engineVersion": "0.6.3"}}, L4)
    v1 = _plan({**doc, "inference": {**doc["inference"], "engineVersion": "0.11.0"}}, L4)
    assert v0.start_error is not None
    assert "max seq len (32768) is larger than the maximum number of tokens" in v0.start_error
    stored = int(v0.start_error.rsplit("(", 1)[1].rstrip(")"))
    assert 16_000 < stored < 32768
    assert v1.start_error is None and v1.capacity_tokens > 32768


def test_v0_pads_the_mla_entry_to_256_bytes() -> None:
    """DeepSeek-V2-Lite caches kv_lora_rank + qk_rope_head_dim = 576 elements per token and layer
    (1,152 bytes in bf16, 27 layers: 31,104 bytes a token under V1); vLLM 0.6's ``CacheEngine``
    allocates MLA caches with ``align_cache`` (``_allocate_kv_cache``: the entry rounded up to a
    multiple of 256 bytes), 1,280 bytes: 34,560 a token, 11 % fewer tokens in the same pool."""
    doc = _serve(_hf("deepseek-v2-lite"), maxModelLen=16384, maxNumSeqs=64,
                 gpuMemoryUtilization=0.9)  # fmt: skip
    v0 = _plan({**doc, "inference": {**doc["inference"], "engineVersion": "0.6.3"}})
    v1 = _plan({**doc, "inference": {**doc["inference"], "engineVersion": "0.11.0"}})
    assert (v0.kv_token_bytes, v1.kv_token_bytes) == (27 * 1280, 27 * 1152)
    assert v0.capacity_tokens == v0.kv_pool // (16 * 27 * 1280) * 16
