"""The pure core of reconciliation: (spec, assessment, observed state) -> status.

kopf handlers call these functions and only move their results in and out of the API. The same
:func:`estimated_status` gives ``gpu-sizer estimate -o json`` the status the operator would write
before measuring.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_sizer.api import (
    Condition,
    ConditionStatus,
    ConditionType,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    MeasurementMode,
    Phase,
)
from gpu_sizer.sizing import Assessment, Verdict

__all__ = ["estimated_status", "set_condition"]

T, F = ConditionStatus.true, ConditionStatus.false


def set_condition(
    conditions: Sequence[Condition],
    type_: ConditionType | str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> list[Condition]:
    """Return ``conditions`` with ``type_`` set; ``lastTransitionTime`` moves only when the
    condition's status changes (Kubernetes API conventions)."""
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type == str(type_):
            found = True
            moved = cond.status != status
            out.append(
                Condition(
                    type=str(type_),
                    status=status,
                    reason=reason,
                    message=message,
                    observed_generation=generation,
                    last_transition_time=now if moved else (cond.last_transition_time or now),
                )
            )
        else:
            out.append(cond)
    if not found:
        out.append(
            Condition(
                type=str(type_),
                status=status,
                reason=reason,
                message=message,
                observed_generation=generation,
                last_transition_time=now,
            )
        )
    return out


def estimated_status(
    spec: GPUWorkloadSpec,
    assessment: Assessment,
    *,
    spec_hash: str,
    generation: int | None,
    now: str,
    previous: GPUWorkloadStatus | None = None,
) -> GPUWorkloadStatus:
    """The status after estimating, before any measurement of this spec hash.

    ``now`` is an RFC 3339 timestamp; ``previous`` keeps transition times of unchanged conditions.
    """
    conds = list(previous.conditions) if previous else []
    gen = generation

    def put(t: ConditionType, s: ConditionStatus, reason: str, msg: str) -> None:
        nonlocal conds
        conds = set_condition(conds, t, s, reason, msg, gen, now)

    put(ConditionType.Estimated, T, "Estimated", assessment.message)
    disabled = spec.measurement.mode is MeasurementMode.Disabled
    if assessment.verdict is not Verdict.Fits:
        phase = Phase.Rejected
        put(ConditionType.HeadroomSufficient, F, str(assessment.verdict), assessment.message)
        put(ConditionType.Measured, F, "NotMeasured", "no allowed GPU class fits the estimate")
        put(ConditionType.Ready, F, str(assessment.verdict), assessment.message)
        put(ConditionType.Reconciling, F, str(assessment.verdict), "nothing left to do")
        put(ConditionType.Stalled, T, str(assessment.verdict), assessment.message)
    elif disabled:
        phase = Phase.Ready
        put(ConditionType.HeadroomSufficient, T, "EstimateFits", assessment.message)
        put(
            ConditionType.Measured,
            F,
            "MeasurementDisabled",
            "spec.measurement.mode is Disabled; the recommendation rests on the estimate",
        )
        put(
            ConditionType.Ready,
            T,
            "EstimateOnly",
            "ready on the estimate alone (measurement disabled): " + assessment.message,
        )
        put(ConditionType.Reconciling, F, "EstimateOnly", "measurement disabled")
        put(ConditionType.Stalled, F, "EstimateOnly", "")
    else:
        phase = Phase.Estimated
        put(ConditionType.HeadroomSufficient, T, "EstimateFits", assessment.message)
        put(
            ConditionType.Measured,
            ConditionStatus.unknown,
            "MeasurementPending",
            "waiting for the measurement Job",
        )
        put(ConditionType.Ready, F, "MeasurementPending", "estimated; measurement pending")
        put(ConditionType.Reconciling, T, "MeasurementPending", "measurement pending")
        put(ConditionType.Stalled, F, "MeasurementPending", "")
    return GPUWorkloadStatus(
        observed_generation=generation,
        phase=phase,
        spec_hash=spec_hash,
        estimate=assessment.estimate,
        measurement=previous.measurement if previous else None,
        recommendation=assessment.recommendation,
        conditions=conds,
    )
