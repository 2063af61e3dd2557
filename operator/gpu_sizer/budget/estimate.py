"""Assemble the per-GPU budget of a spec.  (PLACEHOLDER first cut, replaced by the full model.)"""

from __future__ import annotations

from gpu_sizer.api import DTYPE_BYTES, EstimateStatus, GPUWorkloadSpec, PerGpuBreakdown

GIB = 1 << 30


def estimate(spec: GPUWorkloadSpec) -> EstimateStatus:
    """Per-GPU memory budget of ``spec`` in bytes, on the most loaded GPU."""
    arch = spec.model.architecture
    if arch is not None:
        h, layers = arch.hidden_size, arch.num_hidden_layers
        kvh = arch.kv_heads * arch.head_size
        per_layer = h * (arch.num_attention_heads * arch.head_size) * 2 + h * kvh * 2
        per_layer += 3 * h * arch.intermediate_size * (arch.num_local_experts or 1) + 2 * h
        params = layers * per_layer + arch.vocab_size * h * (1 if arch.tie_word_embeddings else 2)
        params += h
    else:
        assert spec.model.parameter_count is not None
        params = spec.model.parameter_count
    dtype_bytes = DTYPE_BYTES[spec.model.dtype]
    gpus = spec.gpu_count
    weights = params * dtype_bytes // gpus
    kv_per_token = 0
    kv_tokens = None
    kv = 0
    if spec.inference is not None and arch is not None:
        kv_per_token = (
            2 * arch.num_hidden_layers * arch.kv_heads * arch.head_size * dtype_bytes // gpus
        )
        kv_tokens = spec.inference.max_num_seqs * spec.inference.max_model_len
        kv = kv_per_token * kv_tokens
    overhead = 2 * GIB
    total = weights + kv + overhead
    return EstimateStatus(
        parameter_count=params,
        gpu_count=gpus,
        kv_cache_bytes_per_token=kv_per_token,
        kv_cache_tokens=kv_tokens,
        per_gpu=PerGpuBreakdown(
            weights_bytes=weights,
            kv_cache_bytes=kv,
            runtime_overhead_bytes=overhead,
            total_bytes=total,
        ),
    )
