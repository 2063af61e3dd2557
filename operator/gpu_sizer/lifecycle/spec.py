"""Decisions on the spec: a create, a spec change, a resume, or a stored spec that is invalid.

:func:`plan_spec` estimates, then starts, stops or keeps the measurement: a spec hash is never
measured twice (a finished measurement of it is re-derived, not run again), a spec change stops the
running Job and ignores its result, and a measurement that found no node of its class is tried
again once such nodes appear.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpu_sizer.api import (
    ConditionStatus,
    ConditionType,
    GPUWorkloadStatus,
    MeasurementMode,
    MeasurementStatus,
    Phase,
)
from gpu_sizer.lifecycle.conditions import F, T, _Conds
from gpu_sizer.lifecycle.estimated import estimated_status
from gpu_sizer.lifecycle.gpu_class import _measure_class, _where
from gpu_sizer.lifecycle.measured import _from_measurement
from gpu_sizer.lifecycle.plan import (
    Action,
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
    _quiet_if_unchanged,
    _settled,
)
from gpu_sizer.sizing.assessment import Assessment, Verdict


def invalid_plan(
    problems: Sequence[str],
    *,
    generation: int | None,
    now: str,
    previous: GPUWorkloadStatus | None,
) -> Plan:
    """A stored object that fails validation (it bypassed the webhook): Stalled, with the field
    paths, and nothing else done for it."""
    return _settled(_invalid_plan(problems, generation, now, previous), previous, now)


def _invalid_plan(
    problems: Sequence[str],
    generation: int | None,
    now: str,
    previous: GPUWorkloadStatus | None,
) -> Plan:
    text = "; ".join(problems)
    conds = _Conds(previous, generation, now)
    conds.put(ConditionType.Estimated, F, "InvalidSpec", text)
    conds.put(ConditionType.Measured, F, "InvalidSpec", "not measured: the spec is invalid")
    conds.put(
        ConditionType.HeadroomSufficient,
        ConditionStatus.unknown,
        "InvalidSpec",
        "not judged: the spec is invalid",
    )
    conds.kstatus((False, "InvalidSpec", f"invalid spec: {text}"), False, True)
    status = GPUWorkloadStatus(
        observed_generation=generation,
        phase=Phase.Failed,
        spec_hash=None,
        conditions=conds.items,
    )
    prev_job = _running_job(previous)
    actions: list[Action] = [DeleteJob(prev_job)] if prev_job else []
    actions.append(Emit("Warning", "InvalidSpec", text))
    return _quiet_if_unchanged(Plan(status, tuple(actions)), previous)


def _running_job(previous: GPUWorkloadStatus | None) -> str | None:
    if previous and previous.phase is Phase.Measuring and previous.measurement:
        return previous.measurement.job_name
    return None


def plan_spec(
    wl: Workload,
    assessment: Assessment,
    config: Config,
    *,
    present: frozenset[str] | None,
    now: str,
    job_name: Callable[[str, int, int], str],
    memory_bytes: int,
) -> Plan:
    """Decide after a create, a spec change or a resume: estimate, then measure when needed.

    ``job_name(gpu_class, memory_bytes, retry)`` names Jobs deterministically; ``memory_bytes``
    is the host RAM request for a first attempt. Condition transition times are settled against
    the stored status (:func:`settle_transitions`): a decision that arrives at the stored status
    returns it unchanged, so re-deciding (a restart, a node event) writes nothing.
    """
    plan = _plan_spec(
        wl,
        assessment,
        config,
        present=present,
        now=now,
        job_name=job_name,
        memory_bytes=memory_bytes,
    )
    return _settled(plan, wl.previous, now)


def _plan_spec(
    wl: Workload,
    assessment: Assessment,
    config: Config,
    *,
    present: frozenset[str] | None,
    now: str,
    job_name: Callable[[str, int, int], str],
    memory_bytes: int,
) -> Plan:
    prev = wl.previous
    base = estimated_status(
        wl.spec,
        assessment,
        spec_hash=wl.spec_hash,
        generation=wl.generation,
        now=now,
        previous=prev,
    )
    rec = base.recommendation or assessment.lower_bound
    old_job = _running_job(prev)
    same_hash = prev is not None and prev.spec_hash == wl.spec_hash
    actions: list[Action] = []
    if old_job and not same_hash:
        actions.append(DeleteJob(old_job))

    measurable = assessment.verdict in (Verdict.Fits, Verdict.Incomplete)
    if not measurable or wl.spec.measurement.mode is MeasurementMode.Disabled:
        status = base.model_copy(update={"measurement": None})
        if old_job and same_hash:
            actions.append(DeleteJob(old_job))
        if assessment.verdict is not Verdict.Fits:
            actions.append(Emit("Warning", str(assessment.verdict), assessment.message))
        elif not (prev and prev.phase is Phase.Ready and same_hash):
            # The Ready condition says why (the estimate's message); the last condition is
            # Stalled, whose message is empty when nothing is stalled.
            ready = next(c for c in base.conditions if c.type == ConditionType.Ready)
            actions.append(Emit("Normal", "EstimateOnly", ready.message or ""))
        return _quiet_if_unchanged(Plan(status, tuple(actions)), prev)

    measured = prev.measurement if prev and same_hash else None
    if measured is not None and measured.spec_hash == wl.spec_hash:
        if prev is not None and prev.phase is Phase.Measuring:
            # Resume or a placement-only change while measuring: keep the Job, refresh figures
            # (and the Estimated condition as the estimate has it: Estimated or Incomplete).
            conds = _Conds(prev, wl.generation, now)
            est = next(c for c in base.conditions if c.type == ConditionType.Estimated)
            conds.put(ConditionType.Estimated, T, est.reason, est.message)
            return Plan(
                prev.model_copy(
                    update={
                        "observed_generation": wl.generation,
                        "estimate": base.estimate,
                        "conditions": conds.items,
                    }
                )
            )
        node_arrived = (
            measured.reason == "NoNodeOfClass"
            and present is not None
            and measured.gpu_class in present
        )
        if measured.completed_at and not node_arrived:
            # Never measure an unchanged spec twice: re-derive from the stored measurement.
            return Plan(_from_measurement(wl, base, measured, config, present, now), ())
    # A measurement that found no node of its class is tried again once such nodes appear,
    # under a new Job name (the old Job may still be terminating).
    retry = (measured.retry or 0) + 1 if measured is not None else 0

    first = _measure_class(wl.spec, config, present, rec, above=None)
    if first is None:  # cannot happen when the verdict is Fits; keep the estimate.
        return Plan(base)
    name = job_name(first.name, memory_bytes, retry)
    measurement = MeasurementStatus(
        spec_hash=wl.spec_hash,
        job_name=name,
        gpu_class=first.name,
        model_revision=wl.spec.model.revision,
        started_at=now,
        memory_request_bytes=memory_bytes,
        retry=retry,
    )
    conds = _Conds(base, wl.generation, now)
    where = _where(first, present)
    if prev is not None and prev.spec_hash and not same_hash and (old_job or prev.measurement):
        msg = (
            f"spec changed (specHash {prev.spec_hash} -> {wl.spec_hash}); "
            + (f"{config.runner} {old_job} stopped and its result ignored; " if old_job else "")
            + f"measuring again with {config.runner} {name} on {where}"
        )
        conds.put(ConditionType.Measured, F, "SpecChanged", msg)
        actions.append(Emit("Normal", "SpecChanged", msg))
    else:
        msg = f"measuring with {config.runner} {name} on {where}"
        conds.put(ConditionType.Measured, ConditionStatus.unknown, "Measuring", msg)
    conds.kstatus((False, "Measuring", msg), True, False)
    actions.append(
        StartJob(name, first, base.estimate.gpu_count if base.estimate else 1, memory_bytes)
    )
    actions.append(Emit("Normal", "MeasurementStarted", msg))
    return Plan(
        base.model_copy(
            update={"phase": Phase.Measuring, "measurement": measurement, "conditions": conds.items}
        ),
        tuple(actions),
    )
