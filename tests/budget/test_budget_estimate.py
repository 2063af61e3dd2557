"""The assembled estimate: every component filled, declared GPUs only, honest without a shape."""

from __future__ import annotations

from typing import Any

from tests.architectures import GEMMA_7B, LLAMA_2_7B, LLAMA_3_8B, LLAMA_3_70B, MIXTRAL_8X7B

from gpu_sizer.api import EstimateStatus, parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.budget.engines.common import COMM_GROUP_BYTES
from gpu_sizer.budget.runtime import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    CUDA_GRAPH_BASE_BYTES,
)

GIB = 1 << 30


def _serve(architecture: dict[str, Any], **inference: Any) -> EstimateStatus:
    model: dict[str, Any] = {"architecture": architecture}
    if "quantization" in inference:
        model["quantization"] = inference.pop("quantization")
    return estimate(
        parse_spec(
            {"model": model, "inference": {"maxModelLen": 8192, "maxNumSeqs": 16, **inference}}
        )
    )


def _sum(est: EstimateStatus) -> int:
    g = est.per_gpu
    return (
        g.weights_bytes
        + g.quantization_overhead_bytes
        + g.kv_cache_bytes
        + g.activation_bytes
        + g.gradient_bytes
        + g.optimizer_state_bytes
        + g.master_weight_bytes
        + g.communication_buffer_bytes
        + g.runtime_overhead_bytes
    )


def test_seed_example_through_estimate() -> None:
    """13,000,000,000 parameters in a 16-bit format: 26,000,000,000 bytes, about 24.2 GiB."""
    est = estimate(
        parse_spec(
            {
                "model": {"parameterCount": 13_000_000_000, "dtype": "float16"},
                "inference": {"maxModelLen": 4096, "maxNumSeqs": 1},
            }
        )
    )
    assert est.per_gpu.weights_bytes == 26_000_000_000
    assert f"{est.per_gpu.weights_bytes / GIB:.1f} GiB" == "24.2 GiB"


def test_without_architecture_the_kv_cache_is_missing_not_a_guess() -> None:
    """The KV cache and activations are 0 and listed as missing data, with the fields they need."""
    est = estimate(
        parse_spec(
            {
                "model": {"parameterCount": 13_000_000_000},
                "inference": {"maxModelLen": 4096, "maxNumSeqs": 8},
            }
        )
    )
    assert est.per_gpu.kv_cache_bytes == 0 and est.per_gpu.activation_bytes == 0
    assert est.kv_cache_bytes_per_token == 0
    assert not est.complete
    missing = {m.component: m for m in est.missing_components}
    assert set(missing) == {"kvCacheBytes", "activationBytes"}
    assert missing["kvCacheBytes"].fields == [
        "spec.model.architecture.numHiddenLayers",
        "spec.model.architecture.numKeyValueHeads",
        "spec.model.architecture.headDim",
    ]
    assert all("import-hf-config" in m.fix for m in missing.values())
    # the component names are perGpu fields: consumers can look the figure up
    wire = est.per_gpu.model_dump(by_alias=True)
    assert all(wire[m] == 0 for m in missing)


def test_training_without_architecture_misses_only_activations() -> None:
    est = estimate(
        parse_spec(
            {
                "model": {"parameterCount": 7_000_000_000},
                "training": {"microBatchSize": 1, "sequenceLength": 2048},
            }
        )
    )
    assert [m.component for m in est.missing_components] == ["activationBytes"]
    assert est.per_gpu.optimizer_state_bytes > 0  # model states follow from the count


def test_an_architecture_makes_the_estimate_complete() -> None:
    assert _serve(LLAMA_3_8B).complete


def test_llama_3_8b_on_transformers_bf16() -> None:
    """An on-demand runtime holds maxNumSeqs x maxModelLen tokens of KV cache."""
    est = _serve(LLAMA_3_8B, engine="transformers")
    g = est.per_gpu
    assert est.parameter_count == 8_030_261_248
    assert est.gpu_count == 1
    assert g.weights_bytes == 2 * 8_030_261_248
    assert est.kv_cache_bytes_per_token == 131_072
    assert est.kv_cache_tokens == 8192 * 16
    assert g.kv_cache_bytes == 16 * GIB
    assert g.activation_bytes > 0
    assert g.runtime_overhead_bytes > CUDA_CONTEXT_BYTES + CUBLAS_WORKSPACE_BYTES
    assert g.total_bytes == _sum(est)
    assert est.notes == []


