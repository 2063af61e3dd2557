"""GPU classes and the choice of a class with headroom. Pure.

(PLACEHOLDER first cut: the sourced default catalog, YAML overrides and the full choice land with
issue 2.)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_CATALOG", "Choice", "GPUClass", "choose_class", "headroom_fraction"]


@dataclass(frozen=True)
class GPUClass:
    """One GPU model as the scheduler sees it.

    ``memory_bytes`` is the usable device memory as NVML's ``nvmlDeviceGetMemoryInfo().total``
    reports it; ``products`` are GPU Feature Discovery ``nvidia.com/gpu.product`` label values.
    """

    name: str
    display_name: str
    memory_bytes: int
    products: tuple[str, ...]
    interconnect: str
    vendor: str = "nvidia"


MIB = 1 << 20

DEFAULT_CATALOG: tuple[GPUClass, ...] = (
    GPUClass("nvidia-l4", "NVIDIA L4 24 GB", 23034 * MIB, ("NVIDIA-L4",), "pcie"),
    GPUClass(
        "nvidia-a100-40gb", "NVIDIA A100 40 GB", 40960 * MIB, ("NVIDIA-A100-SXM4-40GB",), "nvlink"
    ),
    GPUClass(
        "nvidia-a100-80gb", "NVIDIA A100 80 GB", 81920 * MIB, ("NVIDIA-A100-SXM4-80GB",), "nvlink"
    ),
    GPUClass(
        "nvidia-h100-80gb", "NVIDIA H100 80 GB", 81559 * MIB, ("NVIDIA-H100-80GB-HBM3",), "nvlink"
    ),
    GPUClass("nvidia-h200", "NVIDIA H200 141 GB", 143771 * MIB, ("NVIDIA-H200",), "nvlink"),
)


def headroom_fraction(capacity_bytes: int, required_bytes: int) -> float:
    """``(capacity - required) / capacity``; negative when it does not fit."""
    return (capacity_bytes - required_bytes) / capacity_bytes


@dataclass(frozen=True)
class Choice:
    """The chosen class and the headroom it leaves."""

    gpu_class: GPUClass
    headroom_fraction: float


def choose_class(
    required_bytes_per_gpu: int,
    min_headroom_fraction: float,
    classes: Iterable[GPUClass],
) -> Choice | None:
    """The smallest class leaving at least ``min_headroom_fraction`` free, else ``None``."""
    for cls in sorted(classes, key=lambda c: c.memory_bytes):
        room = headroom_fraction(cls.memory_bytes, required_bytes_per_gpu)
        if room >= min_headroom_fraction:
            return Choice(cls, room)
    return None


def allowed_classes(catalog: Sequence[GPUClass], names: Sequence[str]) -> list[GPUClass]:
    """Classes of ``catalog`` named in ``names`` (all of them when ``names`` is empty)."""
    return [c for c in catalog if not names or c.name in names]
