"""Shedding before queueing: work whose turn would come past the budget gets 429 at once.

Deterministic: the pool's pace comes from a fake clock, and the backlog is made of reviews held
in the worker threads on events, so nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import pytest

from gpu_sizer.admission import handlers
from gpu_sizer.admission.capacity import AdmissionCapacity, Overloaded
from gpu_sizer.metrics import ADMISSION_SHED

from .conftest import Webhook, admission_review, workload
from .test_webhook import inference

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition()`` holds (a generous deadline, never a fixed sleep)."""
    try:
        async with asyncio.timeout(60):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not reached within 60 s: {what}") from None


def held(gate: threading.Event) -> str:
    assert gate.wait(120), "the test never released the work"
    return "done"


def shed_count() -> float:
    return ADMISSION_SHED.labels("Backlog")._value.get()  # type: ignore[attr-defined,no-any-return]


async def test_work_past_the_budget_is_refused_before_it_queues() -> None:
    now = [100.0]
    capacity = AdmissionCapacity(budget=0.025, processes=0, clock=lambda: now[0])
    try:
        # No pace measured yet, and an idle pool: admitted.
        gate = threading.Event()
        first = asyncio.create_task(capacity.run(held, gate))
        await until(lambda: capacity.pending == 1, "the first piece running")
        now[0] += 0.010
        gate.set()
        assert await first == "done"
        assert capacity.pace == pytest.approx(0.010)
        assert capacity.pending == 0

        gate = threading.Event()
        ahead = [asyncio.create_task(capacity.run(held, gate)) for _ in range(3)]
        await until(lambda: capacity.pending == 3, "three pieces pending")
        assert capacity.backlog() == pytest.approx(0.030)
        before = shed_count()
        # 30 ms of work ahead, over the 25 ms budget: refused without waiting for anything
        # (the coroutine raises on its first step, before any suspension).
        refused = capacity.run(held, threading.Event())
        with pytest.raises(Overloaded) as err:
            refused.send(None)
        assert (err.value.status, err.value.reason) == (429, "Backlog")
        assert str(err.value) == (
            "webhook overloaded: 3 reviews ahead, about 30 ms of work (budget 25 ms); retry shortly"
        )
        assert shed_count() == before + 1
        gate.set()
        assert await asyncio.gather(*ahead) == ["done"] * 3
        # Each completion was a sample: the pool is idle again and takes work whatever its pace.
        assert capacity.pending == 0
        assert await capacity.run(lambda: "again") == "again"
    finally:
        capacity.close()


async def test_two_pieces_ahead_at_that_pace_are_within_the_budget() -> None:
    now = [0.0]
    capacity = AdmissionCapacity(budget=0.025, processes=0, clock=lambda: now[0])
    try:
        gate = threading.Event()
        first = asyncio.create_task(capacity.run(held, gate))
        await until(lambda: capacity.pending == 1, "running")
        now[0] += 0.010
        gate.set()
        await first
        gate = threading.Event()
        ahead = [asyncio.create_task(capacity.run(held, gate)) for _ in range(2)]
        await until(lambda: capacity.pending == 2, "two pending")
        admitted = asyncio.create_task(capacity.run(held, gate))  # 20 ms ahead: admitted
        await until(lambda: capacity.pending == 3, "the third admitted")
        gate.set()
        assert await asyncio.gather(*ahead, admitted) == ["done"] * 3
    finally:
        capacity.close()


async def test_one_stalled_piece_does_not_keep_the_pool_shedding() -> None:
    now = [0.0]
    capacity = AdmissionCapacity(budget=0.025, processes=0, clock=lambda: now[0])
    try:
        gate = threading.Event()
        stalled = asyncio.create_task(capacity.run(held, gate))
        await until(lambda: capacity.pending == 1, "running")
        now[0] += 60.0  # held for a minute (a debugger, a stalled read)
        gate.set()
        await stalled
        assert capacity.pace == pytest.approx(0.050)  # counted as twice the budget
        # Pieces of 1 ms each, one at a time (an idle pool always takes work): within 15
        # completions two pieces ahead fit the budget again.
        for _ in range(15):
            gate = threading.Event()
            piece = asyncio.create_task(capacity.run(held, gate))
            await until(lambda: capacity.pending == 1, "running")
            now[0] += 0.001
            gate.set()
            await piece
        assert 2 * capacity.pace < capacity.budget
    finally:
        capacity.close()