def test_llama_3_8b_on_vllm_without_a_class_is_the_target_concurrency() -> None:
    """Class-independent, a pre-allocating engine's estimate is what its pool must hold:
    targetConcurrency requests of maxModelLen tokens (the pool itself depends on the GPU)."""
    one = _serve(LLAMA_3_8B)
    assert one.kv_cache_tokens == 8192
    assert one.per_gpu.kv_cache_bytes == 1 * GIB
    four = _serve(LLAMA_3_8B, targetConcurrency=4)
    assert four.per_gpu.kv_cache_bytes == 4 * GIB
    assert one.kv_cache_capacity_tokens is None and one.gpu_class is None


def test_llama_3_70b_fp8_over_four_gpus() -> None:
    est = _serve(LLAMA_3_70B, tensorParallelSize=4, quantization={"method": "fp8"})
    g = est.per_gpu
    assert est.gpu_count == 4
    layer_matrices = 80 * (2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    bf16 = 2 * (2 * 128256 * 8192) // 4 + 2 * (80 * 2 * 8192 + 8192)
    assert g.weights_bytes == layer_matrices // 4 + bf16
    assert g.quantization_overhead_bytes == 80 * 7 * 4
    assert est.kv_cache_bytes_per_token == 80 * 2 * 2 * 128 * 2


def test_mixtral_awq_reports_metadata_separately() -> None:
    est = _serve(MIXTRAL_8X7B, quantization={"method": "awq", "groupSize": 128})
    g = est.per_gpu
    assert 0 < g.quantization_overhead_bytes < g.weights_bytes // 20
    # 4-bit experts: far below bf16, above a flat 4 bits per parameter (16-bit embeddings)
    assert g.weights_bytes + g.quantization_overhead_bytes > 46_702_792_704 // 2
    assert g.weights_bytes < 46_702_792_704


def test_enforce_eager_drops_the_cuda_graph_pool() -> None:
    graphs = _serve(LLAMA_3_8B).per_gpu.runtime_overhead_bytes
    eager = _serve(LLAMA_3_8B, enforceEager=True).per_gpu.runtime_overhead_bytes
    assert graphs - eager > CUDA_GRAPH_BASE_BYTES


def test_tensor_parallel_adds_nccl_and_splits_the_rest() -> None:
    one = _serve(LLAMA_3_8B, enforceEager=True).per_gpu
    two = _serve(LLAMA_3_8B, enforceEager=True, tensorParallelSize=2).per_gpu
    assert two.weights_bytes < one.weights_bytes
    assert two.kv_cache_bytes == one.kv_cache_bytes // 2
    assert two.runtime_overhead_bytes - COMM_GROUP_BYTES <= one.runtime_overhead_bytes


def test_transformers_prefills_every_sequence_at_once() -> None:
    vllm = _serve(LLAMA_3_8B).per_gpu.activation_bytes
    hf = _serve(LLAMA_3_8B, engine="transformers").per_gpu.activation_bytes
    assert hf > 10 * vllm


def test_max_num_batched_tokens_sets_the_prefill_chunk() -> None:
    small = _serve(LLAMA_3_8B, maxNumBatchedTokens=2048).per_gpu.activation_bytes
    large = _serve(LLAMA_3_8B, maxNumBatchedTokens=16384).per_gpu.activation_bytes
    assert large > 4 * small // 2


def test_prefill_chunk_never_exceeds_the_resident_tokens() -> None:
    """16 x 8192 tokens can be resident; a 1M-token chunk budget cannot be filled."""
    resident = _serve(LLAMA_3_8B, maxNumBatchedTokens=16 * 8192).per_gpu.activation_bytes
    huge = _serve(LLAMA_3_8B, maxNumBatchedTokens=1_000_000).per_gpu.activation_bytes
    assert huge == resident < 20 * GIB
    short = _serve(LLAMA_3_8B, maxModelLen=256, maxNumSeqs=2).per_gpu.activation_bytes
    chunk = _serve(LLAMA_3_8B, maxModelLen=256, maxNumSeqs=2, maxNumBatchedTokens=512)
    assert short == chunk.per_gpu.activation_bytes  # vLLM's default 8192 capped at 2 x 256


def test_training_counts_declared_gpus_only() -> None:
    spec = parse_spec(
        {
            "model": {"architecture": LLAMA_2_7B},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 4096,
                "parallelism": {
                    "strategy": "zero3",
                    "dataParallelSize": 4,
                    "tensorParallelSize": 2,
                    "pipelineParallelSize": 2,
                },
            },
        }
    )
    est = estimate(spec)
    assert est.gpu_count == 16
    assert est.kv_cache_bytes_per_token == 0
    assert est.trainable_parameter_count == 6_738_415_616
    assert est.per_gpu.total_bytes == _sum(est)


