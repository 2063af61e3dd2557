"""The pure core of reconciliation: (spec, assessment, observed state) -> status.

kopf handlers call these functions and only move their results in and out of the API. The same
:func:`estimated_status` gives ``gpu-sizer estimate -o json`` the status the operator would write
before measuring.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from gpu_sizer.api import (
    Basis,
    Condition,
    ConditionStatus,
    ConditionType,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    MeasurementMode,
    MeasurementStatus,
    Phase,
    RecommendationStatus,
)
from gpu_sizer.budget.engines import models_pool
from gpu_sizer.catalog import GPUClass, headroom_fraction
from gpu_sizer.measurement.node_scope import derive, node_scope
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind
from gpu_sizer.sizing import pool_verdict
from gpu_sizer.sizing.assessment import Assessment, Verdict
from gpu_sizer.sizing.placement import snippets
from gpu_sizer.sizing.workers import recommendation_fields

__all__ = [
    "Action",
    "Config",
    "DeleteJob",
    "Emit",
    "Plan",
    "StartJob",
    "Workload",
    "decide",
    "estimated_status",
    "invalid_plan",
    "measured_peak",
    "plan_outcome",
    "plan_spec",
    "queued_plan",
    "set_condition",
    "settle_transitions",
    "starts_measurement",
]

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


def settle_transitions(
    conditions: Sequence[Condition], stored: Sequence[Condition], now: str
) -> list[Condition]:
    """``conditions`` with each ``lastTransitionTime`` taken from the *stored* status.

    A decision may pass a condition through intermediate values (re-deriving a measured status
    starts from the estimate, where Measured is Unknown and Ready False); only the stored value
    and the final one matter. Kubernetes API conventions: ``lastTransitionTime`` is when the
    condition's ``status`` last changed, so it stays the stored time when the final status equals
    the stored one, and becomes ``now`` otherwise (a new condition included).
    """
    before = {c.type: c for c in stored}
    out: list[Condition] = []
    for cond in conditions:
        old = before.get(cond.type)
        if old is not None and old.status == cond.status and old.last_transition_time:
            when = old.last_transition_time
        elif old is not None and old.status == cond.status:
            when = cond.last_transition_time or now
        else:
            when = now
        out.append(
            cond
            if cond.last_transition_time == when
            else cond.model_copy(update={"last_transition_time": when})
        )
    return out


def current_conditions(
    conditions: Sequence[Condition], generation: int | None, now: str
) -> list[Condition]:
    """``conditions`` with every one that was not judged for ``generation`` (an older
    ``observedGeneration``) restated as ``Unknown``, reason ``NotEvaluated``: a condition of an
    earlier spec must never read as this spec's (an invalid spec's status kept the old spec's
    ``HeadroomSufficient=True``). Kubernetes API conventions: ``observedGeneration`` says which
    generation a condition describes."""
    if generation is None:
        return list(conditions)
    out: list[Condition] = []
    for cond in conditions:
        old = cond.observed_generation
        if old is not None and old < generation:
            cond = Condition(
                type=cond.type,
                status=ConditionStatus.unknown,
                reason="NotEvaluated",
                message=f"not evaluated for generation {generation} (last judged for {old})",
                observed_generation=generation,
                last_transition_time=(
                    cond.last_transition_time if cond.status == ConditionStatus.unknown else now
                ),
            )
        out.append(cond)
    return out


def _settled(plan: Plan, previous: GPUWorkloadStatus | None, now: str) -> Plan:
    """The plan with transition times settled against the stored status (see
    :func:`settle_transitions`), and no condition of an older generation left standing (see
    :func:`current_conditions`)."""
    stored = previous.conditions if previous is not None else []
    fresh = current_conditions(plan.status.conditions, plan.status.observed_generation, now)
    conds = settle_transitions(fresh, stored, now)
    if conds == plan.status.conditions:
        return plan
    return Plan(plan.status.model_copy(update={"conditions": conds}), plan.actions)


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


# --------------------------------------------------------------------------------------------
# Actions and plans: what the imperative shell must do after a decision.

GIB = 1 << 30


@dataclass(frozen=True)
class StartJob:
    """Create the measurement Job ``name`` (idempotent: an existing Job of that name is adopted).

    ``memory_bytes`` is the host RAM request/limit; ``gpus`` the ``nvidia.com/gpu`` limit.
    """

    name: str
    gpu_class: GPUClass
    gpus: int
    memory_bytes: int


@dataclass(frozen=True)
class DeleteJob:
    """Delete the Job ``name`` (and its pods); a missing Job is not an error."""

    name: str


@dataclass(frozen=True)
class Emit:
    """Post a Kubernetes Event on the GPUWorkload (``type_`` is Normal or Warning)."""

    type_: str
    reason: str
    message: str


Action = StartJob | DeleteJob | Emit


@dataclass(frozen=True)
class Plan:
    """The status to write and the actions to take, in order."""

    status: GPUWorkloadStatus
    actions: tuple[Action, ...] = ()


@dataclass(frozen=True)
class Config:
    """Operator settings the decisions depend on.

    ``unschedulable_timeout_seconds``: how long a measurement pod may stay unschedulable before
    the operator stops waiting for a node of the class.
    """

    catalog: tuple[GPUClass, ...]
    unschedulable_timeout_seconds: float = 600.0
    #: What runs a measurement, as people read it in messages: "Job" (Kubernetes) or
    #: "local probe" (the local backend, where no Job exists).
    runner: str = "Job"


@dataclass(frozen=True)
class Workload:
    """Identity and observed state of one GPUWorkload."""

    name: str
    namespace: str
    generation: int | None
    spec: GPUWorkloadSpec
    spec_hash: str
    previous: GPUWorkloadStatus | None


def _fmt(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


class _Conds:
    """Accumulates conditions with :func:`set_condition` for one generation and time."""

    def __init__(self, previous: GPUWorkloadStatus | None, generation: int | None, now: str):
        self.items: list[Condition] = list(previous.conditions) if previous else []
        self.generation = generation
        self.now = now

    def put(self, t: ConditionType, s: ConditionStatus, reason: str, msg: str) -> None:
        self.items = set_condition(self.items, t, s, reason, msg, self.generation, self.now)

    def kstatus(self, ready: tuple[bool, str, str], reconciling: bool, stalled: bool) -> None:
        """Ready/Reconciling/Stalled from one (ready, reason, message) triple."""
        ok, reason, msg = ready
        self.put(ConditionType.Ready, T if ok else F, reason, msg)
        self.put(
            ConditionType.Reconciling, T if reconciling else F, reason, msg if reconciling else ""
        )
        self.put(ConditionType.Stalled, T if stalled else F, reason, msg if stalled else "")


def _allowed(spec: GPUWorkloadSpec, config: Config) -> list[GPUClass]:
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


def _quiet_if_unchanged(plan: Plan, previous: GPUWorkloadStatus | None) -> Plan:
    """Drop the plan's Events when its Ready condition is the one already stored.

    Events announce transitions. A resume (every operator restart) or a no-op re-run decides
    the same verdict again; posting it again would add one Warning per restart per workload.
    """
    if previous is None:
        return plan

    def key(status: GPUWorkloadStatus) -> tuple[str, str | None, str | None] | None:
        ready = next((c for c in status.conditions if c.type == "Ready"), None)
        return None if ready is None else (str(ready.status), ready.reason, ready.message)

    if key(previous) is None or key(previous) != key(plan.status):
        return plan
    return Plan(plan.status, tuple(a for a in plan.actions if not isinstance(a, Emit)))


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


def starts_measurement(plan: Plan, previous: GPUWorkloadStatus | None, spec_hash: str) -> bool:
    """Whether ``plan`` starts a *new* measurement, one that needs a measurement slot.

    A Job that replaces the running one of the same spec hash (recreated once after a deletion,
    retried after an eviction or a host OOM, moved to a larger class after a CUDA OOM) keeps
    the slot the measurement holds: it is not queued again.
    """
    if not any(isinstance(a, StartJob) for a in plan.actions):
        return False
    holding = (
        previous is not None
        and previous.phase is Phase.Measuring
        and previous.measurement is not None
        and previous.measurement.spec_hash == spec_hash
    )
    return not holding


def queued_plan(
    plan: Plan,
    wl: Workload,
    config: Config,
    *,
    message: str,
    now: str,
) -> Plan:
    """``plan`` (which starts a new measurement) held back until a measurement slot is free.

    The status stays where the estimate puts it (phase ``Estimated``, the estimate-based
    recommendation), with ``Measured=False`` reason ``Queued`` and ``message`` (the position and
    why it waits); no Job is started, Jobs the plan deletes are still deleted. A ``Queued``
    Event is posted when the workload enters the queue, not on every move in it. The stored
    measurement is kept only when it belongs to this spec hash (a measurement that found no node
    of its class, waiting to be retried); one of an older spec is dropped, as a new measurement
    would replace it.
    """
    prev = wl.previous
    kept = prev.measurement if prev is not None else None
    if kept is not None and kept.spec_hash != wl.spec_hash:
        kept = None
    conds = _Conds(plan.status, wl.generation, now)
    conds.put(ConditionType.Measured, F, "Queued", message)
    wait = f"waiting for a measurement slot ({config.runner} not started yet)"
    conds.kstatus((False, "Queued", wait), True, False)
    status = plan.status.model_copy(
        update={"phase": Phase.Estimated, "measurement": kept, "conditions": conds.items}
    )
    was = next((c for c in prev.conditions if c.type == "Measured"), None) if prev else None
    actions: list[Action] = [a for a in plan.actions if isinstance(a, DeleteJob)]
    if was is None or was.reason != "Queued":
        actions.append(Emit("Normal", "Queued", message))
    return _settled(Plan(status, tuple(actions)), prev, now)


def _where(cls: GPUClass, present: frozenset[str] | None) -> str:
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


def _finish(conds: _Conds, ready: bool, reason: str, text: str) -> list[Condition]:
    conds.kstatus((ready, reason, text), False, not ready)
    return conds.items


def plan_outcome(
    wl: Workload,
    outcome: Outcome,
    config: Config,
    *,
    present: frozenset[str] | None,
    now: str,
    job_name: Callable[[str, int, int], str],
) -> Plan:
    """Decide after observing the measurement Job of the current spec hash.

    Call only while ``previous.phase`` is Measuring and ``previous.measurement.specHash`` equals
    the current spec hash (results of an older spec are ignored by construction). Transition
    times are settled against the stored status, as in :func:`plan_spec`.
    """
    plan = _plan_outcome(wl, outcome, config, present=present, now=now, job_name=job_name)
    return _settled(plan, wl.previous, now)


#: Endings the operator brings about by deleting the Job (its pod never ran, or never will): a
#: Job of such an ending that still exists is deleted on every decision until it is gone, so a
#: deletion that failed once (a 500, a 429) is tried again instead of leaving the Job to hold
#: its slot and its waiters until its deadline.
DELETED_ON_END: frozenset[str] = frozenset({"Unschedulable", "NoNodeOfClass", "ImagePullFailed"})


def _leftover(plan: Plan, spec_hash: str) -> Plan:
    """``plan`` with a :class:`DeleteJob` for the Job of a measurement that ended in one of
    :data:`DELETED_ON_END` (a no-op for the shell when the Job is gone already)."""
    m = plan.status.measurement
    if (
        m is None
        or not m.job_name
        or not m.completed_at
        or m.spec_hash != spec_hash
        or m.reason not in DELETED_ON_END
        or any(isinstance(a, DeleteJob) and a.name == m.job_name for a in plan.actions)
    ):
        return plan
    return Plan(plan.status, (*plan.actions, DeleteJob(m.job_name)))


def decide(
    wl: Workload,
    assessment: Assessment,
    config: Config,
    *,
    present: frozenset[str] | None,
    now: str,
    job_name: Callable[[str, int, int], str],
    memory_bytes: int,
    observe: Callable[[MeasurementStatus], Outcome],
) -> Plan:
    """One level-triggered decision from everything known about a workload.

    The spec first (:func:`plan_spec`: estimate, start, stop or keep a measurement); then, while
    the measurement of the current spec hash runs in a Job it did not just start, what that Job
    says (``observe(measurement) -> Outcome``, then :func:`plan_outcome`). The same inputs give
    the same plan, and the stored status back (same object, equal) when nothing changed, so the
    caller can run it on any event, any number of times, and write only when the status differs.
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
    m = plan.status.measurement
    if (
        plan.status.phase is Phase.Measuring
        and m is not None
        and m.job_name
        and m.spec_hash == wl.spec_hash
        and not any(isinstance(a, StartJob) for a in plan.actions)
    ):
        measuring = Workload(
            wl.name, wl.namespace, wl.generation, wl.spec, wl.spec_hash, plan.status
        )
        then = _plan_outcome(
            measuring, observe(m), config, present=present, now=now, job_name=job_name
        )
        plan = Plan(then.status, (*plan.actions, *then.actions))
    return _settled(_leftover(plan, wl.spec_hash), wl.previous, now)


