"""The status an estimate alone gives, before any measurement of the spec hash.

The phase and conditions follow from the sizing verdict and the measurement mode: an estimate that
fits waits for its measurement (or is Ready on the estimate when measurement is disabled), one that
does not fit is Rejected, and an incomplete estimate (a lower bound) is never Ready on its own.
``gpu-sizer estimate -o json`` prints this same status.
"""

from __future__ import annotations

from gpu_sizer.api import (
    ConditionStatus,
    ConditionType,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    MeasurementMode,
    Phase,
)
from gpu_sizer.lifecycle.conditions import F, T, set_condition
from gpu_sizer.sizing.assessment import Assessment, Verdict


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

    incomplete = assessment.verdict is Verdict.Incomplete
    put(ConditionType.Estimated, T, str(Verdict.Incomplete) if incomplete else "Estimated",
        assessment.message)  # fmt: skip
    disabled = spec.measurement.mode is MeasurementMode.Disabled
    if incomplete:
        # A lower bound never makes a workload Ready: only a measurement can (see
        # _from_measurement); with measurement disabled nothing will, so it is Stalled.
        phase = Phase.Estimated
        put(ConditionType.HeadroomSufficient, ConditionStatus.unknown, "Incomplete",
            assessment.message)  # fmt: skip
        if disabled:
            text = (
                f"not ready: {assessment.message}; spec.measurement.mode is Disabled, so no "
                "measurement can complete it (or set spec.measurement.mode to Synthetic or Command)"
            )
            put(
                ConditionType.Measured,
                F,
                "MeasurementDisabled",
                "spec.measurement.mode is Disabled",
            )
            put(ConditionType.Ready, F, "Incomplete", text)
            put(ConditionType.Reconciling, F, "Incomplete", "")
            put(ConditionType.Stalled, T, "Incomplete", text)
        else:
            put(ConditionType.Measured, ConditionStatus.unknown, "MeasurementPending",
                "waiting for the measurement Job")  # fmt: skip
            put(ConditionType.Ready, F, "MeasurementPending",
                "incomplete estimate; only a measurement can make it Ready")  # fmt: skip
            put(ConditionType.Reconciling, T, "MeasurementPending", "measurement pending")
            put(ConditionType.Stalled, F, "MeasurementPending", "")
    elif assessment.verdict is not Verdict.Fits:
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
