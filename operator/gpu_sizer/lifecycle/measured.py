"""The status a finished measurement gives: its failure reason, a CPU smoke run, or its peak.

A failure keeps the estimate-based recommendation and says why; a CPU smoke run has no GPU figure,
so the estimate stands (never Ready when the estimate is incomplete). A GPU peak is checked against
the headroom floor on the class it ran on: it fits, moves the recommendation to a larger allowed
class, lowers a pre-allocating engine's fraction, or is Rejected.
"""

from __future__ import annotations

from gpu_sizer.api import ConditionType, GPUWorkloadStatus, MeasurementStatus, Phase
from gpu_sizer.budget.engines import models_pool
from gpu_sizer.catalog import headroom_fraction
from gpu_sizer.lifecycle.conditions import F, T, _Conds, _finish
from gpu_sizer.lifecycle.gpu_class import _allowed, _by_name, _pick
from gpu_sizer.lifecycle.plan import Config, Workload, _fmt
from gpu_sizer.lifecycle.recommendation import _host, _lower_fraction, _measured_recommendation
from gpu_sizer.measurement.node_scope import derive, node_scope


def measured_peak(m: MeasurementStatus) -> int | None:
    """The per-GPU peak a recommendation rests on: NVML's device-used peak (it includes the CUDA
    context and non-PyTorch allocations), else PyTorch's reserved, else allocated bytes."""
    for value in (m.peak_device_used_bytes, m.peak_reserved_bytes, m.peak_allocated_bytes):
        if value is not None:
            return value
    return None


