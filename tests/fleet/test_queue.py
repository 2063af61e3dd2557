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
    from gpu_sizer.controller.slots import shown_position as _shown_position

    assert [_shown_position(p) for p in (1, 10)] == [(False, 1), (False, 10)]
    assert _shown_position(11) == (True, 10)
    assert _shown_position(26) == (True, 25)
    assert _shown_position(999) == (True, 500)
    assert _shown_position(10**6) == (True, 10000)


class _SimpleQueue:
    """The queue's fair order as first written (a sort of every waiting entry per question):
    the reference :class:`MeasurementQueue` must agree with on every answer."""

    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.waiting: dict[tuple[str, str], tuple[str, int]] = {}
        self.seq = 0

    def enter(self, key: tuple[str, str], since: str) -> None:
        if key not in self.waiting:
            self.waiting[key] = (since, self.seq)
            self.seq += 1

    def leave(self, key: tuple[str, str]) -> None:
        self.waiting.pop(key, None)

    def ranked(
        self, running: dict[str, int], limits: dict[str, int], blocked: set[str]
    ) -> list[tuple[tuple[str, str], bool]]:
        by_ns: dict[str, list[tuple[tuple[str, int], tuple[str, str]]]] = {}
        for key, entry in self.waiting.items():
            by_ns.setdefault(key[0], []).append((entry, key))
        ranked = []
        for ns, entries in by_ns.items():
            entries.sort()
            held = running.get(ns, 0)
            limit = limits.get(ns)
            for i, (entry, key) in enumerate(entries):
                eligible = ns not in blocked and (limit is None or held + i < limit)
                ranked.append(((held + i, *entry), key, eligible))
        ranked.sort(key=lambda r: r[0])
        return [(key, eligible) for _, key, eligible in ranked]

    def admit(
        self,
        key: tuple[str, str],
        running: dict[str, int],
        limits: dict[str, int],
        blocked: set[str],
    ) -> tuple[bool, int, str]:
        free = None if self.cap is None else max(0, self.cap - sum(running.values()))
        ranked = self.ranked(running, limits, blocked)
        eligible = [k for k, ok in ranked if ok]
        if key in eligible and (free is None or eligible.index(key) < free):
            return True, 0, ""
        position = next(i for i, (k, _) in enumerate(ranked, 1) if k == key)
        if key[0] in blocked:
            return False, position, QueueReason.Quota
        if key not in eligible:
            return False, position, QueueReason.NamespaceLimit
        return False, position, QueueReason.Cap


_NS = st.sampled_from("abcd")
_OPS = st.lists(
    st.one_of(
        # enter (namespace, name, second of its since: ties across namespaces are common)
        st.tuples(st.just("enter"), _NS, st.integers(0, 12), st.integers(0, 3)),
        st.tuples(st.just("leave"), _NS, st.integers(0, 12), st.just(0)),
    ),
    max_size=60,
)


@given(
    st.one_of(st.none(), st.integers(1, 6)),
    _OPS,
    st.dictionaries(_NS, st.integers(0, 4)),
    st.dictionaries(_NS, st.integers(0, 4)),
    st.sets(_NS, max_size=2),
)
def test_the_fair_order_is_the_simple_sort_of_every_entry(
    cap: int | None,
    ops: list[tuple[str, str, int, int]],
    running: dict[str, int],
    limits: dict[str, int],
    blocked: set[str],
) -> None:
    """Same admissions, positions, reasons, startable entries and order as sorting every
    waiting entry by (held + i, since, arrival), after any sequence of enters and leaves."""
    fast, simple = MeasurementQueue(cap), _SimpleQueue(cap)
    for op, ns, n, second in ops:
        key = (ns, f"w{n}")
        if op == "enter":
            since = f"2026-01-01T00:00:0{second}Z"
            fast.enter(key, since)
            simple.enter(key, since)
        else:
            fast.leave(key)
            simple.leave(key)
    assert len(fast) == len(simple.waiting)
    ranked = simple.ranked(running, limits, blocked)
    assert fast.positions(running, limits.get, blocked) == [k for k, _ in ranked]
    assert fast.positions(running, limits.get, blocked, first=3) == [k for k, _ in ranked][:3]
    for key in simple.waiting:
        verdict = fast.admit(key, running, limits.get, blocked)
        assert (verdict.admitted, verdict.position, verdict.reason) == simple.admit(
            key, running, limits, blocked
        )
    admitted = [k for k, _ in ranked if simple.admit(k, running, limits, blocked)[0]]
    assert fast.startable(running, limits.get, blocked) == admitted
    waiting: dict[str, int] = {}
    for ns, _ in simple.waiting:
        waiting[ns] = waiting.get(ns, 0) + 1
    assert fast.waiting_by_namespace() == waiting
