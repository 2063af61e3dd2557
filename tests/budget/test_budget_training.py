"""Training memory: the ZeRO paper's model states, Korthikanti's activations, LoRA, optimizers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.architectures import GPT_NEOX_20B, LLAMA_2_7B, LLAMA_3_8B, arch

from gpu_sizer.api import Architecture, Optimizer, Training, parse_spec
from gpu_sizer.api.hf import model_from_hf_config
from gpu_sizer.budget import estimate
from gpu_sizer.budget.params import Layout, layout
from gpu_sizer.budget.training import (
    activation_bytes,
    adapter_params,
    layer_activation_bytes,
    trainable_parameter_count,
)
from gpu_sizer.budget.training_precision import optimizer_state_bytes


def _training(**kw: Any) -> Training:
    return Training.model_validate({"microBatchSize": 1, "sequenceLength": 2048, **kw})


def _layers(a: Architecture, n: int, tp: int = 1) -> Layout:
    """The tensor-parallel rank's layout of the first ``n`` layers of ``a``."""
    return layout(a, tp, range(n))


def test_korthikanti_equation_1_without_flash_attention() -> None:
    """Section 4.1: sbh(34 + 5as/h) per layer; GPT-NeoX-20B has I = 4h, GeLU, multi-head."""
    a = arch(GPT_NEOX_20B)
    s, b, h, heads = 2048, 1, 6144, 64
    tr = _training(flashAttention=False)
    assert activation_bytes(a, tr, _layers(a, 1)) == s * b * h * 34 + 5 * heads * s * s * b


