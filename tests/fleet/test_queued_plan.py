"""A plan that would start a measurement, held back while no slot is free (pure core)."""

from __future__ import annotations

from gpu_sizer.api import Phase, parse_spec, spec_hash
from gpu_sizer.lifecycle import (
    DeleteJob,
    Emit,
    StartJob,
    Workload,
    queued_plan,
    starts_measurement,
)
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind
from tests.controller.test_reconcile import CONFIG, cond, observe, raw, start


def _wl(doc: dict, prev=None) -> Workload:  # type: ignore[no-untyped-def]
    spec = parse_spec(doc)
    return Workload("w", "ns", 1, spec, spec_hash(spec), prev)


def test_queued_status_is_estimated_with_measured_false_queued_and_one_event() -> None:
    plan = start(raw())
    wl = _wl(raw())
    assert starts_measurement(plan, None, wl.spec_hash)
    queued = queued_plan(plan, wl, CONFIG, message="queued: position 3 in the queue", now="T1")
    assert queued.status.phase is Phase.Estimated
    assert queued.status.measurement is None
    measured = cond(queued.status, "Measured")
    assert (measured.status, measured.reason) == ("False", "Queued")
    assert "position 3" in measured.message
    assert cond(queued.status, "Reconciling").status == "True"
    assert cond(queued.status, "Ready").reason == "Queued"
    assert not any(isinstance(a, StartJob) for a in queued.actions)
    assert [a.reason for a in queued.actions if isinstance(a, Emit)] == ["Queued"]
    # Moving in the queue: the message changes, no second Event, and the same plan starts.
    again = start(raw(), prev=queued.status, now="T2")
    assert starts_measurement(again, queued.status, wl.spec_hash)
    moved = queued_plan(
        again, _wl(raw(), queued.status), CONFIG, message="queued: position 1", now="T2"
    )
    assert not [a for a in moved.actions if isinstance(a, Emit)]
    assert cond(moved.status, "Measured").last_transition_time == "T1"


def test_a_replacement_job_keeps_its_slot() -> None:
    running = start(raw())
    retry = observe(raw(), running.status, Outcome(OutcomeKind.Evicted, "evicted"))
    assert any(isinstance(a, StartJob) for a in retry.actions)
    assert any(isinstance(a, DeleteJob) for a in retry.actions)
    assert not starts_measurement(retry, running.status, _wl(raw()).spec_hash)


def test_spec_change_while_queued_keeps_deleting_the_old_job() -> None:
    running = start(raw())
    changed = raw(inference={"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 8})
    plan = start(changed, prev=running.status, gen=2)
    wl = _wl(changed, running.status)
    assert starts_measurement(plan, running.status, wl.spec_hash)
    queued = queued_plan(plan, wl, CONFIG, message="queued", now="T3")
    assert [a for a in queued.actions if isinstance(a, DeleteJob)]
    assert queued.status.measurement is None  # the old spec's measurement is dropped
