"""Which modules a quantized checkpoint stores quantized, and in which format. Pure.

Every format leaves some modules in 16-bit, and checkpoints leave more (Llama-3.1-405B-FP8 keeps
every attention projection and the first and last MLPs in bf16). The module names are the
checkpoint's (``model.layers.0.self_attn.q_proj``: :attr:`gpu_sizer.budget.params.Layout.prefix`,
the layer index and :attr:`gpu_sizer.budget.params.Linear.path`), matched as each loader matches
them (vLLM main, ``quantization/utils/quant_utils.py`` ``is_layer_skipped`` and
``compressed_tensors/utils.py`` ``should_ignore_layer``/``find_matched_target``):

- Never quantized, in any format here: embeddings and lm_head (vLLM's ``VocabParallelEmbedding``
  and ``ParallelLMHead`` are not ``LinearBase``), norms, biases, and the layout's non-quantizable
  matrices (MoE routers, built with ``quant_config=None``; Mamba's small projections).
- ``modulesToNotConvert`` (GPTQ, AWQ, fp8, fbgemm_fp8, mxfp4, bitsandbytes): an entry covers a
  module when its dot-separated parts appear as a run of the module name's parts, ``*`` standing
  for any one part. That is vLLM's exact-name rule for the full names fbgemm_fp8 checkpoints list,
  covers the parent modules and suffixes transformers' substring rule accepts
  (``self_attn``, ``lm_head``, ``mlp.gate``), and gpt-oss's ``model.layers.*.self_attn``, without
  letting ``gate`` cover ``gate_proj``.
- MXFP4 (``Mxfp4Config.get_quant_method``): only the routed experts (``FusedMoE``); every other
  linear runs unquantized (``UnquantizedLinearMethod``: MXFP4 linears are not implemented).
- compressed-tensors ``ignore``: exact names or ``re:`` regular expressions matched from the start
  of the name (``re.match``). Config groups: a name or regex target matches first, else a class
  target (``Linear`` matches every linear layer); MoE experts take the scheme of the group
  targeting ``Linear`` (``CompressedTensorsMoEMethod``).

Resolution is memoised per pattern list and layer range (the same checkpoint is estimated many
times while fixes are searched), so a 500-name list costs one pass per layout.
"""

from __future__ import annotations

import re
from functools import lru_cache

from gpu_sizer.api import (
    CompressedTensorsArgs,
    CompressedTensorsGroup,
    CompressionFormat,
    Quantization,
    QuantizationMethod,
    QuantizationStrategy,
    QuantizationType,
)
from gpu_sizer.budget.params import Linear
from gpu_sizer.budget.quant_formats import Storage, StorageKind

__all__ = ["default_storage", "is_routed_expert", "split_by_storage", "storage_for"]


def is_routed_expert(lin: Linear) -> bool:
    """Whether ``lin`` belongs to a MoE layer's routed experts (vLLM ``FusedMoE``)."""
    return "experts" in lin.path.split(".")


def default_storage(quant: Quantization) -> Storage:
    """The storage of a module the format quantizes when no per-module rule says otherwise.

    compressed-tensors: the first config group targeting ``Linear`` (else the first with weights).
    """
    method = quant.method
    bits = quant.effective_bits
    if method is QuantizationMethod.gptq or method is QuantizationMethod.awq:
        group = quant.group_size if quant.group_size is not None else 128
        kind: StorageKind = "gptq" if method is QuantizationMethod.gptq else "awq"
        return Storage(kind, bits, group, act_order=quant.desc_act)
    if method is QuantizationMethod.fp8:
        block = quant.weight_block_size
        return Storage("fp8", 8, -1 if quant.per_channel_scales else 0, block)
    if method is QuantizationMethod.mxfp4:
        return Storage("mxfp4", 4, 32)
    if method is QuantizationMethod.bitsandbytes_nf4:
        return Storage("nf4", 4, 64, double_quant=quant.double_quant)
    if method is QuantizationMethod.bitsandbytes_int8:
        return Storage("llm_int8", 8, -1)
    groups = list((quant.config_groups or {}).values())
    chosen = next((g for g in groups if _targets_linear(g)), None) or next(
        g for g in groups if g.weights is not None
    )
    return _ct_storage(chosen, quant.format)


def storage_for(quant: Quantization, name: str, lin: Linear) -> Storage | None:
    """The storage of module ``name`` (full checkpoint name of ``lin``); ``None``: unquantized."""
    if not lin.quantizable:
        return None
    method = quant.method
    if method is QuantizationMethod.compressed_tensors:
        if _ct_ignored(quant.ignore, name):
            return None
        group = _ct_group(list((quant.config_groups or {}).values()), name, lin)
        return None if group is None else _ct_storage(group, quant.format)
    if method is QuantizationMethod.mxfp4 and not is_routed_expert(lin):
        return None
    if quant.modules_to_not_convert and _covered(quant.modules_to_not_convert, name):
        return None
    return default_storage(quant)


def split_by_storage(
    quant: Quantization, prefix: str, lin: Linear, indices: tuple[int, ...]
) -> tuple[tuple[Storage | None, int], ...]:
    """How many of the layers ``indices`` store ``lin`` in each way: ``((storage, layers), ...)``.

    :param prefix: the layout's layer prefix (``model.layers``); names are
        ``{prefix}.{index}.{lin.path}``.
    """
    if not lin.quantizable:
        return ((None, len(indices)),)
    if quant.method is QuantizationMethod.compressed_tensors:
        groups = tuple((quant.config_groups or {}).items())
        return _ct_split(quant.ignore, quant.format, groups, prefix, lin, indices)
    if quant.method is QuantizationMethod.mxfp4 and not is_routed_expert(lin):
        return ((None, len(indices)),)
    plain = 0
    if quant.modules_to_not_convert:
        plain = len(_covered_indices(quant.modules_to_not_convert, prefix, lin.path, indices))
    out: list[tuple[Storage | None, int]] = []
    if plain:
        out.append((None, plain))
    if plain < len(indices):
        out.append((default_storage(quant), len(indices) - plain))
    return tuple(out)


