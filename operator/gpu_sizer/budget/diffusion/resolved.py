"""A pipeline component resolved once per (class, config): its module tree and every figure
the memory model asks of it, cached. Pure.

Building a component's module tree (a DiT's blocks, a UNet's resnets) and walking it for
parameter counts, weight bytes, what an offload hook keeps on the GPU or which layers layerwise
casting stores in float8 costs milliseconds; an admission webhook sees the same published
configs again and again. :func:`component_model` builds the tree once per class and resolved
config (the keys the class reads, with their defaults: two specs that spell the same config
differently share one entry) and each :class:`ComponentModel` memoises its walks by their
arguments, so a warm estimate costs a few dictionary look-ups per component.

The cache is bounded by entries (:data:`CACHE_SIZE` configs) and by what they hold
(:data:`CACHE_PARTS` module-tree nodes in all), least recently used out first;
:func:`cache_clear` empties it
(``hack/bench-estimate.py`` does, to time the first sight of a pipeline).

"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from gpu_sizer.budget.diffusion.denoisers import UnsupportedConfig
from gpu_sizer.budget.diffusion.parts import (
    Part,
    expanded,
    group_resident,
    layerwise_cast_elements,
    parameter_count,
    part_count,
    sequential_resident,
    tensor_bytes,
)
from gpu_sizer.budget.diffusion.registry import KINDS, Kind

__all__ = [
    "CACHE_PARTS",
    "CACHE_SIZE",
    "MEMO_SIZE",
    "ComponentModel",
    "cache_clear",
    "component_model",
    "config_key",
    "freeze",
]

#: Distinct (class, config) entries kept; a pipeline has at most a handful of components.
CACHE_SIZE: Final = 512
#: Module-tree nodes (:func:`~gpu_sizer.budget.diffusion.parts.part_count`) kept, all entries
#: together. A node takes about 200 bytes with the figures memoised on it (tracemalloc over
#: the examples' estimates: a published pipeline holds 490-3,000 nodes, 0.1-0.6 MB; a UNet at
#: the depth bounds 9,700 nodes, 1.9 MB), so this keeps a verdict worker's cache near 50 MB
#: however deep the configs it is sent: 512 entries of the deepest would hold about 1 GB, the
#: chart's whole memory limit.
CACHE_PARTS: Final = 262_144

#: Figures memoised per component (weights per dtype, activations per shape).
MEMO_SIZE: Final = 256

_BF16: Final = 2
_T = TypeVar("_T")


def freeze(value: Any) -> Any:
    """A hashable copy of a resolved config value: lists and tuples as tuples, mappings as
    sorted item tuples."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def config_key(cls: str, config: Mapping[str, Any]) -> tuple[Any, ...]:
    """The cache key of ``config``: its keys and values in order, which
    :func:`~gpu_sizer.api.components.resolved_config` fixes per class (lists already tuples,
    a nested object a dict in the same fixed order), so no sort is needed."""
    key = (cls, tuple(config), tuple(config.values()))
    try:
        hash(key)
    except TypeError:  # a nested object (the safety checker's vision_config), or a list
        return (cls, tuple(config), tuple(_hashable(v) for v in config.values()))
    return key


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return (tuple(value), tuple(_hashable(v) for v in value.values()))
    return freeze(value)


