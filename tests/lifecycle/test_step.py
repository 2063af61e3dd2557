"""The controller's pure decide step (gpu_sizer.lifecycle.step): snapshots in, decisions out.

No API server, no process, no clock: every input is in the snapshot, and each test asserts on
the returned decision objects (the status to write, the Jobs to start or delete, the Events,
the records to publish).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest

from gpu_sizer.api import MeasurementStatus, Phase, parse_spec, spec_hash
from gpu_sizer.api.record import RecordScope
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.lifecycle import DeleteJob, Emit, Plan, StartJob
from gpu_sizer.lifecycle.step import (
    Decision,
    QueueWait,
    Snapshot,
    decide,
    finish,
    job_namespace,
    next_decision,
    queued,
    record_scope,
)
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind
from gpu_sizer.measurement.result import ProbeResult
from gpu_sizer.records.sharing import WAITING, Reuse, Stale, Wait
from gpu_sizer.sizing.verdict import assess
from tests.controller.test_reconcile import CONFIG, GIB, PRESENT, cond, gpu_result, namer, raw
from tests.fleet.test_record_sharing import IMAGE, _record

T0 = datetime.datetime(2026, 12, 1, 2, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=10)
OPERATOR_NS = "gpu-sizer-system"
TTL = 86400.0


def _stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _snap(
    doc: dict[str, Any], prev: Any = None, *, at: datetime.datetime = T0, **kw: Any
) -> Snapshot:
    spec = parse_spec(doc)
    hash_ = spec_hash(spec)

    def job_name(cls: str, mem: int, retry: int) -> str:
        # As measurement.job.job_name, a Job's name carries the spec hash.
        return f"{namer(cls, mem, retry)}-{hash_[:8]}"

    return Snapshot(
        "w",
        "ns",
        kw.pop("generation", 1),
        spec,
        hash_,
        prev,
        CONFIG,
        _stamp(at),
        at,
        assessment=assess(spec, DEFAULT_CATALOG, present=PRESENT),
        present=PRESENT,
        memory_bytes=4 * GIB,
        job_name=job_name,
        record_ttl_seconds=TTL,
        **kw,
    )


def _starts(plan: Plan) -> list[StartJob]:
    return [a for a in plan.actions if isinstance(a, StartJob)]


def _events(plan: Plan) -> list[str]:
    return [a.reason for a in plan.actions if isinstance(a, Emit)]


def _finish(plan: Plan, doc: dict[str, Any], old: MeasurementStatus | None, **kw: Any) -> Any:
    defaults: dict[str, Any] = {
        "config": CONFIG,
        "probe_image": IMAGE,
        "node_driver": lambda node: "550" if node == "n1" else "",
        "sharing": True,
        "publish_at": T1,
        "record_ttl_seconds": TTL,
        "now": _stamp(T1),
    }
    defaults.update(kw)
    return finish(plan, parse_spec(doc), old, **defaults)


def _measuring(doc: dict[str, Any]) -> Decision:
    decision = decide(_snap(doc))
    assert decision.plan.status.phase is Phase.Measuring
    return decision


def test_the_snapshot_and_the_decision_are_immutable() -> None:
    snap = _snap(raw())
    decision = decide(snap)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.sharing = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.starts = False  # type: ignore[misc]
    assert decide(snap) == decision  # the same snapshot, the same decision


def test_a_new_workload_starts_one_job_and_asks_for_shared_records_only_when_sharing() -> None:
    alone = decide(_snap(raw()))
    (job,) = _starts(alone.plan)
    assert job.gpu_class.name == "nvidia-l4"
    assert alone.starts and alone.look_up is None and alone.wait is None
    shared = decide(_snap(raw(), sharing=True))
    assert shared.look_up == job  # the class the shared records are looked up for
    assert shared.plan == alone.plan  # nothing rewritten before the look-up
    nothing = decide(_snap(raw(), sharing=True, looked_up=True, shared=None))
    assert nothing.look_up is None and nothing.starts
    assert _starts(nothing.plan) == [job]


def test_a_measurement_of_the_same_key_in_flight_holds_the_start_back() -> None:
    wait = Wait("k" * 64, "gpu-sizer-system/gpusizer-other-1", "nvidia-l4", T1)
    decision = decide(_snap(raw(), sharing=True, looked_up=True, shared=wait))
    assert decision.wait == wait
    assert not _starts(decision.plan) and not decision.starts
    measured = cond(decision.plan.status, "Measured")
    assert (measured.status, measured.reason) == ("False", WAITING)
    assert "gpusizer-other-1" in measured.message
    assert _events(decision.plan) == [WAITING]
    assert decision.plan.status.phase is Phase.Estimated


def test_a_reusable_record_replaces_the_job() -> None:
    rec = _record("nvidia-l4")
    decision = decide(_snap(raw(), sharing=True, looked_up=True, shared=Reuse(rec)))
    assert not _starts(decision.plan) and not decision.starts
    m = decision.plan.status.measurement
    assert m is not None and m.reused_from == rec.name
    assert decision.plan.status.phase is Phase.Ready
    assert "MeasurementReused" in _events(decision.plan)
    assert decision.reused is not None and rec.name in decision.reused
    assert "team-a/src" in decision.reused
    # Decided again from the status it wrote: the same record is not announced twice.
    again = decide(
        _snap(raw(), decision.plan.status, sharing=True, looked_up=True, shared=Reuse(rec))
    )
    assert "MeasurementReused" not in _events(again.plan)


def test_without_sharing_the_shared_records_are_not_consulted() -> None:
    rec = _record("nvidia-l4")
    decision = decide(_snap(raw(), sharing=False, looked_up=True, shared=Reuse(rec)))
    assert len(_starts(decision.plan)) == 1 and decision.reused is None


def test_a_finished_measurement_is_charged_keyed_and_published_only_when_sharing() -> None:
    measuring = _measuring(raw()).plan.status
    assert measuring.measurement is not None
    job = measuring.measurement.job_name
    assert job is not None
    done = decide(_snap(raw(), measuring, at=T1, outcomes={job: gpu_result(9 * GIB)}))
    assert done.observed is not None and done.observed.job_name == job
    assert done.outcome is not None and done.outcome.finished
    assert done.charged_seconds == 600  # one GPU for the ten minutes from T0 to T1
    usage = done.plan.status.measurement_usage
    assert usage is not None and usage.gpu_seconds == 600 and usage.last_job_name == job
    shared = _finish(done.plan, raw(), measuring.measurement)
    m = shared.plan.status.measurement
    assert shared.finished and m is not None and m.completed_at
    assert m.measurement_key and m.key_fields is not None
    assert m.key_fields.driver_major == "550"  # the driver of the node it ran on
    assert m.record_expires_at == _stamp(T1 + datetime.timedelta(seconds=TTL))
    assert shared.publish == (m,)
    private = _finish(done.plan, raw(), measuring.measurement, sharing=False)
    pm = private.plan.status.measurement
    assert private.finished and pm is not None and pm.measurement_key == m.measurement_key
    assert pm.record_expires_at is None and private.publish == ()
    # Decided again over the finished status: nothing is keyed or published a second time.
    settled = _finish(shared.plan, raw(), m)
    assert not settled.finished and settled.publish == ()


def test_a_measurement_that_is_no_result_is_neither_keyed_nor_published() -> None:
    measuring = _measuring(raw()).plan.status
    assert measuring.measurement is not None
    gone = MeasurementStatus(
        **{
            **measuring.measurement.model_dump(),
            "completed_at": _stamp(T1),
            "reason": "JobDeleted",
        }
    )
    plan = Plan(measuring.model_copy(update={"measurement": gone}))
    out = _finish(plan, raw(), measuring.measurement)
    assert not out.finished and out.publish == ()
    assert out.plan.status.measurement is not None
    assert out.plan.status.measurement.measurement_key is None
    crashed = gone.model_copy(update={"reason": None, "device": "cpu"})
    plan = Plan(measuring.model_copy(update={"measurement": crashed}))
    out = _finish(plan, raw(), measuring.measurement)
    assert out.finished and out.publish == ()  # keyed for its status, not shareable


def test_an_oom_that_moved_to_a_larger_class_publishes_the_oom_record() -> None:
    doc = raw(placement={"gpuClasses": ["nvidia-l4", "nvidia-a100-80gb"]})
    measuring = _measuring(doc).plan.status
    assert measuring.measurement is not None and measuring.measurement.job_name
    oom = Outcome(
        OutcomeKind.Succeeded,
        result=ProbeResult(
            status="OutOfMemory", mode="Synthetic", device="cuda", out_of_memory=True
        ),
    )
    moved = decide(_snap(doc, measuring, at=T1, outcomes={measuring.measurement.job_name: oom}))
    (job,) = _starts(moved.plan)
    assert job.gpu_class.name == "nvidia-a100-80gb"
    out = _finish(moved.plan, doc, measuring.measurement)
    assert not out.finished  # the new measurement has not finished
    (record,) = out.publish
    assert record.gpu_class == "nvidia-l4" and record.out_of_memory
    assert record.reason == "OutOfMemory" and record.completed_at == _stamp(T1)
    assert record.measurement_key and record.key_fields is not None
    assert record.out_of_memory_classes == ["nvidia-l4"]
    assert _finish(moved.plan, doc, measuring.measurement, sharing=False).publish == ()


def test_a_spec_change_deletes_the_old_job_and_starts_a_new_one() -> None:
    measuring = _measuring(raw()).plan.status
    assert measuring.measurement is not None
    changed = raw(inference={"engine": "vllm", "maxModelLen": 4096, "maxNumSeqs": 8})
    decision = decide(_snap(changed, measuring, generation=2))
    assert DeleteJob(measuring.measurement.job_name or "") in decision.plan.actions
    (job,) = _starts(decision.plan)
    assert job.name != measuring.measurement.job_name
    assert decision.starts
    assert decision.plan.status.spec_hash == spec_hash(parse_spec(changed))


def test_a_stale_measurement_is_measured_again_and_says_why() -> None:
    measuring = _measuring(raw()).plan.status
    assert measuring.measurement is not None and measuring.measurement.job_name
    job = measuring.measurement.job_name
    done = decide(_snap(raw(), measuring, at=T1, outcomes={job: gpu_result(9 * GIB)}))
    ready = _finish(done.plan, raw(), measuring.measurement).plan.status
    assert ready.phase is Phase.Ready
    why = Stale("DriverChanged", "the NVIDIA driver of nvidia-l4 nodes changed")
    again = decide(_snap(raw(), ready, at=T1, stale=why))
    (start,) = _starts(again.plan)
    assert start.name != job  # a new Job, never the old one adopted
    measured = cond(again.plan.status, "Measured")
    assert measured.reason == "DriverChanged" and start.name in measured.message
    assert "DriverChanged" in _events(again.plan)
    assert again.starts


def test_an_invalid_spec_stalls_and_starts_nothing() -> None:
    snap = Snapshot(
        "w", "ns", 1, None, None, None, CONFIG, _stamp(T0), T0, problems=("spec.model: required",)
    )
    decision = decide(snap)
    assert not decision.starts and decision.look_up is None
    assert not _starts(decision.plan)
    assert any("spec.model" in c.message for c in decision.plan.status.conditions)
    out = finish(
        decision.plan,
        None,
        None,
        config=CONFIG,
        probe_image=IMAGE,
        node_driver=lambda _: "",
        sharing=True,
        publish_at=T1,
        record_ttl_seconds=TTL,
        now=_stamp(T1),
    )
    assert out.plan == decision.plan and out.publish == () and not out.finished


def _start_plan() -> tuple[Plan, Any]:
    snap = _snap(raw())
    wl = snap.workload()
    assert wl is not None
    return decide(snap).plan, wl


def test_a_quota_refusal_queues_the_measurement_with_the_api_servers_words() -> None:
    plan, wl = _start_plan()
    wait = QueueWait(
        position=2,
        reason="Quota",
        quota_text="exceeded quota: gpu, requested: nvidia.com/gpu=1",
        quota_retry_seconds=30,
    )
    out = queued(plan, wl, CONFIG, wait, "T1")
    assert not _starts(out)
    measured = cond(out.status, "Measured")
    assert (measured.status, measured.reason) == ("False", "Queued")
    assert measured.message.startswith("queued: position 2 in the measurement queue; ")
    assert "a ResourceQuota of namespace ns refused a measurement Job" in measured.message
    assert "exceeded quota: gpu" in measured.message and "trying again in 30 s" in measured.message
    assert _events(out) == ["Queued"]
    assert out.status.phase is Phase.Estimated


def test_a_used_up_gpu_second_budget_says_so_once() -> None:
    plan, wl = _start_plan()
    budget = (
        "namespace ns used 3600 of its 3600 measurement GPU-seconds of UTC day 2026-12-01 "
        "(namespace policy measurementGpuSecondsPerDay); the budget frees at 2026-12-02T00:00:00Z"
    )
    wait = QueueWait(position=1, reason="Quota", budget=budget)
    out = queued(plan, wl, CONFIG, wait, "T1")
    assert cond(out.status, "Measured").message.endswith(budget)
    assert _events(out) == ["Queued", "MeasurementBudgetExhausted"]
    again = queued(plan, dataclasses.replace(wl, previous=out.status), CONFIG, wait, "T2")
    assert _events(again) == []  # neither the Queued nor the budget Event a second time


def test_queue_positions_and_limits_are_worded_for_their_reason() -> None:
    plan, wl = _start_plan()
    limit = queued(plan, wl, CONFIG, QueueWait(3, reason="NamespaceLimit", namespace_limit=2), "T")
    text = cond(limit.status, "Measured").message
    assert "namespace ns may run 2 measurement Jobs at once" in text
    assert "maxConcurrentMeasurements" in text
    cap = queued(plan, wl, CONFIG, QueueWait(25, over=True, reason="Cap", cap=4), "T")
    text = cond(cap.status, "Measured").message
    assert text.startswith("queued: position over 25 in the measurement queue")
    assert "at most 4 measurement Jobs run at once cluster-wide" in text


def test_cluster_scope_only_for_a_trusted_run() -> None:
    spec = parse_spec(raw())
    trusted: dict[str, Any] = {
        "found": True,
        "job_image": IMAGE,
        "job_namespace": OPERATOR_NS,
        "operator_namespace": OPERATOR_NS,
        "runner": "Job",
        "probe_image": IMAGE,
    }
    assert record_scope(spec, **trusted) is RecordScope.Cluster
    tenant = {**trusted, "job_namespace": "ns"}  # a tenant may create pods there
    assert record_scope(spec, **tenant) is RecordScope.Namespace
    other_image = {**trusted, "job_image": "example.com/own-probe:1"}
    assert record_scope(spec, **other_image) is RecordScope.Namespace
    missing = {**trusted, "found": False, "job_image": None, "job_namespace": None}
    assert record_scope(spec, **missing) is RecordScope.Namespace  # no evidence
    command = parse_spec(raw(measurement={"mode": "Command", "command": ["python", "serve.py"]}))
    assert record_scope(command, **trusted) is RecordScope.Namespace
    local = {**missing, "runner": "local probe", "operator_namespace": None}
    assert record_scope(spec, **local) is RecordScope.Cluster  # the operator's own process


def test_a_job_runs_in_the_operators_namespace_only_when_its_result_may_be_shared() -> None:
    spec = parse_spec(raw())
    where: dict[str, Any] = {
        "operator_namespace": OPERATOR_NS,
        "runner": "Job",
        "sharing": True,
        "kueue_queue": None,
        "probe_image": IMAGE,
    }
    assert job_namespace("ns", spec, **where) == OPERATOR_NS
    assert job_namespace("ns", spec, **{**where, "sharing": False}) == "ns"
    assert job_namespace("ns", spec, **{**where, "kueue_queue": "team-gpus"}) == "ns"
    assert job_namespace("ns", spec, **{**where, "operator_namespace": None}) == "ns"
    own = parse_spec(raw(measurement={"image": "example.com/own-probe:1"}))
    assert job_namespace("ns", own, **where) == "ns"


def test_the_next_decision_comes_at_the_first_deadline() -> None:
    measuring = _measuring(raw()).plan
    waiting = Outcome(OutcomeKind.Unschedulable, "no node", seconds_unschedulable=100)
    common: dict[str, Any] = {
        "unschedulable_timeout_seconds": 600,
        "revalidate_after_seconds": None,
        "now": T0,
    }
    assert next_decision(measuring, waiting, wait_ends=None, **common) == 500.5
    soon = T0 + datetime.timedelta(seconds=10)
    assert next_decision(measuring, waiting, wait_ends=soon, **common) == 10.5
    running = Outcome(OutcomeKind.Running, "running")
    assert next_decision(measuring, running, wait_ends=None, **common) is None
