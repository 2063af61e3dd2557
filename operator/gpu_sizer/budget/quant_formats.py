"""Quantized weights as each loader stores them: the tensors of one linear, per format. Pure.

A quantized checkpoint is not "parameters x nominal bits": each quantized linear keeps a packed
payload plus metadata (scales, zero points, act-order indices, block or group constants), and
every format leaves some modules in 16-bit. Payload bytes are reported as weights, metadata as
quantization overhead (``quantizationOverheadBytes``). Which modules a checkpoint leaves
unquantized is :mod:`gpu_sizer.budget.quant_targets`'s business; this module says how a quantized
one is stored.

The shapes follow the ``create_weights`` of each vLLM quantization method (vLLM main at commit
``0071b24`` for ``fp8.py``, ``007d500`` for ``mxfp4.py``, ``0094cb9`` for compressed-tensors
``schemes/compressed_tensors_w4a4_nvfp4.py``; the older formats as in ``gptq.py``/``awq.py``),
per linear of ``K`` input and ``N`` output features on one tensor-parallel rank (``copies`` of
it for MoE experts; vLLM's ``FusedMoE`` methods allocate the same tensors with a leading expert
dimension), ``b`` bits, ``g`` elements per group along ``K`` (``G = ceil(K / g)``):

- GPTQ (``GPTQLinearMethod``/``GPTQMarlinLinearMethod``): ``qweight`` int32 ``[ceil(K*b/32), N]``,
  ``qzeros`` int32 ``[G, ceil(N*b/32)]``, ``scales`` fp16 ``[G, N]``; with act-order
  (``desc_act``) ``g_idx`` int32 ``[K]``.
- AWQ (``AWQLinearMethod``): ``qweight`` int32 ``[K, ceil(N*b/32)]``, ``qzeros`` int32
  ``[G, ceil(N*b/32)]``, ``scales`` fp16 ``[G, N]``.
- FP8 (``Fp8LinearMethod``, ``Fp8MoEMethod``; FBGEMM FP8 ``FBGEMMFp8LinearMethod``;
  compressed-tensors ``CompressedTensorsW8A8Fp8``): float8_e4m3fn ``weight`` ``[N, K]`` and fp32
  scales: per tensor one per logical shard (``weight_scale [len(output_partition_sizes)]``), per
  output channel ``[N, 1]`` (FBGEMM, compressed-tensors ``channel``), or per ``bn x bk`` block
  ``weight_scale_inv [ceil(N/bn), ceil(K/bk)]`` (``weight_block_size``, DeepSeek-V3 and Qwen3
  FP8 releases use 128 x 128).
- INT8 W8A8 (compressed-tensors ``CompressedTensorsW8A8Int8``): int8 ``weight [N, K]``, fp32
  ``weight_scale`` per channel ``[N, 1]`` or per tensor.
- W4A16/W8A16 pack-quantized (compressed-tensors ``CompressedTensorsWNA16``): ``weight_packed``
  int32 ``[N, K*b/32]``, ``weight_scale`` in the activation dtype ``[N, G]`` (``G = 1`` per
  channel), asymmetric ``weight_zero_point`` int32 ``[ceil(N*b/32), G]``, and ``weight_g_idx``
  int32 ``[K]`` kept only with act-order.
- NVFP4 (compressed-tensors ``CompressedTensorsW4A4Fp4``, ``nvfp4-pack-quantized``): two e2m1
  codes per byte ``weight_packed`` uint8 ``[N, K/2]``, one float8_e4m3 scale per 16 elements
  ``weight_scale [N, K/16]``, and fp32 ``weight_global_scale`` and ``input_global_scale`` per
  logical shard.
- MXFP4 (``Mxfp4MoEMethod``, gpt-oss experts; compressed-tensors ``mxfp4-pack-quantized``): two
  e2m1 codes per byte ``[N, K/2]`` and one e8m0 (uint8) scale per 32 elements ``[N, K/32]``.
  vLLM pads the expert widths for its kernels: the Triton backend (the default on Hopper)
  rounds the intermediate size up to a multiple of 64, which is what is counted here; its
  Marlin backend (Ampere, Ada) rounds it to 128 and the hidden size to 256, and FlashInfer on
  Blackwell both to 256 (for gpt-oss, 2880 -> 3072: 14 % more expert bytes).
- bitsandbytes NF4 (QLoRA paper, section 3; ``Params4bit``): two codes per byte, one absmax per
  64 elements, fp32 (``double_quant`` off) or 8-bit with one fp32 constant per 256 absmax values
  plus an fp32 offset (0.127 bits per parameter, the paper's figure).
- bitsandbytes LLM.int8() (Dettmers et al. 2022, section 3; ``Int8Params``): int8 ``CB [N, K]``
  plus fp32 ``SCB [N]``.

All results are bytes.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["MXFP4_TRITON_ALIGN", "Storage", "StorageKind", "linear_bytes"]

StorageKind = Literal["gptq", "awq", "fp8", "int8", "wna16", "nvfp4", "mxfp4", "nf4", "llm_int8"]

#: fp16 scales (GPTQ, AWQ).
_HALF = 2
#: fp32 scales (FP8, INT8, NVFP4 global scales, bitsandbytes).
_FLOAT = 4
#: bitsandbytes NF4 block size for the weights and, under double quantization, for the absmax
#: values (QLoRA paper, section 3: block sizes 64 and 256).
_NF4_BLOCK = 64
_NF4_DQ_BLOCK = 256
#: NVFP4: one float8_e4m3 scale per 16 elements; MXFP4: one e8m0 scale per 32 (OCP MX spec).
_NVFP4_GROUP = 16
_MXFP4_GROUP = 32
#: vLLM ``Mxfp4MoEMethod.create_weights`` (Triton backend): the expert intermediate size is
#: rounded up to a multiple of 64.
MXFP4_TRITON_ALIGN = 64


class Storage(NamedTuple):
    """How one linear's weight is stored: a format resolved for one module.

    ``group`` is the number of elements along the input features that share a scale: positive
    for groups, ``-1`` for one scale per output channel, ``0`` for one per tensor (per logical
    shard). ``block`` is ``(output, input)`` elements per scale for block-wise FP8.
    ``zero_points``: asymmetric integer codes also store zero points; ``act_order``: a ``g_idx``
    permutation per input feature is kept; ``input_scale``: a static fp32 activation scale per
    shard; ``double_quant``: bitsandbytes NF4 quantizes its absmax values too.
    """

    kind: StorageKind
    bits: int = 8
    group: int = 0
    block: tuple[int, int] | None = None
    zero_points: bool = False
    act_order: bool = False
    input_scale: bool = False
    double_quant: bool = True


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def _groups(k: int, group: int) -> int:
    """Scales along the input features: ``ceil(K / g)``, or 1 per channel or tensor."""
    return _ceil_div(k, group) if group > 0 else 1


def linear_bytes(
    k: int, n: int, copies: int, storage: Storage, act_bytes: int = 2, role: str = ""
) -> tuple[int, int]:
    """(payload, metadata) bytes of one quantized linear, all its ``copies``.

    :param k: input features (elements) on this rank; :param n: output features.
    :param copies: MoE experts sharing the shape (vLLM allocates them as one tensor).
    :param storage: the format resolved for this module.
    :param act_bytes: bytes of the activation dtype (compressed-tensors W4A16 scales use it).
    :param role: the linear's canonical role (``gate``, ``up``, ``gate_up``, ``down``), which
        decides the dimension MXFP4 pads.
    :returns: bytes of the packed weights, and of scales, zero points and indices.
    """
    kind = storage.kind
    bits = storage.bits
    if kind in ("gptq", "awq"):
        g = _groups(k, storage.group)
        packed_n = _ceil_div(n * bits, 32) * 4
        payload = _ceil_div(k * bits, 32) * 4 * n if kind == "gptq" else k * packed_n
        meta = g * packed_n + g * n * _HALF
        if storage.act_order:
            meta += 4 * k
    elif kind == "wna16":
        g = _groups(k, storage.group)
        payload = n * _ceil_div(k * bits, 32) * 4
        meta = n * g * act_bytes
        if storage.zero_points:
            meta += _ceil_div(n * bits, 32) * 4 * g
        if storage.act_order:
            meta += 4 * k
    elif kind in ("fp8", "int8"):
        payload = k * n
        if storage.block is not None:
            bn, bk = storage.block
            meta = _ceil_div(n, bn) * _ceil_div(k, bk) * _FLOAT
        elif storage.group < 0:
            meta = n * _FLOAT
        elif storage.group > 0:
            meta = n * _groups(k, storage.group) * _FLOAT
        else:
            meta = _FLOAT
        if storage.input_scale:
            meta += _FLOAT
    elif kind == "nvfp4":
        payload = n * _ceil_div(k, 2)
        meta = n * _ceil_div(k, _NVFP4_GROUP) + 2 * _FLOAT  # fp8 scales, weight+input global
    elif kind == "mxfp4":
        if role == "down":
            k = _round_up(k, MXFP4_TRITON_ALIGN)
        elif role == "gate_up":
            n = 2 * _round_up(n // 2, MXFP4_TRITON_ALIGN)
        elif role in ("gate", "up"):
            n = _round_up(n, MXFP4_TRITON_ALIGN)
        payload = n * _ceil_div(k, 2)
        meta = n * _ceil_div(k, _MXFP4_GROUP)
    elif kind == "nf4":
        elems = k * n
        payload = _ceil_div(elems, 2)
        blocks = _ceil_div(elems, _NF4_BLOCK)
        if storage.double_quant:
            meta = blocks + _ceil_div(blocks, _NF4_DQ_BLOCK) * _FLOAT + _FLOAT
        else:
            meta = blocks * _FLOAT
    else:  # llm_int8
        payload = k * n
        meta = _FLOAT * n
    return payload * copies, meta * copies