# --- modulesToNotConvert ------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _patterns(entries: tuple[str, ...]) -> tuple[frozenset[str], re.Pattern[str] | None]:
    """Entries without ``*`` as a set (looked up against every run of name parts), the others as
    one regular expression over the whole name."""
    exact = frozenset(e.strip(".") for e in entries if "*" not in e)
    globs = [
        r"\.".join("[^.]+" if part == "*" else re.escape(part) for part in e.strip(".").split("."))
        for e in entries
        if "*" in e
    ]
    rx = re.compile(r"(?:^|\.)(?:" + "|".join(globs) + r")(?:\.|$)") if globs else None
    return exact, rx


def _covered(entries: tuple[str, ...], name: str) -> bool:
    exact, rx = _patterns(entries)
    parts = name.split(".")
    for i in range(len(parts)):
        for j in range(i + 1, len(parts) + 1):
            if ".".join(parts[i:j]) in exact:
                return True
    return rx is not None and rx.search(name) is not None


@lru_cache(maxsize=4096)
def _covered_indices(
    entries: tuple[str, ...], prefix: str, path: str, indices: tuple[int, ...]
) -> frozenset[int]:
    return frozenset(i for i in indices if _covered(entries, f"{prefix}.{i}.{path}"))


# --- compressed-tensors -------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _ct_match(target: str, name: str) -> bool:
    """vLLM ``_is_equal_or_regex_match``: ``re:`` targets are ``re.match``-ed, others equal."""
    if target.startswith("re:"):
        return _regex(target[3:]).match(name) is not None
    return target == name


def _is_class_target(target: str) -> bool:
    """A module class target (``Linear``): vLLM matches it as a substring of the class name,
    which for every vLLM linear class (``QKVParallelLinear``, ``RowParallelLinear``, ...) ends
    in ``Linear``."""
    return not target.startswith("re:") and "." not in target and "linear".endswith(target.lower())


def _targets_linear(group: CompressedTensorsGroup) -> bool:
    return group.weights is not None and any(_is_class_target(t) for t in group.targets)


def _ct_ignored(ignore: tuple[str, ...], name: str) -> bool:
    return any(_ct_match(t, name) for t in ignore)


@lru_cache(maxsize=4096)
def _ct_split(
    ignore: tuple[str, ...],
    fmt: CompressionFormat | None,
    groups: tuple[tuple[str, CompressedTensorsGroup], ...],
    prefix: str,
    lin: Linear,
    indices: tuple[int, ...],
) -> tuple[tuple[Storage | None, int], ...]:
    counts: dict[Storage | None, int] = {}
    for i in indices:
        name = f"{prefix}.{i}.{lin.path}"
        st: Storage | None = None
        if not _ct_ignored(ignore, name):
            group = _ct_group([g for _, g in groups], name, lin)
            st = None if group is None else _ct_storage(group, fmt)
        counts[st] = counts.get(st, 0) + 1
    return tuple(counts.items())


def _ct_group(
    groups_in: list[CompressedTensorsGroup], name: str, lin: Linear
) -> CompressedTensorsGroup | None:
    groups = [g for g in groups_in if g.weights is not None]
    expert = is_routed_expert(lin)
    for g in groups:
        if any(_ct_match(t, name) for t in g.targets if not _is_class_target(t)):
            return g
    for g in groups:
        if _targets_linear(g):
            return g
    return groups[0] if expert and groups else None


@lru_cache(maxsize=256)
def _ct_storage_cached(
    args: CompressedTensorsArgs, fmt: CompressionFormat | None, static_input: bool
) -> Storage:
    bits = args.num_bits
    strategy = args.strategy
    group = 0
    block = None
    if strategy is QuantizationStrategy.channel:
        group = -1
    elif strategy in (QuantizationStrategy.group, QuantizationStrategy.tensor_group):
        group = args.group_size or 0
    elif strategy is QuantizationStrategy.block and args.block_structure is not None:
        block = args.block_structure
    if args.type is QuantizationType.float_:
        if bits == 4:
            mx = args.group_size == 32 or fmt is CompressionFormat.mxfp4_pack_quantized
            return Storage("mxfp4" if mx else "nvfp4", 4, args.group_size or 16)
        return Storage("fp8", 8, group, block, input_scale=static_input)
    if fmt is CompressionFormat.pack_quantized or bits == 4:
        act = args.actorder in ("group", "weight")
        return Storage("wna16", bits, group, zero_points=not args.symmetric, act_order=act)
    asym = not args.symmetric
    return Storage("int8", 8, group, block, zero_points=asym, input_scale=static_input)


def _ct_storage(group: CompressedTensorsGroup, fmt: CompressionFormat | None) -> Storage:
    """A config group's weights as vLLM's compressed-tensors schemes store them.

    Float 4-bit as NVFP4 (``CompressedTensorsW4A4Fp4``) or MXFP4, float 8-bit as FP8
    (``CompressedTensorsW8A8Fp8``), ``pack-quantized`` or 4-bit integers as W4A16/W8A16
    (``CompressedTensorsWNA16``), other 8-bit integers as INT8 (``CompressedTensorsW8A8Int8``);
    static input activations add a scale.
    """
    assert group.weights is not None
    act = group.input_activations
    static_input = act is not None and not act.dynamic
    return _ct_storage_cached(group.weights, fmt, static_input)
