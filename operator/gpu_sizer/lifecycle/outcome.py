"""Decisions on what the measurement Job says (its outcome, as classified by
:mod:`gpu_sizer.measurement.outcome`).

Pending and running are waiting. Unschedulable past the timeout ends the measurement and the
estimate stands (measured again when a node of the class joins, if the cluster had none). A
deleted Job is recreated once; a host OOM kill or an eviction is retried once (a host OOM kill
with twice the memory request, at most 512 GiB); a CUDA out-of-memory moves the measurement to the
next larger allowed class; the probe's result gives the measured status.
"""

from __future__ import annotations

from collections.abc import Callable

from gpu_sizer.api import ConditionStatus, ConditionType, MeasurementStatus
from gpu_sizer.lifecycle.conditions import F, _Conds
from gpu_sizer.lifecycle.gpu_class import _by_name, _measure_class, _where
from gpu_sizer.lifecycle.measured import _from_measurement
from gpu_sizer.lifecycle.plan import (
    GIB,
    Action,
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
    _fmt,
    _settled,
)
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind


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
