"""KV cache per token and for the configured sequences."""

from __future__ import annotations

from tests.architectures import GEMMA2_9B, LLAMA_3_8B, LLAMA_3_70B, MISTRAL_7B, OPT_13B, arch

from gpu_sizer.budget.kv_cache import kv_cache_bytes, kv_token_bytes


def test_opt_13b_is_800_kib_per_token_in_fp16() -> None:
    """Kwon et al. 2023 (vLLM paper), section 3: 2 x 5120 x 40 x 2 bytes, "800 KB" per token."""
    assert kv_token_bytes(arch(OPT_13B), 2, tp=1, pp=1) == 2 * 40 * 5120 * 2 == 819_200


def test_gqa_stores_only_kv_heads() -> None:
    """Llama-3-8B: 8 KV heads of 128 over 32 layers, 128 KiB per token in bf16, half in fp8."""
    assert kv_token_bytes(arch(LLAMA_3_8B), 2, 1, 1) == 131_072
    assert kv_token_bytes(arch(LLAMA_3_8B), 1, 1, 1) == 65_536


def test_tensor_parallel_splits_then_replicates_kv_heads() -> None:
    a = arch(LLAMA_3_70B)
    assert kv_token_bytes(a, 2, tp=4, pp=1) == 80 * 2 * 2 * 128 * 2
    assert kv_token_bytes(a, 2, tp=8, pp=1) == 80 * 2 * 1 * 128 * 2
    # 8 KV heads on 16 ranks: each rank keeps one replicated head, nothing smaller.
    assert kv_token_bytes(arch({**LLAMA_3_70B, "numAttentionHeads": 64}), 2, 16, 1) == (
        kv_token_bytes(a, 2, 8, 1)
    )


def test_pipeline_stages_divide_layers() -> None:
    a = arch(LLAMA_3_70B)
    assert kv_token_bytes(a, 2, 1, pp=3) == 27 * 2 * 8 * 128 * 2


def test_sequences_times_context() -> None:
    a = arch(LLAMA_3_8B)
    per = kv_token_bytes(a, 2, 1, 1)
    assert kv_cache_bytes(a, per, 8192, 16, 1) == (per * 8192 * 16, 8192 * 16)


def test_sliding_window_caps_tokens_per_sequence() -> None:
    """Mistral-7B-v0.1 keeps at most its 4096-token window per sequence."""
    a = arch(MISTRAL_7B)
    per = kv_token_bytes(a, 2, 1, 1)
    assert kv_cache_bytes(a, per, 32768, 2, 1) == (per * 4096 * 2, 4096 * 2)
    assert kv_cache_bytes(a, per, 2048, 2, 1) == (per * 2048 * 2, 2048 * 2)


def test_gemma2_caps_only_its_local_layers() -> None:
    a = arch(GEMMA2_9B)
    per = kv_token_bytes(a, 2, 1, 1)
    per_layer = per // 42
    nbytes, tokens = kv_cache_bytes(a, per, 8192, 1, 1)
    assert nbytes == per_layer * (21 * 4096 + 21 * 8192)
    assert tokens == 8192
