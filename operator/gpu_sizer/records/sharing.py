"""Shared measurement records in a decision, and re-measuring when the world changes. Pure: the
controller passes what it knows of the cluster as plain values and functions, and acts on the
answer.

Reuse. A workload about to start a *new* measurement first looks for a fresh
``GPUMeasurement`` of its measurement key (:mod:`gpu_sizer.api.record`), walking the classes in
the order its own measurement would: the class it would measure on first; after a record saying
CUDA out-of-memory there, the next larger allowed class, as the probe would after a real OOM
(:func:`gpu_sizer.lifecycle.gpu_class._measure_class`). The first record of a success is
reused, with the classes found too small on the way listed in ``outOfMemoryClasses``; a walk that
runs out of larger classes reuses the last OOM record (the workload is rejected as its own run
would be).
A key with no record but a measurement Job in flight (any namespace, found by the Job's key
label, so a restarted operator sees it) is waited for instead of measured twice. Otherwise the
workload measures itself.

What is shared, and why: a GPU success, and a CUDA out-of-memory on a class (a fact about the
key: the same spec, image and driver on that class runs out again). Crashes, timeouts, image
pulls, evictions and CPU smoke runs are not (:func:`gpu_sizer.api.record.shareable`).

With whom (:mod:`gpu_sizer.api.record`, scopes): a result no tenant could have written
(:func:`trusted_run`: Synthetic mode, the operator's probe image, run in the operator's own
namespace or as its local process) is a record of scope Cluster, reused by every namespace that
shares; any other result of a sharing namespace is its own (scope Namespace). A workload looks
for the cluster's record, then its namespace's, and each is checked against its own estimate
before it is reused (:mod:`gpu_sizer.records.checks`). Likewise a workload waits only for a
measurement whose record it could reuse: a trusted one, or one of its own namespace.

A wait has a live owner and a deadline (:func:`wait_until`): the Job waited for must belong to a
workload that exists and still names that Job as its unfinished measurement, and the wait ends
when the Job could no longer produce a result (its ``activeDeadlineSeconds`` from its start,
plus the time its pod's result takes to arrive, plus :data:`WAIT_MARGIN_SECONDS`). After that the
waiter measures itself: a Job left behind by a failed deletion, or a producer that died, never
holds anyone back for longer.

Re-measure. A finished measurement of the current spec is measured again when one of the key's
fields it was taken under no longer holds: the probe image (``ProbeImageChanged``), the engine
version (``EngineVersionChanged``), the NVIDIA driver major of the class's nodes
(``DriverChanged``, GFD labels), the catalog entry of its class (``CatalogChanged``); when the
``GPUMeasurement`` it produced or reused was deleted before it expired (``RecordDeleted``); and,
opt-in, when it is older than the re-validation interval (``Revalidation``). Measurements taken
before keys existed (no ``keyFields``) are left alone.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Collection
from dataclasses import dataclass

from gpu_sizer.api import (
    Condition,
    ConditionStatus,
    ConditionType,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    MeasurementMode,
    MeasurementStatus,
    Phase,
)
from gpu_sizer.api.record import (
    GPUMeasurement,
    catalog_digest,
    effective_expiry,
    measurement_key,
)
from gpu_sizer.api.status import MeasurementKey
from gpu_sizer.api.times import parse_time, rfc3339
from gpu_sizer.catalog import GPUClass
from gpu_sizer.lifecycle import (
    Action,
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
)
from gpu_sizer.lifecycle.conditions import _Conds
from gpu_sizer.lifecycle.gpu_class import _by_name, _measure_class
from gpu_sizer.lifecycle.plan import _settled

#: ``Measured`` reason of a workload waiting for another namespace's measurement of its key.
WAITING: str = "WaitingForSharedMeasurement"
#: Seconds past a Job's own deadline (and its pod's result grace) that a waiter still waits.
WAIT_MARGIN_SECONDS: float = 60.0
#: Seconds a Job may exist before its workload's status names it (the status write follows the
#: Job's creation in the same decision; a kill between them is resumed within this).
UNNAMED_JOB_GRACE_SECONDS: float = 120.0

__all__ = [
    "Reuse",
    "Stale",
    "Wait",
    "candidate_keys",
    "class_digest",
    "find_shared",
    "remeasure_previous",
    "restated",
    "reuse_previous",
    "reused_measurement",
    "stale",
    "trusted_run",
    "wait_until",
    "waiting_plan",
]


@dataclass(frozen=True)
class Reuse:
    """Reuse ``record``; ``out_of_memory_classes``: classes whose records said CUDA OOM."""

    record: GPUMeasurement
    out_of_memory_classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Wait:
    """A measurement of ``key`` runs already (``job``: ``namespace/name``): wait for it, at most
    until ``until`` (then measure)."""

    key: str
    job: str
    gpu_class: str
    until: datetime.datetime | None = None


def trusted_run(
    spec: GPUWorkloadSpec,
    *,
    effective_image: str,
    probe_image: str,
    job_namespace: str | None,
    operator_namespace: str | None,
    local: bool,
) -> bool:
    """Whether no tenant could have written the result of this measurement: Synthetic mode
    (a Command-mode command prints what it likes), the operator's own probe image (a spec's
    image likewise), and run where no tenant may create pods or exec into them: the
    operator's namespace, or the operator's own local process."""
    if spec.measurement.mode is not MeasurementMode.Synthetic or effective_image != probe_image:
        return False
    if local:
        return True
    return bool(operator_namespace) and job_namespace == operator_namespace


def wait_until(
    started: str | None, deadline_seconds: int | None, grace_seconds: float
) -> datetime.datetime | None:
    """When a wait on a Job started at ``started`` (RFC 3339) with ``activeDeadlineSeconds``
    ``deadline_seconds`` ends: the Job's deadline, plus ``grace_seconds`` for its pod's result
    to arrive, plus :data:`WAIT_MARGIN_SECONDS`. None when the Job says neither (never waited
    for)."""
    start = parse_time(started)
    if start is None or deadline_seconds is None:
        return None
    return start + datetime.timedelta(
        seconds=deadline_seconds + grace_seconds + WAIT_MARGIN_SECONDS
    )


@dataclass(frozen=True)
class Stale:
    """Why a finished measurement is measured again (a condition reason and its message)."""

    reason: str
    message: str


def class_digest(cls: GPUClass) -> str:
    """The catalog digest of one class's entry (:func:`gpu_sizer.api.record.catalog_digest`)."""
    return catalog_digest(dataclasses.asdict(cls))


