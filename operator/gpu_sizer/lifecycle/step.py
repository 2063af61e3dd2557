"""The controller's pure decide step: what the operator knows of one workload in, what to do out.

The pure core (:func:`gpu_sizer.lifecycle.decide`) turns a spec, its assessment and the observed
Job into a status and actions. Around it the controller knows more than the core does: the
finished measurement it must key and publish as a shared record, the shared record a workload
may reuse instead of measuring, the measurement it must wait for, the ResourceQuota that
refused a Job, the measurement queue, the MIG strategy of the class's nodes. This module makes
those rewrites of the core's plan, from an immutable :class:`Snapshot`, without I/O, clocks or
kopf, so that every one of them is tested on plain values.

A decision is made in the order the controller acts:

1. :func:`decide` (before any Job is touched): the core's plan, restated when the world changed
   under a finished measurement, with the GPU-seconds of a Job that ended charged to its
   namespace, and checked against the shared records (reuse one, or wait for a measurement of
   the same key in flight). When the plan starts a measurement and the namespace shares, the
   answer asks for the shared records of the class it starts on (:attr:`Decision.look_up`);
   the controller looks them up and decides again with them in the snapshot.
2. :func:`queued` when the measurement queue holds the start back, or a ResourceQuota refused
   the Job (the API's answer to the Job's creation is known only after trying).
3. :func:`finish` once the Jobs are acted on: a measurement that finished in this decision gets
   its measurement key, and the records to publish come out (the finished measurement, and a
   CUDA out-of-memory that moved on to a larger class); the recommendation's snippets follow
   the MIG strategy of the class's nodes.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpu_sizer.api import GPUWorkloadSpec, GPUWorkloadStatus, MeasurementStatus, Phase
from gpu_sizer.api.record import RecordScope, shareable
from gpu_sizer.api.times import rfc3339
from gpu_sizer.catalog import GPUClass
from gpu_sizer.lifecycle import (
    Config,
    Emit,
    Plan,
    StartJob,
    Workload,
    invalid_plan,
    queued_plan,
    starts_measurement,
)
from gpu_sizer.lifecycle import decide as core_decide
from gpu_sizer.measurement import gpu_time
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind
from gpu_sizer.records.sharing import (
    Reuse,
    Stale,
    Wait,
    candidate_keys,
    remeasure_previous,
    restated,
    reuse_previous,
    reused_measurement,
    revalidation_due,
    trusted_run,
    waiting_plan,
)
from gpu_sizer.sizing.assessment import Assessment
from gpu_sizer.sizing.placement import for_strategy

__all__ = [
    "Decision",
    "Finished",
    "QueueWait",
    "Snapshot",
    "decide",
    "finish",
    "job_namespace",
    "next_decision",
    "queued",
    "record_scope",
]

#: Measurement reasons that are no result of the workload's own (no node, no schedule, the Job
#: deleted under it): nothing to key or to publish.
NO_RESULT_REASONS = ("NoNodeOfClass", "Unschedulable", "JobDeleted")


@dataclass(frozen=True)
class Snapshot:
    """What the operator knows of one workload when it decides.

    :param name: the GPUWorkload's name.
    :param namespace: its namespace.
    :param generation: ``metadata.generation`` (conditions carry it as ``observedGeneration``).
    :param spec: the parsed spec; None when it is invalid (``problems`` says why).
    :param problems: why the spec is invalid (empty when it is valid).
    :param spec_hash: :func:`gpu_sizer.api.spec_hash` of ``spec`` (None when invalid).
    :param previous: the stored status (None: none, or unreadable).
    :param stale: why the finished measurement of ``previous`` is taken again (None: it holds).
    :param assessment: the spec's assessment (:func:`gpu_sizer.sizing.verdict.assess`); None when
        invalid.
    :param config: the operator settings the core reads.
    :param present: the GPU classes with at least one node.
    :param now: the decision's time, RFC 3339 (conditions' ``lastTransitionTime``).
    :param at: the same time as a UTC datetime (second precision).
    :param memory_bytes: host RAM a measurement Job requests (bytes).
    :param job_name: the name a Job of this workload gets for (class, memory bytes, retry);
        a pure function of the workload's identity and spec hash.
    :param outcomes: where each of the workload's own live Jobs stands, by Job name (a Job the
        status names and that is not here is missing). The controller passes a mapping that
        observes a Job when its entry is read, so that a settled workload's Jobs are not
        looked at; the same watch state gives the same outcome.
    :param sharing: whether the namespace takes part in shared measurement records.
    :param looked_up: whether :attr:`shared` holds the answer of the shared records.
    :param shared: what the shared records offer the measurement the plan starts (a record to
        reuse, or a measurement of the same key to wait for), when ``looked_up``.
    :param record_ttl_seconds: ``--measurement-record-ttl`` (a reused record's expiry is capped).
    """

    name: str
    namespace: str
    generation: int | None
    spec: GPUWorkloadSpec | None
    spec_hash: str | None
    previous: GPUWorkloadStatus | None
    config: Config
    now: str
    at: datetime.datetime
    problems: tuple[str, ...] = ()
    stale: Stale | None = None
    assessment: Assessment | None = None
    present: frozenset[str] = frozenset()
    memory_bytes: int = 0
    job_name: Callable[[str, int, int], str] | None = None
    outcomes: Mapping[str, Outcome] = field(default_factory=dict)
    sharing: bool = False
    looked_up: bool = False
    shared: Reuse | Wait | None = None
    record_ttl_seconds: float = 0.0

    @property
    def deciding(self) -> GPUWorkloadStatus | None:
        """The stored status the core decides from: with a stale finished measurement turned
        into an unfinished placeholder, so that the core measures again."""
        if self.stale is not None and self.previous is not None:
            return remeasure_previous(self.previous)
        return self.previous

    def workload(self) -> Workload | None:
        """The core's view of the workload (None when the spec is invalid)."""
        if self.spec is None or self.spec_hash is None:
            return None
        return Workload(
            self.name, self.namespace, self.generation, self.spec, self.spec_hash, self.deciding
        )


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` says to do before any Job is touched.

    :param plan: the status to write and the actions (Jobs to start or delete, Events).
    :param starts: whether the plan starts a new measurement (it needs a measurement slot).
    :param look_up: the Job whose class the shared records must be looked up for (the
        controller then decides again with :attr:`Snapshot.shared`); None when no look-up is
        needed.
    :param wait: the measurement of the same key this workload waits for (None: none).
    :param reused: what was reused, said in the log (None: nothing).
    :param observed: the measurement whose Job the core observed, and what it saw.
    :param outcome: what the core saw of that Job.
    :param charged_seconds: GPU-seconds newly charged to the namespace's daily budget.
    """

    plan: Plan
    starts: bool = False
    look_up: StartJob | None = None
    wait: Wait | None = None
    reused: str | None = None
    observed: MeasurementStatus | None = None
    outcome: Outcome | None = None
    charged_seconds: int = 0


@dataclass(frozen=True)
class QueueWait:
    """Why a measurement waits for a slot, as the measurement queue answered.

    :param position: its 1-based position as written (exact, or a step when ``over``).
    :param over: whether the position is written as "over ``position``".
    :param reason: :class:`gpu_sizer.measurement.queue.QueueReason` value.
    :param quota_text: the API server's words of the namespace's last quota refusal.
    :param quota_retry_seconds: ``--quota-retry-seconds``.
    :param namespace_limit: the namespace policy's ``maxConcurrentMeasurements``.
    :param cap: ``--max-concurrent-measurements``.
    :param budget: why the namespace's daily GPU-second budget holds it (None: it does not).
    """

    position: int
    over: bool = False
    reason: str = ""
    quota_text: str | None = None
    quota_retry_seconds: float = 0.0
    namespace_limit: int | None = None
    cap: int | None = None
    budget: str | None = None


@dataclass(frozen=True)
class Finished:
    """What :func:`finish` says once the Jobs are acted on.

    :param plan: the status to write (keyed, with the cluster's MIG snippets).
    :param finished: whether a measurement finished in this decision (it got its key).
    :param publish: the measurements to publish as GPUMeasurement records, in order.
    """

    plan: Plan
    finished: bool = False
    publish: tuple[MeasurementStatus, ...] = ()


def decide(snap: Snapshot) -> Decision:
    """The plan before any Job is touched (step 1 of the module docstring)."""
    wl = snap.workload()
    prev = snap.deciding
    observed: list[tuple[MeasurementStatus, Outcome]] = []

    def observe(m: MeasurementStatus) -> Outcome:
        outcome = snap.outcomes.get(m.job_name or "")
        if outcome is None:
            outcome = Outcome(OutcomeKind.Missing, "the measurement Job does not exist")
        observed.append((m, outcome))
        return outcome

    def run(w: Workload) -> Plan:
        assert snap.assessment is not None and snap.job_name is not None
        return core_decide(
            w,
            snap.assessment,
            snap.config,
            present=snap.present,
            now=snap.now,
            job_name=snap.job_name,
            memory_bytes=snap.memory_bytes,
            observe=observe,
        )

    if wl is None:
        problems = list(snap.problems)
        plan = invalid_plan(problems, generation=snap.generation, now=snap.now, previous=prev)
    else:
        plan = run(wl)
        if snap.stale is not None:
            plan = restated(plan, snap.stale, snap.previous, snap.now)
    watched, outcome = observed[-1] if observed else (None, None)
    plan, seconds = charged(plan, prev, outcome, watched, snap.at)
    wait: Wait | None = None
    reused: str | None = None
    look_up: StartJob | None = None
    if wl is not None and starts_measurement(plan, prev, wl.spec_hash) and snap.sharing:
        start = next(a for a in plan.actions if isinstance(a, StartJob))
        if not snap.looked_up:
            look_up = start
        elif isinstance(snap.shared, Wait):
            wait = snap.shared
            plan = waiting_plan(plan, wl, snap.config, wait=wait, now=snap.now)
        elif isinstance(snap.shared, Reuse):
            plan, reused = _reuse(snap, wl, plan, snap.shared, run)
    starts = wl is not None and starts_measurement(plan, prev, wl.spec_hash)
    return Decision(plan, starts, look_up, wait, reused, watched, outcome, seconds)


def _reuse(
    snap: Snapshot, wl: Workload, plan: Plan, found: Reuse, run: Callable[[Workload], Plan]
) -> tuple[Plan, str]:
    """``plan`` (which starts a measurement) replaced by the decision from a reused record:
    no Job starts, a ``MeasurementReused`` Event says so (once per record), and the
    namespace's GPU-second charges travel with the status."""
    m = reused_measurement(wl.spec, wl.spec_hash, found, snap.record_ttl_seconds)
    reusing = replace(wl, previous=reuse_previous(wl.previous, m))
    then = run(reusing)
    source = found.record.spec.result
    text = (
        f"reused GPUMeasurement {found.record.name} (measured for "
        f"{source.source_namespace}/{source.source_name} on {source.node_name or '?'} at "
        f"{source.completed_at}) instead of starting a {snap.config.runner}"
    )
    before = snap.previous.measurement if snap.previous is not None else None
    actions = tuple(a for a in then.actions if not isinstance(a, StartJob))
    if before is None or before.reused_from != found.record.name:
        actions = (*actions, Emit("Normal", "MeasurementReused", text))
    status = then.status
    if status.measurement_usage != plan.status.measurement_usage:
        status = status.model_copy(update={"measurement_usage": plan.status.measurement_usage})
    return Plan(status, actions), text


def charged(
    plan: Plan,
    prev: GPUWorkloadStatus | None,
    outcome: Outcome | None,
    watched: MeasurementStatus | None,
    at: datetime.datetime,
) -> tuple[Plan, int]:
    """``plan`` with ``status.measurementUsage`` carried over from ``prev``, and the Job that
    ``outcome`` saw end (at ``at``) charged to it (once: see :func:`gpu_time.charge`); with the
    GPU-seconds newly charged (0 when none)."""
    before = usage = prev.measurement_usage if prev is not None else None
    if outcome is not None and outcome.finished:
        est = plan.status.estimate or (prev.estimate if prev is not None else None)
        gpus = est.gpu_count if est is not None else 1
        usage = gpu_time.charge(usage, watched, gpus, at)
    seconds = 0
    if usage is not None and usage != before:
        same_day = before is not None and before.day == usage.day
        seconds = usage.gpu_seconds - (before.gpu_seconds if same_day and before else 0)
    if usage == plan.status.measurement_usage:
        return plan, seconds
    status = plan.status.model_copy(update={"measurement_usage": usage})
    return replace(plan, status=status), seconds


def queued(plan: Plan, wl: Workload, config: Config, wait: QueueWait, now: str) -> Plan:
    """``plan`` (which starts a measurement) held back in the measurement queue: its position
    and why it waits in ``Measured``'s message; a ``MeasurementBudgetExhausted`` Event when
    the namespace's daily GPU-second budget holds it and the stored status did not say so."""
    namespace = wl.namespace
    where = f"position {'over ' if wait.over else ''}{wait.position} in the measurement queue"
    if wait.reason == "Quota":
        because = (
            f"a ResourceQuota of namespace {namespace} refused a measurement Job "
            f"({wait.quota_text or 'exceeded quota'}); trying again in "
            f"{wait.quota_retry_seconds:g} s"
        )
    elif wait.reason == "NamespaceLimit":
        because = (
            f"namespace {namespace} may run {wait.namespace_limit} measurement Jobs at once "
            "(namespace policy maxConcurrentMeasurements)"
        )
    else:
        because = (
            f"at most {wait.cap} measurement Jobs run at once cluster-wide "
            "(--max-concurrent-measurements)"
        )
    budget = wait.budget if wait.reason == "Quota" else None
    if budget is not None:
        because = budget
    out = queued_plan(plan, wl, config, message=f"queued: {where}; {because}", now=now)
    if budget is not None:
        was = wl.previous.conditions if wl.previous is not None else []
        if not any(
            c.type == "Measured" and "measurementGpuSecondsPerDay" in c.message for c in was
        ):
            emit = Emit("Normal", "MeasurementBudgetExhausted", budget)
            out = replace(out, actions=(*out.actions, emit))
    return out


def finish(
    plan: Plan,
    spec: GPUWorkloadSpec | None,
    old: MeasurementStatus | None,
    *,
    config: Config,
    probe_image: str,
    node_driver: Callable[[str | None], str],
    sharing: bool,
    publish_at: datetime.datetime,
    record_ttl_seconds: float,
    now: str,
    mixed: Iterable[str] = (),
) -> Finished:
    """The plan once its Jobs are acted on (step 3 of the module docstring).

    :param spec: the workload's spec (None when invalid: nothing is keyed or published).
    :param old: the stored measurement, before this decision.
    :param probe_image: ``--probe-image`` (a spec without an image of its own runs it).
    :param node_driver: the NVIDIA driver major of a node, by name ("" when unknown).
    :param sharing: whether the namespace takes part in shared measurement records: a finished
        measurement is keyed either way, but gets a record expiry and is published only then.
    :param publish_at: when a record published now is recorded (its expiry counts from it).
    :param mixed: the MIG classes the cluster's nodes offer under the ``mixed`` strategy.
    """
    if spec is None:
        return Finished(_for_cluster(plan, config, frozenset(mixed)))
    image = spec.measurement.image or probe_image
    plan, done = _keyed(
        plan,
        spec,
        old,
        config,
        image,
        node_driver,
        publish_at if sharing else None,
        record_ttl_seconds,
    )
    publish: list[MeasurementStatus] = []
    if done and sharing and _publishable(plan.status.measurement):
        assert plan.status.measurement is not None
        publish.append(plan.status.measurement)
    oom = _oom_moved_on(plan, spec, old, config, image, node_driver, now) if sharing else None
    if oom is not None and _publishable(oom):
        publish.append(oom)
    return Finished(_for_cluster(plan, config, frozenset(mixed)), done, tuple(publish))


def _publishable(m: MeasurementStatus | None) -> bool:
    return m is not None and m.key_fields is not None and bool(m.measurement_key) and shareable(m)


def _keyed(
    plan: Plan,
    spec: GPUWorkloadSpec,
    old: MeasurementStatus | None,
    config: Config,
    image: str,
    node_driver: Callable[[str | None], str],
    publish_at: datetime.datetime | None,
    ttl_seconds: float,
) -> tuple[Plan, bool]:
    """A measurement that finished in this decision gets its key (with the driver of the
    node it ran on), and a record expiry when it is published; True when it did."""
    m = plan.status.measurement
    if (
        m is None
        or not m.completed_at
        or m.reused_from
        or m.key_fields is not None
        or m.reason in NO_RESULT_REASONS
        or (old is not None and old.completed_at)
    ):
        return plan, False
    cls = class_named(config.catalog, m.gpu_class)
    if cls is None:
        return plan, False
    driver = node_driver(m.node_name)
    fields = candidate_keys(spec, cls, probe_image=image, drivers={driver} if driver else ())[0]
    update: dict[str, Any] = {"measurement_key": fields.digest(), "key_fields": fields}
    if publish_at is not None and shareable(m):
        expires = publish_at + datetime.timedelta(seconds=ttl_seconds)
        update["record_expires_at"] = rfc3339(expires)
    keyed = m.model_copy(update=update)
    return Plan(plan.status.model_copy(update={"measurement": keyed}), plan.actions), True


def _oom_moved_on(
    plan: Plan,
    spec: GPUWorkloadSpec,
    old: MeasurementStatus | None,
    config: Config,
    image: str,
    node_driver: Callable[[str | None], str],
    now: str,
) -> MeasurementStatus | None:
    """The CUDA out-of-memory on ``old``'s class, when this decision moved the measurement
    on to a larger class: keyed (the driver of the node it ran on), to publish as a record
    of its own, so that a workload of the same key walks on instead of running out too."""
    m = plan.status.measurement
    if m is None or old is None or not old.gpu_class or old.completed_at:
        return None
    oom = m.out_of_memory_classes or []
    if old.gpu_class not in oom or old.gpu_class == m.gpu_class:
        return None
    if len(old.out_of_memory_classes or []) >= len(oom):
        return None
    cls = class_named(config.catalog, old.gpu_class)
    if cls is None:
        return None
    driver = node_driver(old.node_name)
    fields = candidate_keys(spec, cls, probe_image=image, drivers={driver} if driver else ())[0]
    measured = next((c for c in plan.status.conditions if c.type == "Measured"), None)
    return old.model_copy(
        update={
            "device": "cuda",
            "out_of_memory": True,
            "reason": "OutOfMemory",
            "message": measured.message if measured else "CUDA out of memory",
            "completed_at": now,
            "out_of_memory_classes": oom,
            "measurement_key": fields.digest(),
            "key_fields": fields,
        }
    )


def _for_cluster(plan: Plan, config: Config, mixed: frozenset[str]) -> Plan:
    """The plan with its recommendation's snippets for the MIG strategy of the class's
    nodes (the pure core writes the ``single`` ones)."""
    rec = plan.status.recommendation
    if rec is None or rec.gpu_class not in mixed:
        return plan
    local = for_strategy(rec, "mixed", config.catalog)
    status = plan.status.model_copy(update={"recommendation": local})
    return dataclasses.replace(plan, status=status)


def next_decision(
    plan: Plan,
    outcome: Outcome | None,
    *,
    unschedulable_timeout_seconds: float,
    wait_ends: datetime.datetime | None,
    revalidate_after_seconds: float | None,
    now: datetime.datetime,
) -> float | None:
    """Seconds from ``now`` until the workload's decision can change by time alone, or None
    when only an event can change it: an unschedulable measurement pod reaching its timeout,
    a Job that ended with its pod's result on its way, the end of a wait for another
    workload's measurement (``wait_ends``: then it measures itself), a finished measurement
    due for re-validation (``--measurement-revalidate-after``)."""
    deadline = _deadline(plan, outcome, unschedulable_timeout_seconds)
    if wait_ends is not None:
        ends = max(0.5, (wait_ends - now).total_seconds() + 0.5)
        deadline = ends if deadline is None else min(deadline, ends)
    due = revalidation_due(plan.status.measurement, now, revalidate_after_seconds)
    if due is not None and plan.status.phase is not Phase.Measuring:
        deadline = due + 0.5 if deadline is None else min(deadline, due + 0.5)
    return deadline


def _deadline(plan: Plan, outcome: Outcome | None, unschedulable_timeout: float) -> float | None:
    """Seconds until the observation can change by time alone: an unschedulable measurement
    pod reaching its timeout, a Job that ended with its pod's result still on its way; None
    when only an event can change it (nothing pending)."""
    if outcome is None or plan.status.phase is not Phase.Measuring:
        return None
    if outcome.wait_seconds is not None:
        return max(0.5, outcome.wait_seconds)
    if outcome.kind is not OutcomeKind.Unschedulable:
        return None
    left = unschedulable_timeout - outcome.seconds_unschedulable
    return max(0.5, left + 0.5)


def job_namespace(
    namespace: str,
    spec: GPUWorkloadSpec,
    *,
    operator_namespace: str | None,
    runner: str,
    sharing: bool,
    kueue_queue: str | None,
    probe_image: str,
) -> str:
    """Where a new measurement Job of a workload of ``namespace`` runs: the operator's own
    namespace when its result may be shared with other namespaces (sharing on, a trusted
    run by :func:`~gpu_sizer.records.sharing.trusted_run`, no Kueue LocalQueue, which is a
    namespace's own), else the workload's namespace."""
    if (
        operator_namespace
        and runner == "Job"
        and sharing
        and kueue_queue is None
        and trusted_run(
            spec,
            effective_image=spec.measurement.image or probe_image,
            probe_image=probe_image,
            job_namespace=operator_namespace,
            operator_namespace=operator_namespace,
            local=False,
        )
    ):
        return operator_namespace
    return namespace


def record_scope(
    spec: GPUWorkloadSpec,
    *,
    found: bool,
    job_image: str | None,
    job_namespace: str | None,
    operator_namespace: str | None,
    runner: str,
    probe_image: str,
) -> RecordScope:
    """The scope of the record of a finished measurement: Cluster only when the Job that ran
    it (``found`` again by name, with its namespace and image as the API has them) was a
    trusted run (:func:`~gpu_sizer.records.sharing.trusted_run`); a Job not found is no evidence."""
    local = runner != "Job"
    if not found and not local:
        return RecordScope.Namespace
    trusted = trusted_run(
        spec,
        effective_image=job_image or spec.measurement.image or probe_image,
        probe_image=probe_image,
        job_namespace=job_namespace,
        operator_namespace=operator_namespace,
        local=local,
    )
    return RecordScope.Cluster if trusted else RecordScope.Namespace


def class_named(catalog: Iterable[GPUClass], name: str | None) -> GPUClass | None:
    """The catalog class called ``name``, or None."""
    return next((c for c in catalog if c.name == name), None)
