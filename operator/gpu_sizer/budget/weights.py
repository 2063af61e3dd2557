"""Weight bytes by dtype, and quantized formats as their loaders store them. Pure.

A quantized checkpoint is not "parameters x nominal bits": the decoder layers' linear weights are
packed, each with metadata (scales, zero points, indices, block constants), while embeddings,
lm_head, norms, biases and MoE routers stay in 16-bit in every format below. Payload bytes are
reported as weights; metadata as quantization overhead (``quantizationOverheadBytes``).

Per linear of ``K`` input and ``N`` output features (elements), ``b`` bits, group size ``g``
(``G = ceil(K / g)`` groups; ``g = -1`` is one group per output channel, ``G = 1``):

- GPTQ (Frantar et al. 2022; AutoGPTQ/GPTQModel ``QuantLinear`` buffers, vLLM
  ``gptq.py``/``gptq_marlin.py`` ``create_weights``): ``qweight`` int32 ``[ceil(K*b/32), N]``,
  ``qzeros`` int32 ``[G, ceil(N*b/32)]``, ``scales`` fp16 ``[G, N]``; with act-order
  (``desc_act``) the ``g_idx`` int32 ``[K]`` permutation (vLLM's Marlin path drops it without
  act-order).
- AWQ (Lin et al. 2023; AutoAWQ ``WQLinear_GEMM``, vLLM ``awq.py``): ``qweight`` int32
  ``[K, ceil(N*b/32)]``, ``qzeros`` int32 ``[G, ceil(N*b/32)]``, ``scales`` fp16 ``[G, N]``.
- bitsandbytes NF4 (Dettmers et al. 2023, QLoRA, section 3; bitsandbytes ``Params4bit``): two
  4-bit codes per byte, one absmax per block of 64; with double quantization the absmax values
  are 8-bit with one fp32 constant per 256 of them plus an fp32 offset (8/64 + 32/(64*256) bits
  per parameter, the paper's 0.127), without it fp32 absmax (32/64 = 0.5 bits per parameter).
- bitsandbytes LLM.int8() (Dettmers et al. 2022, section 3; bitsandbytes ``Int8Params``): int8
  ``CB`` ``[N, K]`` plus fp32 ``SCB`` row scales ``[N]``.
- FP8 (vLLM ``fp8.py`` ``Fp8LinearMethod``; compressed-tensors): float8_e4m3fn weights plus one
  fp32 scale per tensor, or per output channel with ``perChannelScales``.

All results are in bytes.
"""

from __future__ import annotations

from gpu_sizer.api import DTYPE_BYTES, Model, Quantization, QuantizationMethod
from gpu_sizer.budget.params import Layout, Linear

__all__ = [
    "dequantization_workspace_bytes",
    "flat_weight_bytes",
    "high_precision_bytes",
    "linear_bytes",
    "weight_bytes",
]

#: fp16 scales (GPTQ, AWQ).
_SCALE_BYTES = 2
#: bitsandbytes NF4 block size for the weights and, under double quantization, for the absmax
#: values (QLoRA paper, section 3: block sizes 64 and 256).
_NF4_BLOCK = 64
_NF4_DQ_BLOCK = 256


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def high_precision_bytes(model: Model) -> int:
    """Bytes per element of tensors that stay unquantized (embeddings, norms, biases, lm_head).

    The model dtype, except that an 8-bit dtype with a quantization method means the checkpoint's
    scales-bearing tensors are 8-bit and the rest run in 16-bit (vLLM loads them in bf16).
    """
    size = DTYPE_BYTES[model.dtype]
    if model.quantization is not None and size < 2:
        return 2
    return size


