"""config.json ``quantization_config`` to ``spec.model.quantization`` (wire names).

The keys are the ones each quantizer writes (``transformers``' ``*Config`` classes in
``utils/quantization_config.py``, llm-compressor's compressed-tensors config, OpenAI's gpt-oss
config) and the ones vLLM reads from them (``Fp8Config.from_config``,
``FBGEMMFp8Config.from_config``, ``CompressedTensorsConfig.from_config``):

- ``gptq``: ``bits``, ``group_size``, ``desc_act``; ``awq``: ``bits``/``w_bit``,
  ``group_size``/``q_group_size``, ``modules_to_not_convert``.
- ``fp8`` (DeepSeek-V3, Qwen3 FP8, transformers' ``FineGrainedFP8Config``): ``weight_block_size``,
  ``modules_to_not_convert`` or vLLM's ``ignored_layers``.
- ``fbgemm_fp8`` (Meta's Llama 3.1 FP8): per-channel FP8 with ``modules_to_not_convert``.
- ``mxfp4`` (gpt-oss): ``modules_to_not_convert``.
- ``compressed-tensors``: ``format``, ``config_groups`` (``targets``, ``weights``,
  ``input_activations``: ``num_bits``, ``type``, ``strategy``, ``group_size``,
  ``block_structure``, ``symmetric``, ``dynamic``, ``actorder``) and ``ignore``. Keys that do not
  change stored bytes (``observer``, ``kv_cache_scheme``, ``quantization_status``...) are dropped.
- ``bitsandbytes``: 4-bit NF4 (``bnb_4bit_use_double_quant``) or LLM.int8(), with
  ``llm_int8_skip_modules`` as ``modulesToNotConvert``.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["SUPPORTED_QUANT_METHODS", "quantization_from_hf"]

#: ``quant_method`` values read here.
SUPPORTED_QUANT_METHODS: Final = (
    "gptq",
    "awq",
    "fp8",
    "fbgemm_fp8",
    "mxfp4",
    "compressed-tensors",
    "bitsandbytes",
)

_ARGS_KEYS: Final = {
    "num_bits": "numBits",
    "type": "type",
    "strategy": "strategy",
    "group_size": "groupSize",
    "block_structure": "blockStructure",
    "symmetric": "symmetric",
    "dynamic": "dynamic",
    "actorder": "actorder",
}


class UnsupportedQuantization(ValueError):
    """``quantization_config`` uses a method or scheme gpu-sizer does not size."""


def _names(value: Any) -> list[str] | None:
    """A list of module names, or ``None`` for an absent or empty one."""
    if not value:
        return None
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _not_converted(out: dict[str, Any], qc: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        names = _names(qc.get(key))
        if names:
            out["modulesToNotConvert"] = names
            break
    return out


def _block(value: Any) -> list[int] | None:
    """``[128, 128]``, or older compressed-tensors' ``"128x128"``."""
    if value is None:
        return None
    if isinstance(value, str):
        return [int(part) for part in value.lower().split("x")]
    return [int(v) for v in value]


def _args(data: Any) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        return None
    out: dict[str, Any] = {}
    for key, wire in _ARGS_KEYS.items():
        value = data.get(key)
        if value is None:
            continue
        if key == "block_structure":
            value = _block(value)
        elif key == "actorder" and value is True:
            value = "group"  # compressed-tensors' legacy boolean
        elif key == "actorder" and value is False:
            continue
        elif key == "dynamic":
            value = value is not False  # "local" (NVFP4 activations) is dynamic too
        out[wire] = value
    return out


def _compressed_tensors(qc: dict[str, Any]) -> dict[str, Any]:
    groups: dict[str, Any] = {}
    fmt = qc.get("format")
    for name, group in (qc.get("config_groups") or {}).items():
        if not isinstance(group, dict):
            continue
        entry: dict[str, Any] = {"targets": _names(group.get("targets")) or ["Linear"]}
        for key, wire in (("weights", "weights"), ("input_activations", "inputActivations")):
            args = _args(group.get(key))
            if args is not None:
                entry[wire] = args
        groups[str(name)] = entry
        fmt = fmt or group.get("format")
    if not groups:
        raise UnsupportedQuantization(
            "compressed-tensors quantization_config has no config_groups (a sparsity-only "
            "checkpoint is not quantized: drop quantization_config)"
        )
    out: dict[str, Any] = {"method": "compressed-tensors", "configGroups": groups}
    if fmt and fmt != "mixed-precision":
        out["format"] = fmt
    ignore = _names(qc.get("ignore"))
    if ignore:
        out["ignore"] = ignore
    return out


def quantization_from_hf(qc: dict[str, Any]) -> dict[str, Any]:
    """``spec.model.quantization`` (wire names) from config.json's ``quantization_config``.

    :raises UnsupportedQuantization: the method or a scheme is not one gpu-sizer sizes.
    """
    method = str(qc.get("quant_method", "")).lower()
    if method == "gptq":
        out: dict[str, Any] = {"method": "gptq", "bits": qc.get("bits", 4)}
        if qc.get("group_size") is not None:
            out["groupSize"] = qc["group_size"]
        if qc.get("desc_act"):
            out["descAct"] = True
        return _not_converted(out, qc, "modules_to_not_convert")
    if method == "awq":
        out = {"method": "awq", "bits": qc.get("bits") or qc.get("w_bit") or 4}
        group = qc.get("group_size") or qc.get("q_group_size")
        if group is not None:
            out["groupSize"] = group
        return _not_converted(out, qc, "modules_to_not_convert")
    if method == "fp8":
        out = {"method": "fp8"}
        block = _block(qc.get("weight_block_size"))
        if block is not None:
            out["weightBlockSize"] = block
        return _not_converted(out, qc, "modules_to_not_convert", "ignored_layers")
    if method == "fbgemm_fp8":
        out = {"method": "fp8", "perChannelScales": True}
        return _not_converted(out, qc, "modules_to_not_convert")
    if method == "mxfp4":
        return _not_converted({"method": "mxfp4"}, qc, "modules_to_not_convert")
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    if method == "bitsandbytes":
        if qc.get("load_in_4bit") or qc.get("_load_in_4bit"):
            if str(qc.get("bnb_4bit_quant_type", "nf4")) != "nf4":
                raise UnsupportedQuantization("bitsandbytes 4-bit fp4 is not supported; use nf4")
            out = {
                "method": "bitsandbytes-nf4",
                "bits": 4,
                "doubleQuant": bool(qc.get("bnb_4bit_use_double_quant", False)),
            }
            return _not_converted(out, qc, "llm_int8_skip_modules")
        if qc.get("load_in_8bit") or qc.get("_load_in_8bit"):
            out = {"method": "bitsandbytes-int8", "bits": 8}
            return _not_converted(out, qc, "llm_int8_skip_modules")
    raise UnsupportedQuantization(
        f"quantization_config.quant_method {method or '(missing)'!r} is not supported ("
        + ", ".join(SUPPORTED_QUANT_METHODS)
        + ")"
    )
