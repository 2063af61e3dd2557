"""Weight bytes by dtype, and quantized checkpoints module by module. Pure.

Unquantized weights are parameters x dtype bytes. A quantized checkpoint is summed module by
module: every decoder-layer linear is looked up by its checkpoint name
(:mod:`gpu_sizer.budget.quant_targets`: the format's own exclusions, ``modulesToNotConvert``,
compressed-tensors ``ignore`` and config groups) and stored as its format does
(:mod:`gpu_sizer.budget.quant_formats`) or in high precision; embeddings, lm_head, norms, biases,
routers and vision encoders stay in high precision. Payload bytes are reported as weights;
metadata as quantization overhead (``quantizationOverheadBytes``).

All results are in bytes.
"""

from __future__ import annotations

from gpu_sizer.api import DTYPE_BYTES, Model, Quantization, QuantizationMethod
from gpu_sizer.budget.params import Layout, Linear
from gpu_sizer.budget.quant_formats import linear_bytes as storage_bytes
from gpu_sizer.budget.quant_targets import default_storage, split_by_storage

__all__ = [
    "dequantization_workspace_bytes",
    "flat_weight_bytes",
    "high_precision_bytes",
    "linear_bytes",
    "weight_bytes",
]


def high_precision_bytes(model: Model) -> int:
    """Bytes per element of tensors that stay unquantized (embeddings, norms, biases, lm_head).

    The model dtype, except that an 8-bit dtype with a quantization method means the checkpoint's
    scales-bearing tensors are 8-bit and the rest run in 16-bit (vLLM loads them in bf16).
    """
    size = DTYPE_BYTES[model.dtype]
    if model.quantization is not None and size < 2:
        return 2
    return size


def linear_bytes(lin: Linear, quant: Quantization, act_bytes: int = 2) -> tuple[int, int]:
    """(payload, metadata) bytes of ``lin`` (all its copies) stored as ``quant`` stores a module
    it quantizes (:func:`gpu_sizer.budget.quant_targets.default_storage`).

    :param lin: the linear's shape on one rank (``in_features`` K, ``out_features`` N, copies).
    :param quant: the format; bits and group size default as the format's loaders do.
    :param act_bytes: bytes of the activation dtype (scales stored in it).
    """
    return storage_bytes(
        lin.in_features, lin.out_features, lin.copies, default_storage(quant), act_bytes, lin.role
    )


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
            for storage, layers in split_by_storage(quant, lay.prefix, lin, group.indices):
                if storage is None:
                    plain += layers * lin.weight_params
                    continue
                p, m = storage_bytes(
                    lin.in_features, lin.out_features, lin.copies, storage, hp, lin.role
                )
                payload += layers * p
                meta += layers * m
    return payload + plain * hp + outer * hp, meta


def flat_weight_bytes(params: int, model: Model) -> tuple[int, int]:
    """(weights, overhead) bytes of ``params`` parameters when no architecture is known.

    Without the layout, every parameter is taken as part of one long quantized matrix of
    4096-wide rows (metadata per group and per row as the format stores it); embeddings and norms
    cannot be told apart, so a quantized estimate is approximate (reported in the notes).
    """
    if model.quantization is None:
        return params * DTYPE_BYTES[model.dtype], 0
    rows = -(-params // 4096)
    flat = Linear("flat", "flat", 4096, rows, 1, False, True, "experts.flat")
    return linear_bytes(flat, model.quantization)


def dequantization_workspace_bytes(lay: Layout, quant: Quantization | None, training: bool) -> int:
    """16-bit copy of the largest quantized linear, dequantized for one matmul (bytes).

    bitsandbytes dequantizes a 4-bit or 8-bit weight to the compute dtype for each matmul
    (``bitsandbytes.functional.dequantize_4bit`` in ``MatMul4Bit``), and so do the backward
    passes of GPTQ/AWQ layers under PEFT; vLLM's GPTQ/AWQ (Marlin) and FP8 kernels dequantize
    inside the kernel, so serving those formats needs no such buffer.
    """
    if quant is None or quant.method in (QuantizationMethod.fp8, QuantizationMethod.mxfp4):
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