def linear_bytes(lin: Linear, quant: Quantization) -> tuple[int, int]:
    """(payload, metadata) bytes of one quantized linear's weight, all its copies.

    :param lin: the linear's shape on one rank (``in_features`` K, ``out_features`` N, copies).
    :param quant: the format; bits and group size default as the format's loaders do.
    """
    k, n = lin.in_features, lin.out_features
    method = quant.method
    bits = quant.effective_bits
    if method is QuantizationMethod.gptq or method is QuantizationMethod.awq:
        g = quant.group_size if quant.group_size is not None else 128
        groups = 1 if g < 0 else _ceil_div(k, g)
        if method is QuantizationMethod.gptq:
            payload = _ceil_div(k * bits, 32) * 4 * n
        else:
            payload = k * _ceil_div(n * bits, 32) * 4
        meta = groups * _ceil_div(n * bits, 32) * 4 + groups * n * _SCALE_BYTES
        if method is QuantizationMethod.gptq and quant.desc_act:
            meta += 4 * k
    elif method is QuantizationMethod.bitsandbytes_nf4:
        elems = k * n
        payload = _ceil_div(elems, 2)
        blocks = _ceil_div(elems, _NF4_BLOCK)
        if quant.double_quant:
            meta = blocks + _ceil_div(blocks, _NF4_DQ_BLOCK) * 4 + 4
        else:
            meta = blocks * 4
    elif method is QuantizationMethod.bitsandbytes_int8:
        payload = k * n
        meta = 4 * n
    else:  # fp8
        payload = k * n
        meta = 4 * n if quant.per_channel_scales else 4
    return payload * lin.copies, meta * lin.copies


def weight_bytes(lay: Layout, model: Model, outer: int) -> tuple[int, int]:
    """(weights, quantization overhead) bytes of ``lay``'s decoder layers plus ``outer`` params.

    :param lay: the rank's parameter layout, holding the decoder layers on this GPU (a pipeline
        stage's share).
    :param model: dtype and quantization.
    :param outer: parameters outside the layers held on this GPU (embeddings, lm_head, final
        norm, vision encoder), always in high precision.
    """
    hp = high_precision_bytes(model)
    quant = model.quantization
    if quant is None:
        return (lay.layer_total + outer) * hp, 0
    payload = 0
    meta = 0
    plain = 0
    for group in lay.groups:
        plain += group.count * group.vectors
        for lin in group.linears:
            if lin.quantizable:
                p, m = linear_bytes(lin, quant)
                payload += group.count * p
                meta += group.count * m
            else:
                plain += group.count * lin.weight_params
    return payload + plain * hp + outer * hp, meta


def flat_weight_bytes(params: int, model: Model) -> tuple[int, int]:
    """(weights, overhead) bytes of ``params`` parameters when no architecture is known.

    Without the layout, every parameter is taken as part of one long quantized matrix of
    4096-wide rows (metadata per group and per row as the format stores it); embeddings and norms
    cannot be told apart, so a quantized estimate is approximate (reported in the notes).
    """
    if model.quantization is None:
        return params * DTYPE_BYTES[model.dtype], 0
    rows = _ceil_div(params, 4096)
    return linear_bytes(Linear("flat", "flat", 4096, rows, 1, False, True), model.quantization)


def dequantization_workspace_bytes(lay: Layout, quant: Quantization | None, training: bool) -> int:
    """16-bit copy of the largest quantized linear, dequantized for one matmul (bytes).

    bitsandbytes dequantizes a 4-bit or 8-bit weight to the compute dtype for each matmul
    (``bitsandbytes.functional.dequantize_4bit`` in ``MatMul4Bit``), and so do the backward
    passes of GPTQ/AWQ layers under PEFT; vLLM's GPTQ/AWQ (Marlin) and FP8 kernels dequantize
    inside the kernel, so serving those formats needs no such buffer.
    """
    if quant is None or quant.method is QuantizationMethod.fp8:
        return 0
    bnb = quant.method in (
        QuantizationMethod.bitsandbytes_nf4,
        QuantizationMethod.bitsandbytes_int8,
    )
    if not training and not bnb:
        return 0
    largest = max(
        (lin.in_features * lin.out_features for lin in lay.linears if lin.quantizable), default=0
    )
    return 2 * largest