async def test_the_webhook_answers_429_while_its_workers_are_backlogged(webhook: Webhook) -> None:
    now = [0.0]
    capacity = AdmissionCapacity(budget=0.025, processes=0, clock=lambda: now[0])
    saved, real = handlers._config, handlers.review
    gates: list[threading.Event] = [threading.Event()]

    def slow_review(*args: Any, **kwargs: Any) -> Any:
        assert gates[-1].wait(120), "never released"
        return real(*args, **kwargs)

    def spec(seqs: int) -> dict[str, Any]:
        return inference(maxNumSeqs=seqs)  # distinct specs: each one its own verdict

    handlers.configure_admission(dataclasses.replace(saved, capacity=capacity))
    handlers.review = slow_review  # type: ignore[assignment]
    try:
        first = asyncio.create_task(webhook.validate(admission_review(workload(spec(1)))))
        await until(lambda: capacity.pending == 1, "the first review in a worker")
        now[0] += 0.010
        gates[-1].set()
        assert (await first)["allowed"] is True

        gates.append(threading.Event())
        held_reviews = [
            asyncio.create_task(webhook.validate(admission_review(workload(spec(n)))))
            for n in (2, 3, 4)
        ]
        await until(lambda: capacity.pending == 3, "three reviews in the workers")
        before = shed_count()
        async with webhook.session.post(
            f"{webhook.url}/validate-gpuworkload?timeout=10s",
            json=admission_review(workload(spec(5))),
            ssl=webhook.ssl,
            server_hostname="localhost",
        ) as resp:
            status, text, retry = resp.status, await resp.text(), resp.headers.get("Retry-After")
        assert (status, retry) == (429, "1")
        assert text.startswith("webhook overloaded: 3 reviews ahead, about 30 ms of work")
        assert shed_count() == before + 1
        assert not any(t.done() for t in held_reviews)  # answered while the others wait
        gates[-1].set()
        answers = await asyncio.gather(*held_reviews)
        assert [a["allowed"] for a in answers] == [True, True, True]
    finally:
        gates[-1].set()
        handlers.review = real  # type: ignore[assignment]
        handlers.configure_admission(saved)
        capacity.close()


def loop_lag_sheds() -> float:
    return ADMISSION_SHED.labels("LoopLag")._value.get()  # type: ignore[attr-defined,no-any-return]


async def test_a_loop_that_runs_behind_sheds_reviews_before_reading_them() -> None:
    """The loop's lag is a timer's lateness on the capacity's clock (a fake one here, moved
    while the timer is due): past the lag budget a review is refused before its body is read."""
    now = [100.0]
    capacity = AdmissionCapacity(processes=0, lag_budget=0.004, clock=lambda: now[0])
    capacity.watch_lag()
    try:
        assert capacity.lag() == 0.0  # nothing held: no timer runs
        async with capacity.slot(10.0):  # the first review starts the timer, never refused
            due = capacity._due
            assert due is not None
            assert capacity.lag() == 0.0
            now[0] = due + 0.030  # the loop is 30 ms into one long iteration
            assert capacity.lag() == pytest.approx(0.030)
            before = loop_lag_sheds()
            with pytest.raises(Overloaded) as err:
                capacity.shed_unread()
            assert (err.value.status, err.value.reason) == (429, "LoopLag")
            assert str(err.value) == (
                "webhook overloaded: it runs 30 ms behind its requests (budget 4 ms); retry shortly"
            )
            assert loop_lag_sheds() == before + 1
            # The timer fires 30 ms late: a quarter of that is the smoothed lag, 7.5 ms (less
            # once later readings, on time on the fake clock, are smoothed in).
            await until(lambda: capacity._due != due, "the lag timer fired")
            assert 0.0 < capacity.lag() <= 0.0075 + 1e-9
            for _ in range(4):  # on time again: the smoothed lag falls under the budget
                timer = capacity._timer
                await until(lambda t=timer: capacity._timer is not t, "the lag timer fired")
            assert capacity.lag() < 0.004
            async with capacity.slot(10.0):
                pass
        # Nothing held when the timer next fires: it stops, and forgets the lag.
        await until(lambda: capacity._due is None, "the lag timer stopped")
        assert capacity.lag() == 0.0
    finally:
        capacity.close()


async def test_one_long_pause_of_the_loop_does_not_shed_the_reviews_after_it() -> None:
    """A tester's finding: decoding a 7 MiB body of tiny values held the loop for 100-150 ms
    once, and the lag that one late timer left in the smoothed figure shed the reviews that came
    next, though the loop kept up again (they then waited a second for the API server's retry
    instead of the pause). One reading counts as at most twice the budget, as one stalled piece
    of work does for the pool's pace; a loop that stays behind is still shed within a few
    readings."""
    now = [100.0]
    capacity = AdmissionCapacity(processes=0, lag_budget=0.025, clock=lambda: now[0])
    capacity.watch_lag()

    def reading(late: float) -> None:
        """The lag timer fires ``late`` seconds late (called here, at once: no await between
        readings lets the real timer fire on time in between)."""
        assert capacity._timer is not None
        capacity._timer.cancel()
        capacity._due = now[0] - late
        capacity._lag_timer()

    try:
        async with capacity.slot(10.0):
            reading(0.150)
            assert capacity.lag() == pytest.approx(0.25 * 0.050)
            capacity.shed_unread()  # not refused: one pause is over
            reading(0.150)
            reading(0.150)
            assert capacity.lag() == pytest.approx(0.25 * 0.050 * (1 + 0.75 + 0.75**2))
            with pytest.raises(Overloaded) as err:  # three in a row: behind, and shed
                capacity.shed_unread()
            assert err.value.reason == "LoopLag"
    finally:
        capacity.close()


async def test_a_full_queue_sheds_unread_only_a_review_that_would_wait() -> None:
    capacity = AdmissionCapacity(units=1, max_queued=0, processes=0)
    try:
        capacity.shed_unread()  # room is free: no queue to be full
        async with capacity.slot(10.0):
            capacity.shed_unread()  # an empty queue is not full: slot() decides, by its cost
            with pytest.raises(Overloaded) as err:
                async with capacity.slot(10.0):
                    raise AssertionError("admitted beyond the room and a queue of none")
            assert err.value.reason == "QueueFull"
    finally:
        capacity.close()
