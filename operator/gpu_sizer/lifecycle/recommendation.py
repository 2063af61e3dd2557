"""A recommendation that rests on a measured peak.

On the class it was measured on, on a larger class the peak fits with headroom, or (for an engine
that pre-allocates a fraction of the GPU, where a larger class only grows its pool) on the same
class at a lowered fraction, re-planned by :mod:`gpu_sizer.sizing.pool_verdict`.
"""

from __future__ import annotations

import math
from collections.abc import Collection

from gpu_sizer.api import (
    Basis,
    ConditionType,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    MeasurementStatus,
    Phase,
    RecommendationStatus,
)
from gpu_sizer.catalog import GPUClass, headroom_fraction
from gpu_sizer.lifecycle.conditions import F, _Conds, _finish
from gpu_sizer.lifecycle.plan import Workload, _fmt
from gpu_sizer.sizing import pool_verdict
from gpu_sizer.sizing.placement import snippets
from gpu_sizer.sizing.workers import recommendation_fields


def _host(base: GPUWorkloadStatus) -> int | None:
    """Host bytes per node of the estimate in ``base`` (training), if any."""
    return base.estimate.host_bytes_per_node if base.estimate is not None else None


def _measured_recommendation(
    cls: GPUClass,
    gpus: int,
    peak: int,
    present: Collection[str] | None,
    cheapest: str | None,
    engine_args: dict[str, str] | None = None,
    *,
    spec: GPUWorkloadSpec | None = None,
    host: int | None = None,
) -> RecommendationStatus:
    """A recommendation resting on a measured ``peak`` (bytes per GPU) on class ``cls``; with
    ``spec``, split into workers as the estimate's is (:mod:`gpu_sizer.sizing.workers`)."""
    placed = snippets(cls, gpus) if spec is None else recommendation_fields(spec, cls, host)
    return RecommendationStatus(
        gpu_class=cls.name,
        gpu_count=gpus,
        gpu_memory_bytes=cls.usable,
        required_bytes_per_gpu=peak,
        headroom_fraction=round(headroom_fraction(cls.usable, peak), 4),
        basis=Basis.Measurement,
        present_in_cluster=None if present is None else cls.name in present,
        cheapest_fitting_class=cheapest,
        **placed,
        engine_args=engine_args,
    )


def _lower_fraction(
    wl: Workload,
    base: GPUWorkloadStatus,
    m: MeasurementStatus,
    conds: _Conds,
    cls: GPUClass,
    peak: int,
    short: str,
    present: frozenset[str] | None,
    est_rec: RecommendationStatus | None,
) -> GPUWorkloadStatus:
    """A pre-allocating engine measured above the headroom: start it at a lower fraction.

    The engine's footprint is its fraction of the GPU plus what lies outside it; the measured
    excess over ``(1 - minHeadroomFraction) x usable`` comes off the fraction, and the engine is
    re-planned on the same class with it (:mod:`gpu_sizer.sizing.pool_verdict`). When that smaller
    pool still serves ``targetConcurrency``, the recommendation keeps the class with the lowered
    flag; otherwise the workload is rejected with the figures.
    """
    spec = wl.spec
    inf = spec.inference
    assert inf is not None
    floor = spec.placement.min_headroom_fraction
    gpus = base.estimate.gpu_count if base.estimate else 1
    current = pool_verdict.class_plans(spec, [cls])[0].fraction
    excess = peak - (1 - floor) * cls.usable
    lowered = math.floor((current - excess / cls.usable) * 100) / 100
    changed = spec.model_copy(
        update={"inference": inf.model_copy(update={"gpu_memory_utilization": max(lowered, 0.01)})}
    )
    plan = pool_verdict.class_plans(changed, [cls])[0]
    if lowered > 0 and pool_verdict.serves(changed, plan):
        rec = _measured_recommendation(
            cls,
            gpus,
            peak - int((current - plan.fraction) * cls.usable),
            present,
            est_rec.cheapest_fitting_class if est_rec else cls.name,
            dict(plan.engine_args),
            spec=spec,
        )
        text = (
            f"{short}; the engine's fraction lowered from {current:g} to {plan.fraction:g} on "
            f"{cls.name} (KV pool {_fmt(plan.kv_pool)}, {plan.max_concurrency:.2f} x maxModelLen "
            "requests); see recommendation.engineArgs"
        )
        conds.put(ConditionType.HeadroomSufficient, F, "FractionLowered", text)
        return base.model_copy(
            update={
                "phase": Phase.Ready,
                "measurement": m,
                "recommendation": rec,
                "conditions": _finish(conds, True, "FractionLowered", text),
            }
        )
    text = (
        f"{short}; at the fraction that would leave it ({max(lowered, 0.01):g}) "
        f"{pool_verdict.shortfall(changed, plan) or 'the engine does not serve the spec'}"
    )
    conds.put(ConditionType.HeadroomSufficient, F, "NoSafeHeadroom", text)
    return base.model_copy(
        update={
            "phase": Phase.Rejected,
            "measurement": m,
            "recommendation": None,
            "conditions": _finish(conds, False, "NoSafeHeadroom", text),
        }
    )