def candidate_keys(
    spec: GPUWorkloadSpec, cls: GPUClass, *, probe_image: str, drivers: Collection[str]
) -> list[MeasurementKey]:
    """The keys measuring ``spec`` on ``cls`` may have: one per driver major among the class's
    nodes (``drivers``), or one with an unknown driver when no node says."""
    return [
        measurement_key(
            spec,
            gpu_class=cls.name,
            probe_image=probe_image,
            driver_major=driver or None,
            catalog_digest=class_digest(cls),
        )
        for driver in (sorted(drivers) or [""])
    ]


def find_shared(
    spec: GPUWorkloadSpec,
    first: GPUClass,
    config: Config,
    present: frozenset[str] | None,
    *,
    probe_image: str,
    drivers: Callable[[str], frozenset[str]],
    record: Callable[[str], GPUMeasurement | None],
    in_flight: Callable[[str], tuple[str, datetime.datetime | None] | None],
) -> Reuse | Wait | None:
    """What the shared records offer a workload whose measurement would start on ``first``.

    ``drivers(class)``: driver majors of the class's nodes; ``record(key)``: a *fresh*, plausible
    record of that key this workload may reuse, or None; ``in_flight(key)``: ``namespace/name``
    of a live measurement Job of that key whose record this workload could reuse (or one being
    started) and until when it is waited for, or None. See the module docstring for the walk.
    """
    oom: list[str] = []
    last_oom: GPUMeasurement | None = None
    cls: GPUClass | None = first
    while cls is not None:
        keys = [
            k.digest()
            for k in candidate_keys(spec, cls, probe_image=probe_image, drivers=drivers(cls.name))
        ]
        found = [r for r in (record(k) for k in keys) if r is not None]
        success = next((r for r in found if not r.spec.result.out_of_memory), None)
        if success is not None:
            return Reuse(success, tuple(oom))
        for key in keys:
            running = in_flight(key)
            if running is not None:
                return Wait(key, running[0], cls.name, running[1])
        if not found:
            return None
        oom.append(cls.name)
        last_oom = found[0]
        cls = _measure_class(spec, config, present, None, above=cls)
    assert last_oom is not None
    return Reuse(last_oom, tuple(oom[:-1]))


