"""The choice of a GPU class with headroom: the first fitting class in rank order, preferring
classes the cluster has nodes of. Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from gpu_sizer.catalog.classes import GPUClass

__all__ = [
    "Choice",
    "allowed_classes",
    "choose_class",
    "choose_fitting",
    "class_for_product",
    "fits",
    "headroom_fraction",
    "mig_class",
]


def headroom_fraction(capacity_bytes: int, required_bytes: int) -> float:
    """``(capacity - required) / capacity``: the share of the GPU left free; negative when the
    requirement exceeds the capacity."""
    return (capacity_bytes - required_bytes) / capacity_bytes


@dataclass(frozen=True)
class Choice:
    """The chosen class, the headroom it leaves, and what else was considered.

    ``present_in_cluster`` is ``None`` when no inventory was given; ``cheapest`` is the first
    fitting class in rank order whether or not nodes of it exist.
    """

    gpu_class: GPUClass
    headroom_fraction: float
    present_in_cluster: bool | None = None
    cheapest: GPUClass | None = None


def fits(cls: GPUClass, required_bytes_per_gpu: int, min_headroom_fraction: float) -> bool:
    """Whether ``cls`` leaves at least ``min_headroom_fraction`` of its usable memory free."""
    return headroom_fraction(cls.usable, required_bytes_per_gpu) >= min_headroom_fraction


def choose_class(
    required_bytes_per_gpu: int,
    min_headroom_fraction: float,
    classes: Iterable[GPUClass],
    present: Collection[str] | None = None,
) -> Choice | None:
    """The first class in rank order that leaves ``min_headroom_fraction`` free, else ``None``.

    With ``present`` (class names that have nodes in the cluster), a present class that fits wins
    over a cheaper absent one; when no present class fits, the cheapest fitting class is chosen
    anyway (``present_in_cluster=False``) so that the recommendation says what to add.
    """
    room = ((c, headroom_fraction(c.usable, required_bytes_per_gpu)) for c in classes)
    return choose_fitting([(c, r) for c, r in room if r >= min_headroom_fraction], present)


def choose_fitting(
    fitting: Sequence[tuple[GPUClass, float]], present: Collection[str] | None = None
) -> Choice | None:
    """The choice among classes already known to fit, each with the headroom it leaves.

    For workloads whose requirement depends on the class (pre-allocating serving engines size
    their KV cache pool from each GPU's memory) the caller decides the fit per class; the order
    and the preference for present classes are those of :func:`choose_class`.
    """
    ordered = sorted(fitting, key=lambda f: (f[0].rank, f[0].memory_bytes, f[0].name))
    if not ordered:
        return None
    cheapest = ordered[0]
    chosen = cheapest
    in_cluster: bool | None = None
    if present is not None:
        on_nodes = [f for f in ordered if f[0].name in present]
        in_cluster = bool(on_nodes)
        if on_nodes:
            chosen = on_nodes[0]
    return Choice(chosen[0], chosen[1], in_cluster, cheapest[0])


def allowed_classes(catalog: Sequence[GPUClass], names: Sequence[str]) -> list[GPUClass]:
    """Classes of ``catalog`` named in ``names`` (all of them when ``names`` is empty)."""
    return [c for c in catalog if not names or c.name in names]


def mig_class(catalog: Sequence[GPUClass], parent: str, profile: str) -> GPUClass | None:
    """The MIG class cut from whole-GPU class ``parent`` with ``profile`` (``1g.10gb``), if any."""
    for cls in catalog:
        if cls.parent == parent and cls.mig_profile == profile:
            return cls
    return None


def class_for_product(catalog: Sequence[GPUClass], product: str) -> GPUClass | None:
    """The class whose ``products`` include a node's product label value.

    GFD appends ``-SHARED`` under time-slicing or MPS sharing; that suffix is ignored (the memory
    is the same device's). MIG slices (``...-MIG-3g.40gb``) match only a class that lists them.
    """
    for name in (product, product.removesuffix("-SHARED")):
        for cls in catalog:
            if name in cls.products:
                return cls
    return None
