"""Inference KV cache: bytes per token and for the configured sequences. Pure.

Per token, every attention layer keeps one key and one value vector per KV head
(Kwon et al. 2023, "Efficient Memory Management for Large Language Model Serving with
PagedAttention", section 3: OPT-13B needs 2 x 40 layers x 5120 x 2 bytes = 800 KiB per token):

    bytes/token = 2 x layers x kv_heads x head_dim x bytes(kvCacheDtype)

- GQA/MQA store only ``numKeyValueHeads`` heads (Ainslie et al. 2023; Shazeer 2019).
- Tensor parallelism splits KV heads across ranks; with fewer KV heads than ranks each rank keeps
  one replicated head (vLLM ``QKVParallelLinear``: ``num_kv_head_replicas``).
- Pipeline parallelism splits layers; the most loaded stage holds ``ceil(layers / pp)``.
- ``kvCacheDtype`` ``fp8``/``fp8_e4m3``/``fp8_e5m2`` store one byte per element (vLLM docs,
  "Quantized KV Cache"); ``auto`` uses the model's activation dtype (16-bit when the weights are
  8-bit).
- Sliding-window attention (Mistral-7B-v0.1, Gemma 2's local layers) never needs more than the
  window per sequence (vLLM frees blocks outside the window). Gemma 2 alternates local and global
  layers (``modeling_gemma2.py``: even layers slide), so only half its layers are capped.

All results are bytes or tokens, on the most loaded GPU.
"""

from __future__ import annotations

from gpu_sizer.api import DTYPE_BYTES, Architecture, Inference, KvCacheDtype, Model

__all__ = ["kv_cache_bytes", "kv_element_bytes", "kv_layers_per_gpu", "kv_token_bytes"]


def kv_element_bytes(model: Model, inference: Inference) -> int:
    """Bytes per cached element for ``kvCacheDtype``."""
    if inference.kv_cache_dtype is not KvCacheDtype.auto:
        return 1
    return max(2, DTYPE_BYTES[model.dtype])


def kv_layers_per_gpu(arch: Architecture, pp: int) -> int:
    """Decoder layers on the most loaded pipeline stage."""
    return -(-arch.num_hidden_layers // pp)


def kv_token_bytes(arch: Architecture, element_bytes: int, tp: int, pp: int) -> int:
    """KV cache bytes per token on the most loaded GPU (all its layers, uncapped)."""
    kv_heads = max(1, arch.kv_heads // tp)
    return 2 * kv_layers_per_gpu(arch, pp) * kv_heads * arch.head_size * element_bytes


def kv_cache_bytes(
    arch: Architecture, token_bytes: int, max_model_len: int, max_num_seqs: int, pp: int
) -> tuple[int, int]:
    """(bytes, tokens) of the KV cache for ``maxNumSeqs`` sequences of ``maxModelLen`` tokens.

    ``tokens`` is the per-layer token capacity (window-capped when every layer slides); bytes
    account for Gemma 2's mixed local/global layers exactly.
    """
    window = arch.sliding_window
    full_tokens = max_model_len * max_num_seqs
    if window is None or window >= max_model_len:
        return token_bytes * full_tokens, full_tokens
    capped = window * max_num_seqs
    if arch.model_type == "gemma2":
        layers = kv_layers_per_gpu(arch, pp)
        per_layer = token_bytes // layers
        local = layers // 2
        return per_layer * (local * capped + (layers - local) * full_tokens), full_tokens
    return token_bytes * capped, capped