def reused_measurement(
    spec: GPUWorkloadSpec, spec_hash: str, reuse: Reuse, ttl_seconds: float | None = None
) -> MeasurementStatus:
    """``status.measurement`` of a workload that reuses ``reuse.record``: the record's result
    under this workload's spec hash, ``reusedFrom`` naming the record, its expiry capped by the
    TTL (:func:`gpu_sizer.api.record.effective_expiry`). The Job that ran it belongs to another
    workload, so no ``jobName``."""
    rec = reuse.record
    result = rec.spec.result
    oom = [*reuse.out_of_memory_classes, *(result.out_of_memory_classes or [])]
    data = result.model_dump(
        exclude={
            "source_namespace",
            "source_name",
            "job_name",
            "retry",
            "retried",
            "recreated",
            "memory_request_bytes",
            "reused_from",
        }
    )
    data.update(
        spec_hash=spec_hash,
        reused_from=rec.name,
        measurement_key=rec.spec.key,
        key_fields=rec.spec.key_fields,
        record_expires_at=_expiry_text(rec, ttl_seconds),
        model_revision=spec.model.revision,
        out_of_memory_classes=list(dict.fromkeys(oom)) or None,
    )
    return MeasurementStatus.model_validate(data)


def _expiry_text(rec: GPUMeasurement, ttl_seconds: float | None) -> str:
    if ttl_seconds is None:
        return rec.spec.expires_at
    capped = effective_expiry(rec, ttl_seconds)
    return rfc3339(capped) if capped is not None else rec.spec.expires_at


def reuse_previous(
    previous: GPUWorkloadStatus | None, measurement: MeasurementStatus
) -> GPUWorkloadStatus:
    """A stored status as if ``measurement`` had finished for the current spec: deciding from
    it re-derives the status from that measurement (and starts no Job)."""
    base = previous if previous is not None else GPUWorkloadStatus()
    return base.model_copy(
        update={
            "phase": Phase.Ready,
            "spec_hash": measurement.spec_hash,
            "measurement": measurement,
        }
    )


def remeasure_previous(previous: GPUWorkloadStatus) -> GPUWorkloadStatus:
    """A stored status whose finished measurement must be taken again: the measurement becomes
    an unfinished placeholder of the same spec hash, so the decision starts a new Job (its
    retry number one above the old one's, so a new Job name, never the old Job adopted)."""
    m = previous.measurement
    assert m is not None
    placeholder = MeasurementStatus(
        spec_hash=m.spec_hash,
        gpu_class=m.gpu_class,
        model_revision=m.model_revision,
        retry=m.retry or 0,
    )
    return previous.model_copy(update={"phase": Phase.Estimated, "measurement": placeholder})