def _plan_outcome(
    wl: Workload,
    outcome: Outcome,
    config: Config,
    *,
    present: frozenset[str] | None,
    now: str,
    job_name: Callable[[str, int, int], str],
) -> Plan:
    prev = wl.previous
    assert prev is not None and prev.measurement is not None
    m = prev.measurement
    cls = _by_name(config, m.gpu_class)
    job = m.job_name or ""
    kind = outcome.kind
    waiting = (
        kind is OutcomeKind.Unschedulable
        and outcome.seconds_unschedulable < config.unschedulable_timeout_seconds
    )
    if kind in (OutcomeKind.Pending, OutcomeKind.Running) or waiting:
        # Not yet unschedulable past the timeout: waiting for a node is waiting, as pending is
        # (a Job Kueue just admitted has no pod for a moment: Queued gives way to Measuring).
        measured = next((c for c in prev.conditions if c.type == "Measured"), None)
        queued_before = measured is not None and measured.reason == "Queued"
        if outcome.queued != queued_before:
            # Say in the status that the run waits its turn (and when it started after all).
            conds = _Conds(prev, wl.generation, now)
            if outcome.queued:
                conds.put(ConditionType.Measured, F, "Queued", outcome.message)
            else:
                conds.put(
                    ConditionType.Measured,
                    ConditionStatus.unknown,
                    "Measuring",
                    f"measuring with {config.runner} {job}",
                )
            update: dict[str, object] = {"conditions": conds.items}
            if outcome.node_name:
                update["measurement"] = m.model_copy(update={"node_name": outcome.node_name})
            return Plan(prev.model_copy(update=update))
        if outcome.node_name and outcome.node_name != m.node_name:
            return Plan(
                prev.model_copy(
                    update={"measurement": m.model_copy(update={"node_name": outcome.node_name})}
                )
            )
        return Plan(prev)
    if kind is OutcomeKind.Unschedulable:
        waited = f"{outcome.seconds_unschedulable:.0f} s ({outcome.message})"
        if present is not None and m.gpu_class in present:
            # Nodes of the class exist but are full, tainted or cordoned: waiting longer is the
            # cluster's business, not a reason to loop; a spec change measures again.
            reason = "Unschedulable"
            text = (
                f"nodes of class {m.gpu_class} exist but none could run Job {job} for "
                f"{waited}; keeping the estimate-based recommendation"
            )
        else:
            reason = "NoNodeOfClass"
            text = (
                f"no node of class {m.gpu_class} could run Job {job} for {waited}; keeping "
                "the estimate-based recommendation; measuring again when a node of the class "
                "joins"
            )
        return _ended(wl, m, config, present, now, reason, text, [DeleteJob(job)], "Warning")
    if kind is OutcomeKind.Missing:
        if not m.recreated:
            text = f"{config.runner} {job} was deleted before it finished; recreated it once"
            conds = _Conds(prev, wl.generation, now)
            conds.put(ConditionType.Measured, ConditionStatus.unknown, "JobRecreated", text)
            status = prev.model_copy(
                update={
                    "measurement": m.model_copy(update={"recreated": True}),
                    "conditions": conds.items,
                }
            )
            gpus = prev.estimate.gpu_count if prev.estimate else 1
            assert cls is not None
            return Plan(
                status,
                (
                    StartJob(job, cls, gpus, m.memory_request_bytes or 0),
                    Emit("Warning", "JobRecreated", text),
                ),
            )
        text = (
            f"{config.runner} {job} was deleted again before it finished; "
            "not recreating it a second time"
        )
        return _ended(wl, m, config, present, now, "JobDeleted", text, [], "Warning")
    if kind in (OutcomeKind.HostOOMKilled, OutcomeKind.Evicted) and not m.retried:
        mem = m.memory_request_bytes or 0
        if kind is OutcomeKind.HostOOMKilled:
            mem = min(2 * mem, 512 * GIB)
            text = (
                f"{outcome.message}; retrying once with the memory request raised from "
                f"{_fmt(m.memory_request_bytes)} to {_fmt(mem)}"
            )
        else:
            text = f"{outcome.message}; retrying once"
        assert cls is not None
        retry = (m.retry or 0) + 1
        name = job_name(cls.name, mem, retry)
        new_m = m.model_copy(
            update={
                "job_name": name,
                "memory_request_bytes": mem,
                "retry": retry,
                "retried": True,
                "node_name": None,
            }
        )
        conds = _Conds(prev, wl.generation, now)
        conds.put(ConditionType.Measured, ConditionStatus.unknown, str(kind), text)
        gpus = prev.estimate.gpu_count if prev.estimate else 1
        return Plan(
            prev.model_copy(update={"measurement": new_m, "conditions": conds.items}),
            (DeleteJob(job), StartJob(name, cls, gpus, mem), Emit("Warning", str(kind), text)),
        )
    if kind is OutcomeKind.Succeeded and outcome.result is not None:
        return _with_result(wl, outcome, config, present, now, job_name)
    reason = {
        OutcomeKind.DeadlineExceeded: "DeadlineExceeded",
        OutcomeKind.HostOOMKilled: "HostOOMKilled",
        OutcomeKind.ImagePullFailed: "ImagePullFailed",
        OutcomeKind.Evicted: "Evicted",
    }.get(kind, "MeasurementFailed")
    text = outcome.message
    if kind is OutcomeKind.HostOOMKilled:
        text += f" even with {_fmt(m.memory_request_bytes)} of host memory"
    return _ended(
        wl,
        m,
        config,
        present,
        now,
        reason,
        text,
        [DeleteJob(job)] if kind is OutcomeKind.ImagePullFailed else [],
        "Warning",
        node=outcome.node_name,
    )