@dataclass
class ComponentModel:
    """One component class built from one resolved config, with memoised walks.

    :param kind: the class's registry entry (builder, float32-kept modules, casting skips).
    :param config: the resolved config (snake_case keys, defaults filled in).
    :param part: the module tree.
    :param params: ``model.parameters()`` elements.
    :param parts: nodes of ``part`` (its weight in the cache).
    """

    kind: Kind
    config: dict[str, Any]
    part: Part
    params: int
    parts: int = 1
    _memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)

    def memo(self, key: tuple[Any, ...], compute: Callable[[], _T]) -> _T:
        """``compute()``, memoised under ``key`` (a figure of this component: the caller puts
        every argument besides the class and config in the key, such as an activation's shape).
        At most :data:`MEMO_SIZE` figures are kept per component; past that the memo starts
        over."""
        if key in self._memo:
            hit: _T = self._memo[key]
            return hit
        if len(self._memo) >= MEMO_SIZE:
            self._memo.clear()
        value = self._memo[key] = compute()
        return value

    def weight_bytes(self, element_bytes: int, float16: bool = False) -> int:
        """Parameters and buffers at ``element_bytes`` per element, with the class's float32-kept
        modules at 4 (``float16``: the checkpoint is loaded in float16, which also keeps
        ``transformers``' ``_keep_in_fp32_modules``)."""
        return self.memo(
            ("weights", element_bytes, float16),
            lambda: tensor_bytes(
                self.part, element_bytes, self.kind.fp32_modules(element_bytes, float16)
            ),
        )

    def layerwise_cast_bytes(self, storage_bytes: int) -> int:
        """Bytes under ``enable_layerwise_casting(storage_dtype=float8, compute_dtype=bfloat16)``:
        the castable layers at ``storage_bytes``, the rest in bfloat16 (float32-kept modules at
        4)."""

        def compute() -> int:
            cast = layerwise_cast_elements(self.part, self.kind.casting_skips)
            return tensor_bytes(self.part, _BF16, self.kind.keep_fp32) - cast * (
                _BF16 - storage_bytes
            )

        return self.memo(("cast", storage_bytes), compute)

    def sequential_elements(self) -> int:
        """:func:`~gpu_sizer.budget.diffusion.parts.sequential_resident` of the tree."""
        return self.memo(("sequential",), lambda: sequential_resident(self.part))

    def group_elements(self, leaf_level: bool, blocks_per_group: int, use_stream: bool) -> int:
        """:func:`~gpu_sizer.budget.diffusion.parts.group_resident` of the tree."""
        return self.memo(
            ("group", leaf_level, blocks_per_group, use_stream),
            lambda: group_resident(
                self.part,
                leaf_level=leaf_level,
                blocks_per_group=blocks_per_group,
                use_stream=use_stream,
                block_modules=self.kind.block_modules,
            ),
        )

    def largest_block(self) -> int:
        """Parameters of the largest entry of the tree's top-level lists (the unit FSDP
        unshards at a time)."""
        return self.memo(
            ("block",),
            lambda: max(
                (parameter_count(b) for s in self.part.children if s.sequence for b in expanded(s)),
                default=0,
            ),
        )


_CACHE: Final[OrderedDict[tuple[str, Any], ComponentModel | str]] = OrderedDict()
#: Sum of the cached entries' :attr:`ComponentModel.parts` (a reason string weighs 1).
_HELD: Final[list[int]] = [0]


def _weight(entry: ComponentModel | str) -> int:
    return 1 if isinstance(entry, str) else entry.parts


def component_model(cls: str, config: Mapping[str, Any]) -> ComponentModel | str:
    """The :class:`ComponentModel` of class ``cls`` for ``config`` (its
    :func:`gpu_sizer.api.components.resolved_config`), or why it cannot be built (the config
    selects a variant gpu-sizer does not size). Cached by ``cls`` and ``config``'s items, least
    recently used first out beyond :data:`CACHE_SIZE` entries or :data:`CACHE_PARTS` nodes.

    :raises KeyError: ``cls`` is not a class gpu-sizer sizes.
    """
    key = config_key(cls, config)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    kind = KINDS[cls]
    built: ComponentModel | str
    try:
        part = kind.build(config)
    except (UnsupportedConfig, LookupError, ValueError, TypeError, ZeroDivisionError) as exc:
        built = f"config not sized: {exc}"
    else:
        built = ComponentModel(kind, dict(config), part, parameter_count(part), part_count(part))
    _CACHE[key] = built
    _HELD[0] += _weight(built)
    while len(_CACHE) > 1 and (len(_CACHE) > CACHE_SIZE or _HELD[0] > CACHE_PARTS):
        _HELD[0] -= _weight(_CACHE.popitem(last=False)[1])
    return built


def cache_clear() -> None:
    """Forget every built component (the next estimate of each config builds it again)."""
    _CACHE.clear()
    _HELD[0] = 0