def test_parameter_count_disagreeing_with_architecture_is_noted() -> None:
    spec = parse_spec(
        {
            "model": {"architecture": LLAMA_3_8B, "parameterCount": 8_000_000_000},
            "inference": {"maxModelLen": 1024, "maxNumSeqs": 1},
        }
    )
    est = estimate(spec)
    assert est.parameter_count == 8_030_261_248
    assert any("differs" in n for n in est.notes)


def test_pipeline_stage_holds_its_layers_and_the_larger_end() -> None:
    """Llama-3-8B over 2 stages: 16 layers plus the embedding (first) or lm_head + norm (last)."""
    one = _serve(LLAMA_3_8B, enforceEager=True).per_gpu
    two = _serve(LLAMA_3_8B, enforceEager=True, pipelineParallelSize=2).per_gpu
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert two.weights_bytes == 2 * (16 * layer + 128256 * 4096 + 4096)
    assert two.kv_cache_bytes == one.kv_cache_bytes // 2


def test_tied_lm_head_is_copied_to_the_last_stage() -> None:
    """Gemma-7B ties lm_head to the embedding; a last pipeline stage still holds the matrix."""
    est = _serve(GEMMA_7B, maxModelLen=4096, enforceEager=True, pipelineParallelSize=2)
    layer = 4 * 3072 * 4096 + 3 * 3072 * 24576 + 2 * 3072
    assert est.per_gpu.weights_bytes == 2 * (14 * layer + 256000 * 3072 + 3072)


def test_quantized_without_architecture_is_approximate_and_says_so() -> None:
    est = estimate(
        parse_spec(
            {
                "model": {"parameterCount": 7_000_000_000, "quantization": {"method": "gptq"}},
                "inference": {"maxModelLen": 4096, "maxNumSeqs": 1},
            }
        )
    )
    # 4 bits per parameter, padded to whole 4096-wide rows
    assert 0 <= est.per_gpu.weights_bytes - 7_000_000_000 // 2 < 4096 * 4
    assert est.per_gpu.quantization_overhead_bytes > 0
    assert any("approximate" in n for n in est.notes)


def test_kv_cache_auto_follows_the_model_dtype() -> None:
    fp32 = estimate(
        parse_spec(
            {
                "model": {"architecture": LLAMA_3_8B, "dtype": "float32"},
                "inference": {"maxModelLen": 1024, "maxNumSeqs": 1},
            }
        )
    )
    assert fp32.kv_cache_bytes_per_token == 2 * 131_072
    assert _serve(LLAMA_3_8B, kvCacheDtype="fp8").kv_cache_bytes_per_token == 65_536


def test_adafactor_state_is_far_below_adamw() -> None:
    def optimizer_bytes(name: str) -> int:
        spec = parse_spec(
            {
                "model": {"architecture": LLAMA_2_7B},
                "training": {"microBatchSize": 1, "sequenceLength": 512, "optimizer": name},
            }
        )
        return estimate(spec).per_gpu.optimizer_state_bytes

    adamw = optimizer_bytes("adamw")
    assert adamw == 8 * 6_738_415_616
    assert optimizer_bytes("adafactor") < adamw // 100
    assert optimizer_bytes("adamw-8bit") < adamw // 3
