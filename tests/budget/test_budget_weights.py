"""Weights by dtype and quantized formats as their loaders store them."""

from __future__ import annotations

import pytest
from tests.architectures import LLAMA_3_8B, arch

from gpu_sizer.api import Model, Quantization, QuantizationMethod
from gpu_sizer.budget.params import Linear, layout
from gpu_sizer.budget.weights import (
    dequantization_workspace_bytes,
    flat_weight_bytes,
    linear_bytes,
    weight_bytes,
)

GIB = 1 << 30
SQUARE = Linear("o", "o_proj", 4096, 4096, 1, False, True)


def quant(method: str, **kw: object) -> Quantization:
    return Quantization.model_validate({"method": method, **kw})


def test_seed_example_13b_in_16_bits() -> None:
    """13,000,000,000 parameters in a 16-bit format are 26,000,000,000 bytes, about 24.2 GiB."""
    weights, overhead = flat_weight_bytes(13_000_000_000, Model(parameter_count=1, dtype="float16"))
    assert weights == 26_000_000_000
    assert overhead == 0
    assert round(weights / GIB, 1) == 24.2


def test_gptq_4bit_group_128() -> None:
    """qweight int32 [K/8, N], qzeros int32 [K/128, N/8], scales fp16 [K/128, N]."""
    payload, meta = linear_bytes(SQUARE, quant("gptq", bits=4, groupSize=128))
    assert payload == 4096 * 4096 // 2
    assert meta == 32 * (4096 // 8) * 4 + 32 * 4096 * 2


def test_gptq_act_order_adds_g_idx_per_input_row() -> None:
    _, plain = linear_bytes(SQUARE, quant("gptq", bits=4, groupSize=128))
    _, act_order = linear_bytes(SQUARE, quant("gptq", bits=4, groupSize=128, descAct=True))
    assert act_order - plain == 4 * 4096


def test_gptq_3bit_packs_across_words() -> None:
    payload, _ = linear_bytes(SQUARE, quant("gptq", bits=3, groupSize=128))
    assert payload == 4096 * 3 // 32 * 4 * 4096


def test_gptq_per_channel_has_one_group() -> None:
    _, meta = linear_bytes(SQUARE, quant("gptq", bits=8, groupSize=-1))
    assert meta == 1 * (4096 // 4) * 4 + 1 * 4096 * 2


def test_awq_packs_along_output() -> None:
    payload, meta = linear_bytes(SQUARE, quant("awq", groupSize=128))
    assert payload == 4096 * (4096 // 8) * 4
    assert meta == 32 * 512 * 4 + 32 * 4096 * 2


def test_nf4_double_quantization_costs_0_127_bits_per_parameter() -> None:
    """QLoRA paper, section 3: 8/64 + 32/(64 * 256) = 0.127 bits per parameter."""
    payload, meta = linear_bytes(SQUARE, quant("bitsandbytes-nf4"))
    n = 4096 * 4096
    assert payload == n // 2
    assert meta * 8 / n == pytest.approx(8 / 64 + 32 / (64 * 256), abs=1e-5)


def test_nf4_without_double_quantization_costs_half_a_bit() -> None:
    _, meta = linear_bytes(SQUARE, quant("bitsandbytes-nf4", doubleQuant=False))
    assert meta * 8 / (4096 * 4096) == 0.5


def test_llm_int8_row_scales() -> None:
    payload, meta = linear_bytes(SQUARE, quant("bitsandbytes-int8"))
    assert (payload, meta) == (4096 * 4096, 4 * 4096)


def test_fp8_per_tensor_and_per_channel_scales() -> None:
    assert linear_bytes(SQUARE, quant("fp8")) == (4096 * 4096, 4)
    assert linear_bytes(SQUARE, quant("fp8", perChannelScales=True)) == (4096 * 4096, 4 * 4096)


def test_moe_experts_multiply_metadata() -> None:
    experts = Linear("up", "w3", 4096, 14336, 8, False, True)
    one = linear_bytes(experts._replace(copies=1), quant("awq"))
    assert linear_bytes(experts, quant("awq")) == (one[0] * 8, one[1] * 8)


#: Formats that quantize every decoder-layer linear of a dense model with their defaults (MXFP4
#: quantizes only MoE experts; compressed-tensors needs config groups: both in
#: test_budget_quantization.py).
DENSE_DEFAULTS = [
    m.value
    for m in QuantizationMethod
    if m not in (QuantizationMethod.mxfp4, QuantizationMethod.compressed_tensors)
]


@pytest.mark.parametrize("method", DENSE_DEFAULTS)
def test_embeddings_lm_head_and_norms_stay_16_bit(method: str) -> None:
    """Llama-3-8B: everything but the decoder-layer linears is stored in bf16."""
    a = arch(LLAMA_3_8B)
    lay = layout(a)
    q = quant(method)
    weights, _ = weight_bytes(lay, Model(architecture=a, quantization=q), lay.embedding + lay.head)
    payload = sum(linear_bytes(lin, q)[0] for lin in lay.linears)
    high_precision = 2 * (2 * 128256 * 4096 + 4096) + 32 * 2 * 2 * 4096
    assert weights == 32 * payload + high_precision


def test_unquantized_bf16_weights_are_two_bytes_per_parameter() -> None:
    a = arch(LLAMA_3_8B)
    lay = layout(a)
    weights, overhead = weight_bytes(lay, Model(architecture=a), lay.embedding + lay.head)
    assert (weights, overhead) == (2 * 8_030_261_248, 0)


def test_dequantization_workspace_only_where_weights_are_dequantized() -> None:
    """bitsandbytes dequantizes the largest linear (Llama-3-8B's 4096 x 14336 MLP) to 16-bit;
    vLLM's AWQ and FP8 kernels dequantize in-kernel when serving."""
    lay = layout(arch(LLAMA_3_8B))
    largest = 2 * 4096 * 14336
    assert dequantization_workspace_bytes(lay, quant("bitsandbytes-nf4"), training=False) == largest
    assert dequantization_workspace_bytes(lay, quant("awq"), training=False) == 0
    assert dequantization_workspace_bytes(lay, quant("awq"), training=True) == largest
    assert dequantization_workspace_bytes(lay, quant("fp8"), training=True) == 0
    assert dequantization_workspace_bytes(lay, None, training=True) == 0