def _from_measurement(
    wl: Workload,
    base: GPUWorkloadStatus,
    m: MeasurementStatus,
    config: Config,
    present: frozenset[str] | None,
    now: str,
) -> GPUWorkloadStatus:
    """Status after a finished measurement ``m`` (success, CPU smoke run, or a failure)."""
    conds = _Conds(base, wl.generation, now)
    est_rec = base.recommendation
    if m.reason:  # the measurement failed or could not run: keep the estimate-based status
        phase = Phase.Failed
        stalled_reason = m.reason
        if m.reason in ("NoNodeOfClass", "Unschedulable", "Unsupported"):
            phase = Phase.Estimated
        conds.put(ConditionType.Measured, F, m.reason, m.message or m.reason)
        if m.reason == "OutOfMemory":
            phase = Phase.Rejected
            conds.put(ConditionType.HeadroomSufficient, F, "OutOfMemory", m.message or "")
            return base.model_copy(
                update={
                    "phase": phase,
                    "measurement": m,
                    "recommendation": None,
                    "conditions": _finish(conds, False, "OutOfMemory", m.message or ""),
                }
            )
        if m.reason == "Unsupported" and _incomplete(base):
            text = _not_ready_incomplete(base, m.message or "the probe cannot measure this spec")
            return base.model_copy(
                update={
                    "phase": Phase.Estimated,
                    "measurement": m,
                    "conditions": _finish(conds, False, "Incomplete", text),
                }
            )
        if m.reason == "Unsupported":
            text = f"ready on the estimate: {m.message or 'the probe cannot measure this spec'}"
            return base.model_copy(
                update={
                    "phase": Phase.Ready,
                    "measurement": m,
                    "conditions": _finish(conds, True, "EstimateOnly", text),
                }
            )
        text = (m.message or m.reason) + "; the recommendation rests on the estimate"
        return base.model_copy(
            update={
                "phase": phase,
                "measurement": m,
                "conditions": _finish(conds, False, stalled_reason, text),
            }
        )
    if m.device == "cpu":
        text = (
            "CPU smoke run: the probe ran on the CPU (no GPU on the node), so there are no GPU "
            "figures; the recommendation rests on the estimate"
            + (f" ({m.message})" if m.message else "")
        )
        conds.put(ConditionType.Measured, T, "CpuSmokeRun", text)
        if _incomplete(base):
            return base.model_copy(
                update={
                    "phase": Phase.Estimated,
                    "measurement": m,
                    "conditions": _finish(
                        conds, False, "Incomplete", _not_ready_incomplete(base, "CPU smoke run")
                    ),
                }
            )
        return base.model_copy(
            update={
                "phase": Phase.Ready,
                "measurement": m,
                "conditions": _finish(conds, True, "CpuSmokeRun", text),
            }
        )
    peak = measured_peak(m) or 0
    cls = _by_name(config, m.gpu_class)
    capacity = cls.usable if cls else (m.gpu_memory_bytes or 0)
    floor = wl.spec.placement.min_headroom_fraction
    gpus = base.estimate.gpu_count if base.estimate else 1
    scope = node_scope(wl.spec)
    reason = "Measured"
    if scope is not None and peak:
        # One node's ranks were measured, not the job: the job's figure is derived.
        peak, said = derive(wl.spec, scope, peak)
        m = m.model_copy(
            update={
                "measured_ranks": scope.measured_ranks,
                "job_ranks": scope.job_ranks,
                "derived_peak_bytes": peak,
                "scope": said,
            }
        )
        reason = "MeasuredOneNode"
    room = headroom_fraction(capacity, peak) if capacity else -1.0
    what = f"measured peak {_fmt(peak)} per GPU on {m.gpu_class} ({_fmt(capacity)} usable)"
    if scope is not None and m.scope:
        what = f"{m.scope}; on {m.gpu_class} ({_fmt(capacity)} usable)"
    if m.reused_from:
        # A shared GPUMeasurement of the same measurement key (gpu_sizer.records.sharing).
        what = f"reused GPUMeasurement {m.reused_from}: {what}"
    conds.put(ConditionType.Measured, T, reason, what)
    same_class = est_rec is not None and cls is not None and est_rec.gpu_class == cls.name
    if room >= floor and cls is not None:
        rec = _measured_recommendation(
            cls,
            gpus,
            peak,
            present,
            est_rec.cheapest_fitting_class if est_rec else None,
            est_rec.engine_args if est_rec and same_class else None,
            spec=wl.spec,
            host=_host(base),
        )
        text = f"{what}: {room:.0%} headroom (at least {floor:.0%} required)"
        conds.put(ConditionType.HeadroomSufficient, T, "MeasuredFits", text)
        return base.model_copy(
            update={
                "phase": Phase.Ready,
                "measurement": m,
                "recommendation": rec,
                "conditions": _finish(conds, True, "Measured", text),
            }
        )
    short = f"{what}: {room:.0%} headroom, less than the required {floor:.0%}"
    if cls is not None and models_pool(wl.spec):
        # The engine takes a fraction of whichever GPU it runs on: a larger class would only
        # grow its pool. What the measurement corrects is the memory outside that fraction.
        return _lower_fraction(wl, base, m, conds, cls, peak, short, present, est_rec)
    bigger = [
        c
        for c in _allowed(wl.spec, config)
        if headroom_fraction(c.usable, peak) >= floor
        and (cls is None or c.memory_bytes > cls.memory_bytes)
    ]
    target = _pick(bigger, present)
    if target is None:
        conds.put(
            ConditionType.HeadroomSufficient,
            F,
            "NoSafeHeadroom",
            short + "; no larger allowed class",
        )
        return base.model_copy(
            update={
                "phase": Phase.Rejected,
                "measurement": m,
                "recommendation": None,
                "conditions": _finish(
                    conds, False, "NoSafeHeadroom", short + "; no larger allowed class"
                ),
            }
        )
    rec = _measured_recommendation(
        target, gpus, peak, present, target.name, spec=wl.spec, host=_host(base)
    )
    text = f"{short}; recommendation moved to {target.name}"
    conds.put(ConditionType.HeadroomSufficient, F, "MovedToLargerClass", text)
    return base.model_copy(
        update={
            "phase": Phase.Ready,
            "measurement": m,
            "recommendation": rec,
            "conditions": _finish(conds, True, "MovedToLargerClass", text),
        }
    )


def _incomplete(status: GPUWorkloadStatus) -> bool:
    """Whether the status's estimate misses a component (a lower bound, never Ready alone)."""
    return status.estimate is not None and not status.estimate.complete


def _not_ready_incomplete(status: GPUWorkloadStatus, why: str) -> str:
    """Ready's message when a measurement gave no GPU figure for an incomplete estimate."""
    assert status.estimate is not None
    missing = status.estimate.missing_components
    fields = ", ".join(dict.fromkeys(f for m in missing for f in m.fields))
    fixes = "; ".join(dict.fromkeys(m.fix for m in missing if m.fix))
    return (
        f"not ready: the measurement gave no GPU figure ({why}) and the estimate is incomplete "
        f"(missing {fields}); {fixes}, or measure with spec.measurement.mode Command on a GPU"
    )
