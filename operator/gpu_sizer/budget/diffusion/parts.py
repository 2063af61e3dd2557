"""A component's module tree as plain data: what is counted, what an offload hook moves. Pure.

Each supported diffusers/transformers class is described by a builder (in ``denoisers``,
``vaes``, ``text_encoders``) that returns the same module hierarchy the library's constructor
creates, down to each parameter and buffer: a :class:`Part` per ``nn.Module`` (named as its
attribute), with tensor leaves for the parameters and buffers it owns directly. One generic set of
functions then answers every question the memory model asks of a component:

- :func:`parameter_count` / :func:`buffer_count`: ``sum(p.numel() for p in model.parameters())``
  and the same for ``buffers()`` (the oracle tests compare both with the library's models built on
  PyTorch's meta device);
- :func:`tensor_bytes`: weight bytes at a dtype, with the parameters a class keeps in float32
  (``ModelMixin._keep_in_fp32_modules``, matched against the components of each parameter's
  dotted name as ``diffusers/models/model_loading_utils.py`` ``load_model_dict_into_meta`` does);
- :func:`sequential_resident` and :func:`group_resident`: what the offload hooks keep on the GPU
  while the component runs (see those functions for the diffusers/accelerate source).

Repeated identical children (a DiT's 40 blocks) are one :class:`Part` with ``copies``; a
``ModuleList``/``Sequential`` is a part with ``sequence=True`` (group offloading's unit).
Counts are elements (parameters), sizes bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final

__all__ = [
    "DEFAULT_SKIP_CASTING",
    "Part",
    "buffer",
    "buffer_count",
    "conv",
    "embedding",
    "expanded",
    "group_norm",
    "group_resident",
    "layer_norm",
    "layerwise_cast_elements",
    "linear",
    "module",
    "param",
    "parameter_count",
    "part_count",
    "rms_norm",
    "sequence",
    "sequential_resident",
    "tensor_bytes",
]


@dataclass(frozen=True)
class Part:
    """One ``nn.Module`` (or one tensor it owns directly) of a component.

    :param name: attribute name (``"to_q"``, ``"0"`` in a list, ``"weight"`` for a tensor).
    :param children: sub-modules and the tensors this module owns directly, in registration order.
    :param numel: elements of a tensor leaf (0 for modules).
    :param tensor: a parameter or buffer leaf rather than a module.
    :param is_buffer: a buffer (moved with the module, not a parameter).
    :param copies: this child appears ``copies`` times in a row (list indices ``i .. i+copies-1``).
    :param sequence: a ``ModuleList``/``Sequential`` whose children are blocks.
    :param castable: an ``nn.Linear``, ``nn.Conv*d`` or ``nn.Embedding``: a layer diffusers'
        layerwise casting stores in the float8 dtype (``hooks/_common.py``
        ``_GO_LC_SUPPORTED_PYTORCH_LAYERS``).
    """

    name: str
    children: tuple[Part, ...] = ()
    numel: int = 0
    tensor: bool = False
    is_buffer: bool = False
    copies: int = 1
    sequence: bool = False
    castable: bool = False


def param(name: str, numel: int) -> Part:
    """A parameter owned directly by the enclosing module (``nn.Parameter``)."""
    return Part(name, numel=numel, tensor=True)


def buffer(name: str, numel: int) -> Part:
    """A buffer owned directly by the enclosing module (``register_buffer``)."""
    return Part(name, numel=numel, tensor=True, is_buffer=True)


def module(name: str, *children: Part | None, copies: int = 1) -> Part:
    """A module; ``None`` children (absent optional sub-modules) are dropped."""
    return Part(name, tuple(c for c in children if c is not None), copies=copies)


def sequence(name: str, *children: Part | None) -> Part:
    """An ``nn.ModuleList`` / ``nn.Sequential`` (children named ``"0"``, ``"1"``... by the
    caller)."""
    return Part(name, tuple(c for c in children if c is not None), sequence=True)


def linear(name: str, in_features: int, out_features: int, bias: bool = True) -> Part:
    """``nn.Linear``: weight ``[out, in]`` and bias ``[out]``."""
    weight = param("weight", in_features * out_features)
    return _layer(name, weight, param("bias", out_features) if bias else None)


def conv(
    name: str, in_channels: int, out_channels: int, kernel: int | Sequence[int], bias: bool = True
) -> Part:
    """``nn.Conv1d/2d/3d`` (groups 1): weight ``[out, in, *kernel]`` and bias ``[out]``."""
    size = math.prod(kernel) if isinstance(kernel, Sequence) else kernel
    weight = param("weight", out_channels * in_channels * size)
    return _layer(name, weight, param("bias", out_channels) if bias else None)


def layer_norm(name: str, dim: int, affine: bool = True, bias: bool = True) -> Part:
    """``nn.LayerNorm`` (also diffusers' ``FP32LayerNorm``): weight and bias when affine."""
    if not affine:
        return module(name)
    return module(name, param("weight", dim), param("bias", dim) if bias else None)


def rms_norm(name: str, dim: int, affine: bool = True) -> Part:
    """``nn.RMSNorm`` / diffusers ``RMSNorm`` / T5's and Llama's RMS norms: weight when affine."""
    return module(name, param("weight", dim) if affine else None)


def group_norm(name: str, channels: int, affine: bool = True) -> Part:
    """``nn.GroupNorm``: weight and bias per channel when affine."""
    return layer_norm(name, channels, affine)


def embedding(name: str, num: int, dim: int) -> Part:
    """``nn.Embedding``: ``[num, dim]``."""
    return _layer(name, param("weight", num * dim))


def _layer(name: str, *tensors: Part | None) -> Part:
    return Part(name, tuple(t for t in tensors if t is not None), castable=True)


def parameter_count(part: Part) -> int:
    """Parameters of ``part`` and everything below it (``model.parameters()`` numel)."""
    if part.tensor:
        return 0 if part.is_buffer else part.numel * part.copies
    return part.copies * sum(parameter_count(c) for c in part.children)


def part_count(part: Part) -> int:
    """:class:`Part` objects in the tree as it is held in memory (a repeated child is one
    object, whatever its ``copies``): what a cached component costs to keep."""
    return 1 + sum(part_count(c) for c in part.children)


def buffer_count(part: Part) -> int:
    """Buffer elements of ``part`` and everything below it (``model.buffers()`` numel)."""
    if part.tensor:
        return part.numel * part.copies if part.is_buffer else 0
    return part.copies * sum(buffer_count(c) for c in part.children)


def _own(part: Part) -> int:
    """Elements of the tensors a module owns directly (parameters and buffers)."""
    return sum(c.numel * c.copies for c in part.children if c.tensor)


def _fp32_elements(part: Part, keep_fp32: frozenset[str], inherited: bool) -> int:
    kept = inherited or part.name in keep_fp32
    if part.tensor:
        return part.numel * part.copies if kept else 0
    return part.copies * sum(_fp32_elements(c, keep_fp32, kept) for c in part.children)


def tensor_bytes(part: Part, element_bytes: int, keep_fp32: Iterable[str] = ()) -> int:
    """Bytes of every parameter and buffer below ``part`` at ``element_bytes`` per element, with
    tensors whose dotted name contains one of ``keep_fp32`` (``_keep_in_fp32_modules``) at 4."""
    total = parameter_count(part) + buffer_count(part)
    kept = _fp32_elements(part, frozenset(keep_fp32), False) if element_bytes < 4 else 0
    return (total - kept) * element_bytes + kept * 4


#: ``diffusers/hooks/layerwise_casting.py`` ``DEFAULT_SKIP_MODULES_PATTERN`` (0.42.1).
DEFAULT_SKIP_CASTING: Final = ("pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$")


def layerwise_cast_elements(part: Part, skip: Iterable[str], _prefix: str = "") -> int:
    """Elements stored in the float8 dtype under ``enable_layerwise_casting``.

    ``diffusers`` 0.42.1 ``hooks/layerwise_casting.py`` ``_apply_layerwise_casting`` walks the
    modules by dotted name: a module whose name matches one of the skip patterns
    (``re.search``: the defaults, the class's ``_keep_in_fp32_modules`` and its
    ``_skip_layerwise_casting_patterns``) is left whole in the compute dtype; a Linear, Conv or
    Embedding is stored in float8 (its weight and bias); anything else is descended into. The
    tensors a module owns directly (modulation tables, norm weights) are never cast.
    """
    patterns = tuple(skip)
    if _prefix and any(re.search(p, _prefix) for p in patterns):
        return 0
    if part.castable:
        return parameter_count(part) + buffer_count(part)
    total = 0
    for child in part.children:
        if child.tensor:
            continue
        name = f"{_prefix}.{child.name}" if _prefix else child.name
        if child.copies == 1:
            total += layerwise_cast_elements(child, patterns, name)
            continue
        # list entries i .. i+copies-1: the same module under consecutive indices
        one = replace(child, copies=1)
        first = int(child.name) if child.name.isdigit() else None
        for i in range(child.copies):
            entry = f"{_prefix}.{first + i}" if first is not None and _prefix else name
            total += layerwise_cast_elements(one, patterns, entry)
    return total


def expanded(part: Part) -> Iterator[Part]:
    """The children of a module one list entry at a time (``copies`` unrolled: each entry is
    yielded with ``copies=1``, so its counts are one entry's)."""
    for child in part.children:
        one = child if child.copies == 1 else replace(child, copies=1)
        for _ in range(child.copies):
            yield one


def sequential_resident(part: Part) -> int:
    """Elements on the GPU at the worst moment under ``enable_sequential_cpu_offload``.

    accelerate's ``cpu_offload`` (``accelerate/big_modeling.py``) calls
    ``attach_align_device_hook``, which puts an ``AlignDevicesHook`` with
    ``place_submodules=False`` on every module that owns tensors directly: entering a module's
    ``forward`` brings only its own tensors to the GPU and leaving it sends them back. Modules run
    nested (a block's forward is running while its ``Linear`` children run), so the worst moment
    holds the direct tensors of every module on one root-to-leaf path: the largest such sum.
    """
    if part.tensor:
        return 0
    below = max((sequential_resident(c) for c in part.children if not c.tensor), default=0)
    return _own(part) + below


def _group_sizes(part: Part, blocks_per_group: int, block_modules: frozenset[str]) -> list[int]:
    """Element counts of the block groups ``_apply_group_offloading_block_level`` forms under
    ``part`` (recursing into ``block_modules``), in execution order."""
    groups: list[int] = []
    for child in part.children:
        if child.tensor:
            continue
        if child.name in block_modules:
            groups += _group_sizes(child, blocks_per_group, frozenset())
        elif child.sequence:
            blocks = [parameter_count(b) + buffer_count(b) for b in expanded(child)]
            for i in range(0, len(blocks), blocks_per_group):
                groups.append(sum(blocks[i : i + blocks_per_group]))
    return groups


def _unmatched(part: Part, block_modules: frozenset[str]) -> int:
    """Elements outside every block group: the top-level module's own tensors and its children
    that are neither lists nor ``block_modules`` (recursively for ``block_modules``)."""
    total = _own(part)
    for child in part.children:
        if child.tensor:
            continue
        if child.name in block_modules:
            total += _unmatched(child, frozenset())
        elif not child.sequence:
            total += child.copies * (parameter_count(child) + buffer_count(child))
    return total


def group_resident(
    part: Part,
    *,
    leaf_level: bool,
    blocks_per_group: int,
    use_stream: bool,
    block_modules: Sequence[str] = (),
) -> int:
    """Elements on the GPU at the worst moment under diffusers' group offloading.

    Source: ``diffusers/hooks/group_offloading.py`` (0.42). Block level
    (``_apply_group_offloading_block_level``): every ``ModuleList``/``Sequential`` child of the
    model (and, recursively, of the class's ``_group_offload_block_modules``) is cut into groups
    of ``num_blocks_per_group`` blocks, each onloaded when its first block runs and offloaded
    after its last; everything else (the "unmatched" modules and the model's own tensors) forms
    one group onloaded for the whole forward. With ``use_stream`` the next group is prefetched
    while the current one runs (``num_blocks_per_group`` is forced to 1), so two groups are
    resident. Leaf level (``_apply_group_offloading_leaf_level``): each ``Linear``, ``Conv*d`` and
    ``Embedding`` is a group, and the other tensors are onloaded with the closest module that
    owns them when it runs: the worst moment is the path sum of :func:`sequential_resident`, plus
    the largest leaf once more when the next one is prefetched.
    """
    if leaf_level:
        ahead = max(_leaf_sizes(part), default=0) if use_stream else 0
        return sequential_resident(part) + ahead
    blocks = 1 if use_stream else blocks_per_group
    modules = frozenset(block_modules)
    groups = _group_sizes(part, blocks, modules)
    if not groups:
        return _unmatched(part, modules)
    held = max(groups)
    if use_stream:
        held = max(a + b for a, b in zip(groups, [*groups[1:], 0], strict=True))
    return _unmatched(part, modules) + held


def _leaf_sizes(part: Part) -> Iterator[int]:
    if part.tensor:
        return
    kids = [c for c in part.children if not c.tensor]
    if not kids:
        yield _own(part)
        return
    for child in kids:
        yield from _leaf_sizes(child)
