"""A wait on another workload's measurement has a live owner and a deadline, and a Job whose
result a waiter could not reuse is never waited for (the attack run: one failed deletion of an
unschedulable Job left every workload of its key, in any namespace, waiting for ever)."""

from __future__ import annotations

import datetime
from typing import Any

from gpu_sizer.api import parse_spec, spec_hash
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.reconciler import Reconciler
from gpu_sizer.lifecycle import DeleteJob, Workload, decide
from gpu_sizer.measurement.backends import KubernetesJobBackend, slim
from gpu_sizer.measurement.job import GIB, JobRequest, job_manifest
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind
from gpu_sizer.sizing.verdict import assess
from tests.controller.test_reconcile import CONFIG, PRESENT, namer, observe, raw, start

SPEC = parse_spec(raw())
KEY = "ab" * 32
OPERATOR_NS = "gpu-sizer"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _job(namespace: str, *, started: datetime.datetime, owner_ns: str = "team-a") -> Any:
    """A measurement Job of workload ``owner_ns/producer`` with the measurement key's label,
    in ``namespace`` (the operator's own: named in annotations; the owner's: owned by it)."""
    req = JobRequest(
        namespace,
        "producer",
        "producer-uid",
        spec_hash(SPEC),
        DEFAULT_CATALOG[0],
        1,
        4 * GIB,
        "probe:1",
        "gpusizer-producer-1",
        measurement_key=KEY,
        workload_namespace=owner_ns,
    )
    body = job_manifest(SPEC, req)
    body["metadata"]["uid"] = "job-uid-1"
    body["metadata"]["creationTimestamp"] = _stamp(started)
    body["status"] = {"startTime": _stamp(started)}
    return body


def _producer(measurement: dict[str, Any] | None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": "producer", "uid": "producer-uid", **meta},
        "spec": raw(),
        "status": {"measurement": measurement} if measurement is not None else {},
    }


def _reconciler(job: Any, producer: dict[str, Any] | None) -> Reconciler:
    backend = KubernetesJobBackend(trusted_namespace=OPERATOR_NS)
    backend.attach(None, {("team-a", "producer"): [slim(job)]}, {})  # type: ignore[arg-type]
    reconciler = Reconciler(Options(operator_namespace=OPERATOR_NS), backend)
    reconciler._workloads = {("team-a", "producer"): [producer]} if producer else {}
    return reconciler


RUNNING = {"jobName": "gpusizer-producer-1", "specHash": "h"}
ME = ("team-b", "waiter")


def test_a_trusted_job_with_a_live_owner_is_waited_for_until_its_deadline() -> None:
    started = _now() - datetime.timedelta(minutes=1)
    job = _job(OPERATOR_NS, started=started)
    found = _reconciler(job, _producer(RUNNING))._in_flight(KEY, ME)
    assert found is not None
    where, until = found
    assert where == f"{OPERATOR_NS}/gpusizer-producer-1"
    deadline = job["spec"]["activeDeadlineSeconds"]
    assert until is not None and until > started + datetime.timedelta(seconds=deadline)


def test_a_job_past_its_deadline_is_not_waited_for() -> None:
    job = _job(OPERATOR_NS, started=_now() - datetime.timedelta(days=1))
    assert _reconciler(job, _producer(RUNNING))._in_flight(KEY, ME) is None


def test_a_job_whose_owner_is_gone_or_moved_on_is_not_waited_for() -> None:
    job = _job(OPERATOR_NS, started=_now() - datetime.timedelta(minutes=1))
    assert _reconciler(job, None)._in_flight(KEY, ME) is None  # the workload is deleted
    deleting = _producer(RUNNING, deletionTimestamp=_stamp(_now()))
    assert _reconciler(job, deleting)._in_flight(KEY, ME) is None
    recreated = _producer(RUNNING, uid="another-incarnation")
    assert _reconciler(job, recreated)._in_flight(KEY, ME) is None
    done = {**RUNNING, "completedAt": _stamp(_now())}  # its result is in: the record follows
    assert _reconciler(job, _producer(done))._in_flight(KEY, ME) is None
    elsewhere = {"jobName": "gpusizer-producer-2", "completedAt": _stamp(_now())}
    assert _reconciler(job, _producer(elsewhere))._in_flight(KEY, ME) is None


def test_a_job_its_owner_has_not_named_yet_is_waited_for_only_briefly() -> None:
    young = _job(OPERATOR_NS, started=_now() - datetime.timedelta(seconds=5))
    assert _reconciler(young, _producer(None))._in_flight(KEY, ME) is not None
    old = _job(OPERATOR_NS, started=_now() - datetime.timedelta(minutes=10))
    assert _reconciler(old, _producer(None))._in_flight(KEY, ME) is None


def test_a_job_in_a_tenants_namespace_makes_no_other_namespace_wait() -> None:
    """Its result stays private to its namespace (a tenant may create pods there), so a
    workload of another namespace has nothing to wait for; one of its own namespace waits."""
    job = _job("team-a", started=_now() - datetime.timedelta(minutes=1))
    reconciler = _reconciler(job, _producer(RUNNING))
    assert reconciler._in_flight(KEY, ME) is None
    assert reconciler._in_flight(KEY, ("team-a", "sibling")) is not None


def test_an_ended_unschedulable_jobs_deletion_is_tried_again_on_every_decision() -> None:
    """A 500 or 429 on the deletion leaves the Job; the settled status still says to delete it
    (a no-op once it is gone), so it never outlives its workload's next decision."""
    measuring = start(raw()).status
    ended = observe(
        raw(), measuring, Outcome(OutcomeKind.Unschedulable, "0/3", seconds_unschedulable=601)
    )
    job = measuring.measurement.job_name if measuring.measurement else None
    assert job and DeleteJob(job) in ended.actions
    wl = Workload("w", "ns", 1, SPEC, spec_hash(SPEC), ended.status)
    again = decide(
        wl,
        assess(SPEC, DEFAULT_CATALOG, present=PRESENT),
        CONFIG,
        present=PRESENT,
        now="T3",
        job_name=namer,
        memory_bytes=4 * GIB,
        observe=lambda m: Outcome(OutcomeKind.Pending, "gone"),
    )
    assert DeleteJob(job) in again.actions and again.status == ended.status
