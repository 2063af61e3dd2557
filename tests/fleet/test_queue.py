"""The measurement queue (issue 15, item 1): cap, fair order across namespaces, limits, quota."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_sizer.measurement.queue import MeasurementQueue, QueueReason


def test_entries_start_until_the_cap_then_wait_in_arrival_order() -> None:
    q = MeasurementQueue(2)
    for i in range(5):
        q.enter(("a", f"w{i}"), "2026-01-01T00:00:00Z")
    assert q.admit(("a", "w0"), {}).admitted
    assert q.admit(("a", "w1"), {}).admitted
    q.leave(("a", "w0"))
    q.leave(("a", "w1"))
    running = {"a": 2}
    waits = [q.admit(("a", f"w{i}"), running) for i in (2, 3, 4)]
    assert [w.admitted for w in waits] == [False, False, False]
    assert [w.position for w in waits] == [1, 2, 3]
    assert {w.reason for w in waits} == {QueueReason.Cap}


def test_a_namespace_with_nothing_running_goes_before_one_holding_slots() -> None:
    q = MeasurementQueue(4)
    for i in range(3):
        q.enter(("big", f"b{i}"), f"2026-01-01T00:00:0{i}Z")
    q.enter(("small", "s0"), "2026-01-01T00:00:09Z")  # arrived last
    running = {"big": 3}
    assert q.startable(running) == [("small", "s0")]
    assert q.positions(running) == [("small", "s0"), ("big", "b0"), ("big", "b1"), ("big", "b2")]


def test_interleaves_namespaces_round_robin() -> None:
    q = MeasurementQueue(1)
    for i in range(3):
        q.enter(("a", f"a{i}"), f"2026-01-01T00:00:0{i}Z")
        q.enter(("b", f"b{i}"), f"2026-01-01T00:00:0{i}Z")
    order = [k[1] for k in q.positions({})]
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_a_namespace_at_its_limit_keeps_its_place_but_the_slot_goes_to_the_next() -> None:
    q = MeasurementQueue(4)
    q.enter(("a", "a0"), "2026-01-01T00:00:00Z")
    q.enter(("b", "b0"), "2026-01-01T00:00:05Z")
    running = {"a": 1}

    def limit(ns: str) -> int | None:
        return 1 if ns == "a" else None

    verdict = q.admit(("a", "a0"), running, limit)
    assert not verdict.admitted and verdict.reason == QueueReason.NamespaceLimit
    assert q.admit(("b", "b0"), running, limit).admitted


def test_quota_blocked_namespaces_wait() -> None:
    q = MeasurementQueue(None)
    q.enter(("a", "a0"), "2026-01-01T00:00:00Z")
    verdict = q.admit(("a", "a0"), {}, blocked={"a"})
    assert not verdict.admitted and verdict.reason == QueueReason.Quota
    assert q.admit(("a", "a0"), {}).admitted  # no cap: anything eligible starts


def test_entering_twice_keeps_the_first_place() -> None:
    q = MeasurementQueue(1)
    q.enter(("a", "x"), "2026-01-01T00:00:00Z")
    q.enter(("a", "y"), "2026-01-01T00:00:01Z")
    q.enter(("a", "x"), "2026-01-01T00:00:09Z")
    assert q.positions({}) == [("a", "x"), ("a", "y")]


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        MeasurementQueue(0)


@given(
    st.integers(1, 5),
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 9)), max_size=30, unique=True),
    st.dictionaries(st.sampled_from("abc"), st.integers(0, 4)),
)
def test_never_more_start_than_the_free_slots(
    cap: int, entries: list[tuple[str, int]], running: dict[str, int]
) -> None:
    q = MeasurementQueue(cap)
    for ns, i in entries:
        q.enter((ns, str(i)), f"2026-01-01T00:00:0{i}Z")
    free = max(0, cap - sum(running.values()))
    admitted = [k for k in [(ns, str(i)) for ns, i in entries] if q.admit(k, running).admitted]
    assert len(admitted) == min(free, len(entries))
    assert sorted(admitted) == sorted(q.startable(running))


def test_positions_are_exact_up_to_ten_then_steps() -> None:
    from gpu_sizer.controller.reconciler import _shown_position

    assert [_shown_position(p) for p in (1, 10)] == [(False, 1), (False, 10)]
    assert _shown_position(11) == (True, 10)
    assert _shown_position(26) == (True, 25)
    assert _shown_position(999) == (True, 500)
    assert _shown_position(10**6) == (True, 10000)