def _ended(
    wl: Workload,
    m: MeasurementStatus,
    config: Config,
    present: frozenset[str] | None,
    now: str,
    reason: str,
    text: str,
    actions: list[Action],
    event_type: str,
    node: str | None = None,
) -> Plan:
    prev = wl.previous
    assert prev is not None
    done = m.model_copy(
        update={
            "reason": reason,
            "message": text,
            "completed_at": now,
            "node_name": node or m.node_name,
        }
    )
    base = prev.model_copy(update={"observed_generation": wl.generation})
    status = _from_measurement(wl, base, done, config, present, now)
    return Plan(status, (*actions, Emit(event_type, reason, text)))


def _with_result(
    wl: Workload,
    outcome: Outcome,
    config: Config,
    present: frozenset[str] | None,
    now: str,
    job_name: Callable[[str, int, int], str],
) -> Plan:
    prev = wl.previous
    assert prev is not None and prev.measurement is not None and outcome.result is not None
    m = prev.measurement
    r = outcome.result
    cls = _by_name(config, m.gpu_class)
    nvml = r.nvml
    filled = m.model_copy(
        update={
            "node_name": outcome.node_name or m.node_name,
            "device": r.device,
            "gpu_product": nvml.device_name if nvml and nvml.available else None,
            "gpu_memory_bytes": (nvml.total_bytes if nvml and nvml.available else None)
            or (cls.memory_bytes if cls and r.device == "cuda" else None),
            "peak_allocated_bytes": r.peak_allocated_bytes if r.device == "cuda" else None,
            "peak_reserved_bytes": r.peak_reserved_bytes if r.device == "cuda" else None,
            "peak_device_used_bytes": r.peak_device_used_bytes if r.device == "cuda" else None,
            "out_of_memory": bool(r.out_of_memory or r.status == "OutOfMemory"),
            "message": (
                f"peak RSS {_fmt(r.peak_rss_bytes)} of host memory on the CPU"
                if r.device == "cpu" and r.peak_rss_bytes
                else None
            ),
            "completed_at": r.completed_at or now,
        }
    )
    job = m.job_name or ""
    if filled.out_of_memory:
        failed = (
            f"{_fmt(r.oom_requested_bytes)} allocation"
            if r.oom_requested_bytes
            else "an allocation"
        )
        oom_classes = [*(m.out_of_memory_classes or []), m.gpu_class or "?"]
        nxt = _measure_class(wl.spec, config, present, None, above=cls) if cls else None
        if nxt is None:
            text = (
                f"CUDA out of memory on {m.gpu_class} ({failed} failed in phase "
                f"{r.oom_phase or '?'}); no larger allowed class is left"
            )
            done = filled.model_copy(
                update={
                    "reason": "OutOfMemory",
                    "message": text,
                    "out_of_memory_classes": oom_classes,
                }
            )
            status = _from_measurement(wl, prev, done, config, present, now)
            return Plan(status, (Emit("Warning", "OutOfMemory", text),))
        mem = m.memory_request_bytes or 0
        name = job_name(nxt.name, mem, 0)
        text = (
            f"CUDA out of memory on {m.gpu_class} ({failed} failed in phase {r.oom_phase or '?'}): "
            f"the class is too small; measuring again on {_where(nxt, present)} "
            f"with {config.runner} {name}"
        )
        new_m = MeasurementStatus(
            spec_hash=m.spec_hash,
            job_name=name,
            gpu_class=nxt.name,
            model_revision=m.model_revision,
            started_at=now,
            memory_request_bytes=mem,
            retry=0,
            out_of_memory_classes=oom_classes,
        )
        conds = _Conds(prev, wl.generation, now)
        conds.put(ConditionType.Measured, ConditionStatus.unknown, "OutOfMemory", text)
        conds.put(ConditionType.HeadroomSufficient, F, "OutOfMemory", text)
        gpus = prev.estimate.gpu_count if prev.estimate else 1
        return Plan(
            prev.model_copy(update={"measurement": new_m, "conditions": conds.items}),
            (DeleteJob(job), StartJob(name, nxt, gpus, mem), Emit("Warning", "OutOfMemory", text)),
        )
    if r.status == "Unsupported":
        done = filled.model_copy(
            update={"reason": "Unsupported", "message": r.message or "unsupported"}
        )
        status = _from_measurement(wl, prev, done, config, present, now)
        return Plan(status, (Emit("Normal", "MeasurementUnsupported", done.message or ""),))
    if r.status != "Succeeded":
        reason = "DeadlineExceeded" if r.status == "Timeout" else "MeasurementFailed"
        done = filled.model_copy(
            update={
                "reason": reason,
                "message": f"probe reported {r.status}: {r.message or 'no message'}",
            }
        )
        status = _from_measurement(wl, prev, done, config, present, now)
        return Plan(status, (Emit("Warning", reason, done.message or ""),))
    status = _from_measurement(wl, prev, filled, config, present, now)
    ready = next((c for c in status.conditions if c.type == "Ready"), None)
    return Plan(status, (Emit("Normal", "Measured", ready.message if ready else ""),))


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
