"""One verdict for a spec: estimate, class choice, headroom, fixes. Pure.

The webhook, ``gpu-sizer estimate`` and the controller all call :func:`assess`, so the same spec and
catalog give the same verdict and message everywhere. (PLACEHOLDER first cut: computed fixes land
with issue 2.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpu_sizer.api import Basis, EstimateStatus, GPUWorkloadSpec, RecommendationStatus
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass, allowed_classes, choose_class

GIB = 1 << 30


class Verdict(StrEnum):
    """Outcome of an assessment."""

    Fits = "Fits"
    NoSafeHeadroom = "NoSafeHeadroom"
    UnknownGpuClass = "UnknownGpuClass"


@dataclass(frozen=True)
class Assessment:
    """Everything decided about one spec before measuring."""

    estimate: EstimateStatus
    verdict: Verdict
    message: str
    recommendation: RecommendationStatus | None = None
    fixes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def assess(spec: GPUWorkloadSpec, catalog: Sequence[GPUClass] = DEFAULT_CATALOG) -> Assessment:
    """Estimate ``spec`` and choose the smallest allowed class with the required headroom."""
    est = estimate(spec)
    names = spec.placement.gpu_classes
    unknown = [n for n in names if n not in {c.name for c in catalog}]
    if unknown:
        return Assessment(
            est,
            Verdict.UnknownGpuClass,
            f"spec.placement.gpuClasses: unknown class {', '.join(unknown)}",
        )
    required = est.per_gpu.total_bytes
    choice = choose_class(
        required, spec.placement.min_headroom_fraction, allowed_classes(catalog, names)
    )
    if choice is None:
        return Assessment(
            est,
            Verdict.NoSafeHeadroom,
            f"needs {required / GIB:.1f} GiB per GPU; no allowed class leaves "
            f"{spec.placement.min_headroom_fraction:.0%} headroom",
        )
    rec = RecommendationStatus(
        gpu_class=choice.gpu_class.name,
        gpu_count=est.gpu_count,
        gpu_memory_bytes=choice.gpu_class.memory_bytes,
        required_bytes_per_gpu=required,
        headroom_fraction=round(choice.headroom_fraction, 4),
        basis=Basis.Estimate,
    )
    return Assessment(
        est,
        Verdict.Fits,
        f"{choice.gpu_class.name} x{est.gpu_count}: {required / GIB:.1f} GiB of "
        f"{choice.gpu_class.memory_bytes / GIB:.1f} GiB per GPU, "
        f"{choice.headroom_fraction:.0%} headroom",
        rec,
    )
