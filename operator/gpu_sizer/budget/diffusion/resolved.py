"""A pipeline component resolved once per (class, config): its module tree and every figure
the memory model asks of it, cached. Pure.

Building a component's module tree (a DiT's blocks, a UNet's resnets) and walking it for
parameter counts, weight bytes, what an offload hook keeps on the GPU or which layers layerwise
casting stores in float8 costs milliseconds; an admission webhook sees the same published
configs again and again. :func:`component_model` builds the tree once per class and resolved
config (the keys the class reads, with their defaults: two specs that spell the same config
differently share one entry) and each :class:`ComponentModel` memoises its walks by their
arguments, so a warm estimate costs a few dictionary look-ups per component.

The cache is bounded (:data:`CACHE_SIZE` configs); :func:`cache_clear` empties it
(``hack/bench-estimate.py`` does, to time the first sight of a pipeline).

"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpu_sizer.budget.diffusion.denoisers import UnsupportedConfig
from gpu_sizer.budget.diffusion.parts import (
    Part,
    expanded,
    group_resident,
    layerwise_cast_elements,
    parameter_count,
    sequential_resident,
    tensor_bytes,
)
from gpu_sizer.budget.diffusion.registry import KINDS, Kind

__all__ = ["CACHE_SIZE", "ComponentModel", "cache_clear", "component_model", "freeze"]

#: Distinct (class, config) entries kept; a pipeline has at most a handful of components.
CACHE_SIZE: Final = 512

_BF16: Final = 2


def freeze(value: Any) -> Any:
    """A hashable copy of a resolved config value: lists and tuples as tuples, mappings as
    sorted item tuples."""
    if isinstance(value, Mapping):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


@dataclass
class ComponentModel:
    """One component class built from one resolved config, with memoised walks.

    :param kind: the class's registry entry (builder, float32-kept modules, casting skips).
    :param config: the resolved config (snake_case keys, defaults filled in).
    :param part: the module tree.
    :param params: ``model.parameters()`` elements.
    """

    kind: Kind
    config: dict[str, Any]
    part: Part
    params: int
    _memo: dict[tuple[Any, ...], int] = field(default_factory=dict, repr=False)

    def weight_bytes(self, element_bytes: int, float16: bool = False) -> int:
        """Parameters and buffers at ``element_bytes`` per element, with the class's float32-kept
        modules at 4 (``float16``: the checkpoint is loaded in float16, which also keeps
        ``transformers``' ``_keep_in_fp32_modules``)."""
        key = ("weights", element_bytes, float16)
        if key not in self._memo:
            keep = self.kind.fp32_modules(element_bytes, float16)
            self._memo[key] = tensor_bytes(self.part, element_bytes, keep)
        return self._memo[key]

    def layerwise_cast_bytes(self, storage_bytes: int) -> int:
        """Bytes under ``enable_layerwise_casting(storage_dtype=float8, compute_dtype=bfloat16)``:
        the castable layers at ``storage_bytes``, the rest in bfloat16 (float32-kept modules at
        4)."""
        key = ("cast", storage_bytes)
        if key not in self._memo:
            cast = layerwise_cast_elements(self.part, self.kind.casting_skips)
            compute = tensor_bytes(self.part, _BF16, self.kind.keep_fp32)
            self._memo[key] = compute - cast * (_BF16 - storage_bytes)
        return self._memo[key]

    def sequential_elements(self) -> int:
        """:func:`~gpu_sizer.budget.diffusion.parts.sequential_resident` of the tree."""
        key: tuple[Any, ...] = ("sequential",)
        if key not in self._memo:
            self._memo[key] = sequential_resident(self.part)
        return self._memo[key]

    def group_elements(self, leaf_level: bool, blocks_per_group: int, use_stream: bool) -> int:
        """:func:`~gpu_sizer.budget.diffusion.parts.group_resident` of the tree."""
        key = ("group", leaf_level, blocks_per_group, use_stream)
        if key not in self._memo:
            self._memo[key] = group_resident(
                self.part,
                leaf_level=leaf_level,
                blocks_per_group=blocks_per_group,
                use_stream=use_stream,
                block_modules=self.kind.block_modules,
            )
        return self._memo[key]

    def largest_block(self) -> int:
        """Parameters of the largest entry of the tree's top-level lists (the unit FSDP
        unshards at a time)."""
        key: tuple[Any, ...] = ("block",)
        if key not in self._memo:
            self._memo[key] = max(
                (parameter_count(b) for s in self.part.children if s.sequence for b in expanded(s)),
                default=0,
            )
        return self._memo[key]


_CACHE: Final[OrderedDict[tuple[str, Any], ComponentModel | str]] = OrderedDict()


def component_model(cls: str, config: Mapping[str, Any]) -> ComponentModel | str:
    """The :class:`ComponentModel` of class ``cls`` for ``config`` (its
    :func:`gpu_sizer.api.components.resolved_config`), or why it cannot be built (the config
    selects a variant gpu-sizer does not size). Cached by ``(cls, freeze(config))``, least
    recently used first out beyond :data:`CACHE_SIZE` entries.

    :raises KeyError: ``cls`` is not a class gpu-sizer sizes.
    """
    key = (cls, freeze(config))
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    kind = KINDS[cls]
    built: ComponentModel | str
    try:
        part = kind.build(config)
    except (UnsupportedConfig, KeyError, ValueError, TypeError, ZeroDivisionError) as exc:
        built = f"config not sized: {exc}"
    else:
        built = ComponentModel(kind, dict(config), part, parameter_count(part))
    _CACHE[key] = built
    if len(_CACHE) > CACHE_SIZE:
        _CACHE.popitem(last=False)
    return built


def cache_clear() -> None:
    """Forget every built component (the next estimate of each config builds it again)."""
    _CACHE.clear()
