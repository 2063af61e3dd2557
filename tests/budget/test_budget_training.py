"""Training memory: the ZeRO paper's model states, Korthikanti's activations, LoRA, optimizers."""

from __future__ import annotations

from typing import Any

import pytest
from tests.architectures import GPT_NEOX_20B, LLAMA_2_7B, LLAMA_3_8B, arch

from gpu_sizer.api import Optimizer, Training, parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.budget.params import layout
from gpu_sizer.budget.training import (
    activation_bytes,
    adapter_params,
    trainable_parameter_count,
)
from gpu_sizer.budget.training_precision import optimizer_state_bytes


def _training(**kw: Any) -> Training:
    return Training.model_validate({"microBatchSize": 1, "sequenceLength": 2048, **kw})


def test_korthikanti_equation_1_without_flash_attention() -> None:
    """Section 4.1: sbh(34 + 5as/h) per layer; GPT-NeoX-20B has I = 4h, GeLU, multi-head."""
    a = arch(GPT_NEOX_20B)
    s, b, h, heads = 2048, 1, 6144, 64
    tr = _training(flashAttention=False)
    assert activation_bytes(a, tr, layers=1) == s * b * h * 34 + 5 * heads * s * s * b


def test_korthikanti_equation_2_tensor_parallel() -> None:
    """Section 4.2.1: sbh(10 + 24/t + 5as/(ht)) per layer without sequence parallelism."""
    a = arch(GPT_NEOX_20B)
    s, b, h, heads, t = 2048, 1, 6144, 64, 8
    tr = _training(flashAttention=False, parallelism={"tensorParallelSize": t})
    assert activation_bytes(a, tr, 1) == s * b * h * (10 + 24 // t) + 5 * heads * s * s * b // t


def test_flash_attention_drops_the_score_term() -> None:
    a = arch(GPT_NEOX_20B)
    assert activation_bytes(a, _training(flashAttention=True), 1) == 2048 * 6144 * 34


def test_checkpointing_keeps_layer_inputs_plus_one_layer() -> None:
    """Full recomputation: 2sbh per layer, plus one layer's activations while recomputing."""
    a = arch(GPT_NEOX_20B)
    full = activation_bytes(a, _training(), 1)
    ckpt = activation_bytes(a, _training(activationCheckpointing=True), 44)
    assert ckpt == 44 * 2 * 2048 * 6144 + full


def test_gated_mlp_stores_four_intermediate_tensors() -> None:
    """Llama's SwiGLU: 2 bytes x 4 tensors of width I replace the paper's 16sbh; GQA shrinks K/V."""
    a = arch(LLAMA_3_8B)
    sbh = 2048 * 4096
    expected = sbh * 10 + 2048 * (4 * 4096 + 4 * 1024) + 2048 * 2 * 4 * 14336
    assert activation_bytes(a, _training(), 1) == expected
    assert expected != sbh * 34


def test_lora_on_llama_2_7b_q_and_v() -> None:
    """PEFT's print_trainable_parameters for Llama-2-7b, r=8, q_proj and v_proj:
    "trainable params: 4,194,304 || all params: 6,742,609,920"."""
    tr = _training(
        finetuning={"method": "lora", "loraRank": 8, "loraTargetModules": ["q_proj", "v_proj"]}
    )
    trainable = trainable_parameter_count(layout(arch(LLAMA_2_7B)), tr)
    assert trainable == 4_194_304
    assert 6_738_415_616 + trainable == 6_742_609_920


def test_lora_names_select_fused_projections() -> None:
    """On GPT-NeoX, q/k/v targets select the one fused query_key_value projection, once."""
    lay = layout(arch(GPT_NEOX_20B))
    adapters, _, _ = adapter_params(lay, 8, ["q_proj", "k_proj", "v_proj"])
    assert adapters == 44 * 8 * (6144 + 3 * 6144)
    assert adapter_params(lay, 8, ["query_key_value"])[0] == adapters


@pytest.mark.parametrize(
    ("optimizer", "state", "per_param"),
    [
        (Optimizer.adamw, 4, 8),
        (Optimizer.adamw, 2, 4),
        (Optimizer.sgd, 4, 0),
        (Optimizer.sgd_momentum, 4, 4),
        (Optimizer.lion, 4, 4),
    ],
)
def test_optimizer_state_per_parameter(optimizer: Optimizer, state: int, per_param: int) -> None:
    assert optimizer_state_bytes(optimizer, state, 1_000_000, 0, 0) == per_param * 1_000_000


def test_8bit_adam_is_two_bytes_plus_block_constants() -> None:
    """Dettmers et al. 2022: two uint8 states, one fp32 absmax per 256-element block each."""
    n = 256 * 4096
    assert optimizer_state_bytes(Optimizer.adamw_8bit, 4, n, 0, 0) == 2 * n + 2 * 4 * 4096
    # tensors under 4096 elements keep 32-bit states
    assert optimizer_state_bytes(Optimizer.adamw_8bit, 4, 100, 0, 100) == 800


def test_adafactor_factors_matrices() -> None:
    """Shazeer & Stern 2018, section 3: a 4096 x 4096 matrix keeps 4096 + 4096 fp32 values."""
    assert optimizer_state_bytes(Optimizer.adafactor, 4, 4096 * 4096, 8192, 0) == 4 * 8192


def _spec(**training: Any) -> Any:
    return parse_spec(
        {
            "model": {"architecture": LLAMA_2_7B},
            "training": {"microBatchSize": 1, "sequenceLength": 2048, **training},
        }
    )


def test_mixed_precision_full_finetune_model_states() -> None:
    """bf16-mixed AdamW with PyTorch-native training is PyTorch AMP: fp32 parameters (4),
    fp32 gradients (4) and AdamW's two fp32 states (8), no master copy; at the optimizer step
    (the peak without activations here: one micro-batch of 2048 tokens is small next to 16
    bytes per parameter) AdamW's foreach temporary adds one state's size as workspace."""
    est = estimate(_spec())
    g = est.per_gpu
    psi = 6_738_415_616
    assert g.weights_bytes == 4 * psi
    assert g.gradient_bytes == 4 * psi
    assert g.optimizer_state_bytes == 8 * psi
    assert g.master_weight_bytes == 0
    assert g.activation_bytes == 4 * psi  # exp_avg_sq.sqrt() over every parameter
    assert est.peak_phase == "Step"


def test_fp32_and_bf16_true_have_no_master_weights() -> None:
    assert estimate(_spec(precision="fp32")).per_gpu.master_weight_bytes == 0
    assert estimate(_spec(precision="bf16-true")).per_gpu.master_weight_bytes == 0


def test_lora_trains_only_adapters() -> None:
    """The frozen base stays in bf16 without gradients; PEFT's fp32 adapters are AMP's fp32
    parameters with fp32 gradients and states."""
    spec = _spec(
        finetuning={"method": "lora", "loraRank": 8, "loraTargetModules": ["q_proj", "v_proj"]}
    )
    est = estimate(spec)
    adapters = 4_194_304
    assert est.trainable_parameter_count == adapters
    g = est.per_gpu
    assert g.weights_bytes == 2 * 6_738_415_616 + 4 * adapters
    assert g.gradient_bytes == 4 * adapters
    assert g.optimizer_state_bytes == 8 * adapters
    assert g.master_weight_bytes == 0


def test_qlora_base_is_nf4() -> None:
    spec = parse_spec(
        {
            "model": {"architecture": LLAMA_2_7B, "quantization": {"method": "bitsandbytes-nf4"}},
            "training": {
                "microBatchSize": 1,
                "sequenceLength": 2048,
                "finetuning": {"method": "qlora"},
            },
        }
    )
    g = estimate(spec).per_gpu
    # 32 layers of 4-bit linears, embeddings/lm_head/norms in bf16, plus PEFT's fp32 adapters.
    linears = 6_738_415_616 - 2 * 32000 * 4096 - 4096 - 32 * 2 * 4096
    assert g.weights_bytes < linears // 2 + 2 * (6_738_415_616 - linears) + 4 * 20_000_000
    assert g.quantization_overhead_bytes > 0


def test_ddp_keeps_bucket_copies_of_gradients() -> None:
    """PyTorch DDP docs: without gradient_as_bucket_view the buckets copy every gradient; with
    it the gradients are views into the buckets."""
    none = estimate(_spec()).per_gpu.gradient_bytes
    ddp = estimate(_spec(parallelism={"strategy": "ddp", "dataParallelSize": 2})).per_gpu
    assert ddp.gradient_bytes == none
    assert ddp.communication_buffer_bytes == none
    view = {"strategy": "ddp", "dataParallelSize": 2, "ddp": {"gradientAsBucketView": True}}
    assert estimate(_spec(parallelism=view)).per_gpu.communication_buffer_bytes == 0


def test_fsdp_full_shard_shards_everything_and_gathers_units() -> None:
    """FSDP1 with MixedPrecision(param_dtype=bf16): fp32 shards, the root and two decoder layers
    gathered in bf16, the root's and one layer's bf16 gradients unsharded during backward."""
    psi = 6_738_415_616
    g = estimate(_spec(parallelism={"strategy": "fsdp-full-shard", "dataParallelSize": 8})).per_gpu
    lay = layout(arch(LLAMA_2_7B))
    gathered = (lay.embedding + lay.head + 2 * lay.largest_layer) * 2
    assert g.weights_bytes == -(-4 * psi // 8) + gathered
    assert g.gradient_bytes == -(-4 * psi // 8) + (lay.embedding + lay.head + lay.largest_layer) * 2
    assert g.optimizer_state_bytes == -(-8 * psi // 8)
    assert g.master_weight_bytes == 0
