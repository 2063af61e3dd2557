"""Which GPU class a measurement runs on.

The recommended class first; after a CUDA out-of-memory, the next larger class the spec allows.
Among candidates, the smallest one with nodes in the cluster is preferred (on a class without
nodes the measurement pod waits unschedulable), else the smallest candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_sizer.api import GPUWorkloadSpec, RecommendationStatus
from gpu_sizer.catalog import GPUClass
from gpu_sizer.lifecycle.plan import Config


def _allowed(spec: GPUWorkloadSpec, config: Config) -> list[GPUClass]:
    """The catalog classes ``spec.placement.gpuClasses`` allows (all when it is empty), smallest
    memory first."""
    names = spec.placement.gpu_classes
    return sorted(
        (c for c in config.catalog if not names or c.name in names), key=lambda c: c.memory_bytes
    )


def _by_name(config: Config, name: str | None) -> GPUClass | None:
    return next((c for c in config.catalog if c.name == name), None)


def _pick(candidates: Sequence[GPUClass], present: frozenset[str] | None) -> GPUClass | None:
    """Smallest candidate present in the cluster; else the smallest candidate."""
    if not candidates:
        return None
    if present:
        for cls in candidates:
            if cls.name in present:
                return cls
    return candidates[0]


def _where(cls: GPUClass, present: frozenset[str] | None) -> str:
    """The class as messages name it, saying so when the cluster has no node of it."""
    if present is not None and cls.name not in present:
        return f"class {cls.name} (no node of this class found in the cluster yet)"
    return f"class {cls.name}"


def _measure_class(
    spec: GPUWorkloadSpec,
    config: Config,
    present: frozenset[str] | None,
    rec: RecommendationStatus | None,
    *,
    above: GPUClass | None,
) -> GPUClass | None:
    """The class to measure on: the recommended one first; after a CUDA OOM on ``above``, the
    next larger allowed class, preferring classes with nodes in the cluster."""
    allowed = _allowed(spec, config)
    if above is None:
        chosen = _by_name(config, rec.gpu_class) if rec else None
        return chosen or _pick(allowed, present)
    return _pick([c for c in allowed if c.memory_bytes > above.memory_bytes], present)