def stale(
    m: MeasurementStatus,
    spec: GPUWorkloadSpec,
    config: Config,
    *,
    probe_image: str,
    drivers: Callable[[str], frozenset[str]],
    record_gone: bool,
    now: datetime.datetime,
    revalidate_after_seconds: float | None,
) -> Stale | None:
    """Why the finished measurement ``m`` of the current spec must be taken again, or None.

    ``record_gone``: the ``GPUMeasurement`` it produced or reused should exist (sharing on,
    not expired) and does not. ``drivers(class)``: the driver majors of the class's nodes now
    (empty: unknown, never a change).
    """
    old = m.key_fields
    if not m.completed_at or old is None:
        return None
    cls = _by_name(config, old.gpu_class)
    if cls is None:
        return Stale(
            "CatalogChanged",
            f"class {old.gpu_class} it was measured on is no longer in the catalog; "
            "measuring again",
        )
    current = candidate_keys(spec, cls, probe_image=probe_image, drivers=())[0]
    if current.probe_image != old.probe_image:
        return Stale(
            "ProbeImageChanged",
            f"the probe image changed ({old.probe_image} -> {current.probe_image}); "
            "measuring again",
        )
    if current.engine_version != old.engine_version or current.engine != old.engine:
        return Stale(
            "EngineVersionChanged",
            f"the engine changed ({old.engine} {old.engine_version or '(image default)'} -> "
            f"{current.engine} {current.engine_version or '(image default)'}); measuring again",
        )
    if current.catalog_digest != old.catalog_digest:
        return Stale(
            "CatalogChanged",
            f"the catalog entry of class {cls.name} changed (digest {old.catalog_digest} -> "
            f"{current.catalog_digest}); measuring again",
        )
    now_drivers = drivers(cls.name)
    if old.driver_major and now_drivers and old.driver_major not in now_drivers:
        return Stale(
            "DriverChanged",
            f"nodes of class {cls.name} now run NVIDIA driver "
            f"{', '.join(sorted(now_drivers))} (GFD nvidia.com/cuda.driver-version.major), "
            f"it was measured under {old.driver_major}; measuring again",
        )
    if record_gone:
        name = m.reused_from or "of this measurement"
        return Stale(
            "RecordDeleted",
            f"GPUMeasurement {name} was deleted before it expired; measuring again",
        )
    completed = parse_time(m.completed_at)
    if revalidate_after_seconds and completed is not None:
        age = (now - completed).total_seconds()
        if age >= revalidate_after_seconds:
            return Stale(
                "Revalidation",
                f"measured {age / 86400:.1f} days ago ({m.completed_at}), beyond the "
                f"re-validation interval of {revalidate_after_seconds / 86400:g} days "
                "(--measurement-revalidate-after); measuring again",
            )
    return None


def revalidation_due(
    m: MeasurementStatus | None, now: datetime.datetime, revalidate_after_seconds: float | None
) -> float | None:
    """Seconds until ``m`` is due for re-validation (None: never, or not applicable)."""
    if not revalidate_after_seconds or m is None or m.key_fields is None:
        return None
    completed = parse_time(m.completed_at)
    if completed is None:
        return None
    return max(0.0, revalidate_after_seconds - (now - completed).total_seconds())


def waiting_plan(plan: Plan, wl: Workload, config: Config, *, wait: Wait, now: str) -> Plan:
    """``plan`` (which starts a new measurement) held back because a measurement of the same
    key runs already (``wait``): the status stays on the estimate, ``Measured=False`` reason
    ``WaitingForSharedMeasurement``; no Job is started (Jobs the plan deletes still are). When
    that Job ends, its record is reused, or (no shareable result) this workload measures."""
    prev = wl.previous
    kept = prev.measurement if prev is not None else None
    if kept is not None and kept.spec_hash != wl.spec_hash:
        kept = None
    until = (
        f" (until {rfc3339(wait.until)} at most, then measuring itself)"
        if wait.until is not None
        else ""
    )
    message = (
        f"waiting for {config.runner} {wait.job} measuring the same measurement key on class "
        f"{wait.gpu_class}{until}; its GPUMeasurement will be reused instead of measuring twice"
    )
    conds = _Conds(plan.status, wl.generation, now)
    conds.put(ConditionType.Measured, ConditionStatus.false, WAITING, message)
    conds.kstatus((False, WAITING, message), True, False)
    status = plan.status.model_copy(
        update={"phase": Phase.Estimated, "measurement": kept, "conditions": conds.items}
    )
    was = next((c for c in prev.conditions if c.type == "Measured"), None) if prev else None
    actions: list[Action] = [a for a in plan.actions if isinstance(a, DeleteJob)]
    if was is None or was.reason != WAITING:
        actions.append(Emit("Normal", WAITING, message))
    return _settled(Plan(status, tuple(actions)), prev, now)


def restated(plan: Plan, why: Stale, previous: GPUWorkloadStatus | None, now: str) -> Plan:
    """A plan that measures again because of ``why``: its ``Measured`` condition says so (reason
    and message), and an Event does too."""
    if not any(isinstance(a, StartJob) for a in plan.actions):
        return plan
    conds: list[Condition] = []
    for cond in plan.status.conditions:
        if cond.type == ConditionType.Measured:
            start = next(a for a in plan.actions if isinstance(a, StartJob))
            cond = cond.model_copy(
                update={"reason": why.reason, "message": f"{why.message} with Job {start.name}"}
            )
        conds.append(cond)
    status = plan.status.model_copy(update={"conditions": conds})
    return _settled(
        Plan(status, (*plan.actions, Emit("Normal", why.reason, why.message))), previous, now
    )
