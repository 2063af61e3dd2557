"""KV cache per token and for the configured sequences."""

from __future__ import annotations

import json
from pathlib import Path

from tests.architectures import GEMMA2_9B, LLAMA_3_8B, LLAMA_3_70B, MISTRAL_7B, OPT_13B, arch

from gpu_sizer.api import Architecture
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.budget.kv_cache import kv_cache_bytes, kv_geometry, kv_token_bytes

CONFIGS = Path(__file__).parent / "configs"


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
    geometry = kv_geometry(arch(LLAMA_3_8B), 2, 1, 1)
    per = geometry.bytes_per_token
    assert kv_cache_bytes(geometry, 8192, 16) == (per * 8192 * 16, 8192 * 16)


def test_sliding_window_caps_tokens_per_sequence() -> None:
    """Mistral-7B-v0.1 keeps at most its 4096-token window per sequence."""
    geometry = kv_geometry(arch(MISTRAL_7B), 2, 1, 1)
    per = geometry.bytes_per_token
    assert kv_cache_bytes(geometry, 32768, 2) == (per * 4096 * 2, 4096 * 2)
    assert kv_cache_bytes(geometry, 2048, 2) == (per * 2048 * 2, 2048 * 2)


def test_gemma2_caps_only_its_local_layers() -> None:
    geometry = kv_geometry(arch(GEMMA2_9B), 2, 1, 1)
    per_layer = geometry.bytes_per_token // 42
    nbytes, tokens = kv_cache_bytes(geometry, 8192, 1)
    assert nbytes == per_layer * (21 * 4096 + 21 * 8192)
    assert tokens == 8192


def _hf(name: str) -> Architecture:
    """An architecture from a published config.json fixture (tests/budget/configs)."""
    doc = json.loads((CONFIGS / f"{name}.json").read_text())
    doc.pop("_source")
    doc.pop("quantization_config", None)
    return Architecture.model_validate(model_from_hf_config(doc)["architecture"])


def test_mla_caches_the_latent_once_per_layer() -> None:
    """vLLM issue 15871 (vllm-project/vllm#15871): DeepSeek-V2-Lite caches kv_lora_rank +
    qk_rope_head_dim = 576 elements per token and layer, 576 x 2 B x 27 = 31,104 B in bf16;
    as multi-head attention (the config's 16 KV heads of hiddenSize / heads = 128 for keys and
    values) it would be 221,184 B. The latent is replicated on every tensor-parallel rank."""
    a = _hf("deepseek-v2-lite")
    assert kv_token_bytes(a, 2, 1, 1) == 31_104
    assert 2 * 27 * 16 * 128 * 2 == 221_184
    assert kv_token_bytes(a, 2, tp=2, pp=1) == 31_104
    assert kv_token_bytes(a, 1, 1, 1) == 15_552
    v3 = _hf("deepseek-v3")
    assert kv_token_bytes(v3, 2, tp=8, pp=1) == 61 * 576 * 2


def test_gpt_oss_caps_its_sliding_layers_at_128_tokens() -> None:
    """gpt-oss-20b: 12 sliding layers (window 128) and 12 full layers of 8 KV heads x 64."""
    geometry = kv_geometry(_hf("gpt-oss-20b"), 2, 1, 1)
    per_layer = 2 * 8 * 64 * 2
    by_kind = {g.kind: g for g in geometry.groups}
    assert (by_kind["sliding"].layers, by_kind["full"].layers) == (12, 12)
    assert by_kind["sliding"].token_cap == 128
    nbytes, _ = kv_cache_bytes(geometry, 32768, 4)
    assert nbytes == 4 * per_layer * (12 * 128 + 12 * 32768)


def test_gemma3_keeps_full_context_only_on_every_sixth_layer() -> None:
    """Gemma 3 27B: 52 local layers of 1024 tokens, 10 global layers (sliding_window_pattern 6)."""
    geometry = kv_geometry(_hf("gemma-3-27b-it"), 2, 1, 1)
    per_layer = 2 * 16 * 128 * 2
    nbytes, tokens = kv_cache_bytes(geometry, 131072, 1)
    assert nbytes == per_layer * (52 * 1024 + 10 * 131072)
    assert tokens == 131072


def test_llama4_chunked_layers_hold_one_chunk() -> None:
    """Llama 4 Scout: 36 chunked layers hold at most 8192 tokens, every fourth layer is global."""
    geometry = kv_geometry(_hf("llama-4-scout-17b-16e-instruct"), 2, 1, 1)
    per_layer = 2 * 8 * 128 * 2
    nbytes, _ = kv_cache_bytes(geometry, 1_000_000, 1)
    assert nbytes == per_layer * (36 * 8192 + 12 * 1_000_000)


def test_mamba_state_is_per_sequence_and_padded_to_the_attention_page() -> None:
    """NVIDIA-Nemotron-Nano-9B-v2: 27 Mamba-2 layers hold a fixed state per sequence: conv
    3 x (10240 + 2 x 8 x 128) + SSM 128 heads x 80 x 128, in bf16 2,695,168 B; vLLM grows the
    attention block to 672 tokens so one attention page (672 x 4096 B) holds it
    (vllm-project/vllm#24280: "672 tokens for nvidia/NVIDIA-Nemotron-Nano-9B-v2") and pads the
    state to that page. The 4 attention layers cache 2 x 8 x 128 x 2 B per token each."""
    geometry = kv_geometry(_hf("nvidia-nemotron-nano-9b-v2"), 2, 1, 1, state_bytes=2)
    assert (3 * 12288 + 128 * 80 * 128) * 2 == 2_695_168
    assert geometry.bytes_per_token == 4 * 4096
    assert geometry.bytes_per_sequence == 27 * 672 * 4096
    nbytes, _ = kv_cache_bytes(geometry, 8192, 3)
    assert nbytes == 3 * (8192 * 4 * 4096 + 27 * 672 * 4096)


def test_jamba_mamba1_state() -> None:
    """Jamba-v0.1: 28 Mamba-1 layers, inner 8192: conv 8192 x 3 + SSM 8192 x 16 per sequence;
    4 attention layers of 8 KV heads x 128."""
    geometry = kv_geometry(_hf("jamba-v0.1"), 2, 1, 1, state_bytes=2)
    state = (8192 * 3 + 8192 * 16) * 2
    page = 16 * 2 * 8 * 128 * 2
    assert geometry.bytes_per_sequence == 28 * -(-state // page) * page
    assert geometry.bytes_per_token == 4 * 2 * 8 * 128 * 2