def test_korthikanti_equation_2_tensor_parallel() -> None:
    """Section 4.2.1: sbh(10 + 24/t + 5as/(ht)) per layer without sequence parallelism."""
    a = arch(GPT_NEOX_20B)
    s, b, h, heads, t = 2048, 1, 6144, 64, 8
    tr = _training(flashAttention=False, parallelism={"tensorParallelSize": t})
    assert (
        activation_bytes(a, tr, _layers(a, 1, t))
        == s * b * h * (10 + 24 // t) + 5 * heads * s * s * b // t
    )


def test_flash_attention_drops_the_score_term() -> None:
    a = arch(GPT_NEOX_20B)
    assert activation_bytes(a, _training(flashAttention=True), _layers(a, 1)) == 2048 * 6144 * 34


def test_checkpointing_keeps_layer_inputs_plus_one_layer() -> None:
    """Full recomputation: 2sbh per layer, plus one layer's activations while recomputing."""
    a = arch(GPT_NEOX_20B)
    full = activation_bytes(a, _training(), _layers(a, 1))
    ckpt = activation_bytes(a, _training(activationCheckpointing=True), _layers(a, 44))
    assert ckpt == 44 * 2 * 2048 * 6144 + full


def test_gated_mlp_stores_four_intermediate_tensors() -> None:
    """Llama's SwiGLU: 2 bytes x 4 tensors of width I replace the paper's 16sbh; GQA shrinks K/V."""
    a = arch(LLAMA_3_8B)
    sbh = 2048 * 4096
    expected = sbh * 10 + 2048 * (4 * 4096 + 4 * 1024) + 2048 * 2 * 4 * 14336
    assert activation_bytes(a, _training(), _layers(a, 1)) == expected
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


def _qlora_7b(prepare: bool | None) -> Any:
    finetuning: dict[str, Any] = {"method": "qlora"}
    if prepare is not None:
        finetuning["prepareModelForKbitTraining"] = prepare
    return parse_spec(
        {
            "model": {"architecture": LLAMA_2_7B, "quantization": {"method": "bitsandbytes-nf4"}},
            "training": {"microBatchSize": 1, "sequenceLength": 2048, "finetuning": finetuning},
        }
    )


def test_qlora_base_is_nf4() -> None:
    g = estimate(_qlora_7b(False)).per_gpu
    # 32 layers of 4-bit linears, embeddings/lm_head/norms in bf16, plus PEFT's fp32 adapters.
    linears = 6_738_415_616 - 2 * 32000 * 4096 - 4096 - 32 * 2 * 4096
    assert g.weights_bytes < linears // 2 + 2 * (6_738_415_616 - linears) + 4 * 20_000_000
    assert g.quantization_overhead_bytes > 0


def test_prepare_model_for_kbit_training_upcasts_the_unquantized_parameters() -> None:
    """PEFT ``prepare_model_for_kbit_training`` (what TRL's SFTTrainer calls for a 4-bit model,
    the default here) casts embeddings, lm_head and norms to float32: 2 more bytes each."""
    unquantized = 6_738_415_616 - (6_738_415_616 - 2 * 32000 * 4096 - 4096 - 32 * 2 * 4096)
    plain = estimate(_qlora_7b(False)).per_gpu
    default = estimate(_qlora_7b(None)).per_gpu
    assert default.weights_bytes - plain.weights_bytes == 2 * unquantized
    # The residual stream is float32 too: checkpoints and the recomputed layer are wider.
    assert default.activation_bytes > plain.activation_bytes


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


# --- layer kinds: MLA, MoE, Mamba (published configs in tests/budget/configs) -------------------

CONFIGS = Path(__file__).parent / "configs"


def _published(name: str) -> Architecture:
    doc = json.loads((CONFIGS / f"{name}.json").read_text())
    doc.pop("_source")
    doc.pop("quantization_config", None)
    return Architecture.model_validate(model_from_hf_config(doc)["architecture"])


def _per_token(name: str, **kw: Any) -> dict[tuple[str, str], int]:
    """Bytes one token saves per layer, by (mixer, ffn) of the layer groups."""
    a = _published(name)
    tr = _training(sequenceLength=1, **kw)
    t = tr.parallelism.tensor_parallel_size
    return {
        (g.kind.mixer, g.kind.ffn): layer_activation_bytes(a, tr, g) for g in layout(a, t).groups
    }


def test_deepseek_v2_lite_mla_and_its_dense_first_layer() -> None:
    """DeepSeek-V2-Lite: h 2048, 16 heads, no q LoRA, kvLoraRank 512, qk 128 + 64 rope, v 128;
    layer 0 dense (first_k_dense_replace 1, I 10944), the other 26 MoE (64 routed experts of
    1408, top 6, 2 shared). MLA saves the kv_a output (512 + 64) and the normed latent (512),
    Q and K of 16 x 192, V and the attention output of 16 x 128."""
    h = 2048
    mla = 2 * (576 + 512) + 2 * (2 * 16 * 192 + 2 * 16 * 128)
    dense = 8 * 10944  # gate, up, act(gate), product
    moe = 4 * 64 + 6 * (2 * h + 8 * 1408 + 2 * h) + 8 * (2 * 1408)
    assert _per_token("deepseek-v2-lite") == {
        ("mla", "dense"): 10 * h + mla + dense,
        ("mla", "moe"): 10 * h + mla + moe,
    }
    assert (mla, dense, moe) == (22_656, 87_552, 139_520)


def test_nemotron_h_layers_are_single_blocks() -> None:
    """NVIDIA-Nemotron-Nano-9B-v2 (h 4480): Mamba-2 layers (128 heads x 80, 8 groups, state 128)
    save zxbcdt (2 x 10240 + 2 x 8 x 128 + 128) and the scan output (10240), as mamba_ssm's
    combined kernel does; MLP layers a ReLU^2 MLP (up and activation, I 15680); attention layers
    Q, K, V, output (40 x 128, 8 x 128). One block each: 5h replicated, not 10h."""
    h = 4480
    assert _per_token("nvidia-nemotron-nano-9b-v2") == {
        ("mamba", "none"): 5 * h + 2 * (20480 + 2048 + 128 + 10240),
        ("none", "dense"): 5 * h + 2 * 15680 + 2 * 15680,
        ("attention", "none"): 5 * h + 2 * (5120 + 2 * 1024) + 2 * 5120,
    }
    # Tensor parallelism splits the Mamba heads (and the groups, 8 % 2 == 0).
    tp2 = _per_token("nvidia-nemotron-nano-9b-v2", parallelism={"tensorParallelSize": 2})
    assert tp2["mamba", "none"] == 5 * h + (20480 + 2048 + 128 + 10240)


def test_jamba_mamba_1_layers() -> None:
    """Jamba-v0.1 (h 4096, expand 2, state 16, dt rank 256): a Mamba-1 layer saves in_proj's x
    and z (2 x 8192), the conv output (8192), x_proj's output (256 + 2 x 16), dt_proj's output
    (8192) and the scan output (8192); every other layer's MLP is an MoE (16 experts, top 2)."""
    h = 4096
    mamba = 2 * (16384 + 8192 + 288 + 8192 + 8192)
    attention = 2 * (4096 + 2 * 1024) + 2 * 4096
    dense = 8 * 14336
    moe = 4 * 16 + 2 * (2 * h + 8 * 14336 + 2 * h)
    assert _per_token("jamba-v0.1") == {
        ("mamba", "dense"): 10 * h + mamba + dense,
        ("mamba", "moe"): 10 * h + mamba + moe,
        ("attention", "dense"): 10 * h + attention + dense,
    }


def test_activations_sum_the_layer_groups() -> None:
    """Without checkpointing every layer keeps its own kind's tensors; with it, each layer's
    input plus the largest layer recomputed."""
    a = _published("nvidia-nemotron-nano-9b-v2")
    lay = layout(a)
    tr = _training(sequenceLength=4096)
    per = {g.kind: layer_activation_bytes(a, tr, g) for g in lay.groups}
    assert activation_bytes(a, tr, lay) == sum(g.count * per[g.kind] for g in lay.groups)
    ckpt = activation_bytes(a, _training(sequenceLength=4096, activationCheckpointing=True), lay)
    assert ckpt == 56 * 2 * 4096 * 4480 + max(per.values())
