"""The work queue: one handler per key at a time, deduplicated, retried with backoff."""

from __future__ import annotations

import asyncio
import itertools

from gpu_sizer.controller.workqueue import Backoff, Requeue, WorkQueue


async def test_a_burst_of_adds_runs_a_key_once_and_never_twice_at_once() -> None:
    running: set[str] = set()
    runs: list[str] = []
    gate = asyncio.Event()

    async def handle(key: str) -> None:
        assert key not in running, "a key is handled twice at once"
        running.add(key)
        runs.append(key)
        await gate.wait()
        running.discard(key)

    queue: WorkQueue[str] = WorkQueue(handle, workers=4)
    for _ in range(10):
        queue.add("a")
    queue.add("b")
    queue.start()
    await asyncio.sleep(0.05)
    assert sorted(runs) == ["a", "b"]
    for _ in range(10):  # added while busy: runs once more afterwards
        queue.add("a")
    gate.set()
    assert await queue.join(5)
    assert runs.count("a") == 2 and runs.count("b") == 1
    await queue.stop()


async def test_failures_are_retried_with_growing_delays_then_reset() -> None:
    attempts: list[float] = []
    loop = asyncio.get_running_loop()
    errors: list[float] = []

    async def handle(key: str) -> None:
        attempts.append(loop.time())
        if len(attempts) < 4:
            raise RuntimeError("HTTP 500")

    queue: WorkQueue[str] = WorkQueue(
        handle,
        workers=1,
        backoff=Backoff(first=0.05, factor=2.0, cap=1.0),
        on_error=lambda key, exc, delay: errors.append(delay),
    )
    queue.start()
    queue.add("k")
    for _ in range(200):
        if len(attempts) >= 4:
            break
        await asyncio.sleep(0.02)
    assert len(attempts) == 4
    assert errors == [0.05, 0.1, 0.2]
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert all(gap >= want * 0.9 for gap, want in zip(gaps, errors, strict=True))
    assert queue.timers == 0, "a key that succeeded holds no timer"
    await queue.stop()


async def test_a_deadline_replaces_the_pending_timer_and_requeue_is_no_failure() -> None:
    calls: list[str] = []
    errors: list[BaseException] = []

    async def handle(key: str) -> float | None:
        calls.append(key)
        if len(calls) == 1:
            raise Requeue(0.05, "still being deleted")
        if len(calls) == 2:
            return 0.05  # a deadline to check
        return None

    queue: WorkQueue[str] = WorkQueue(handle, workers=1, on_error=lambda k, e, d: errors.append(e))
    queue.start()
    queue.add("k")
    for _ in range(100):
        if len(calls) >= 3:
            break
        await asyncio.sleep(0.02)
    assert calls == ["k", "k", "k"] and errors == []
    await asyncio.sleep(0.1)
    assert len(calls) == 3 and queue.timers == 0
    await queue.stop()


async def test_stop_is_prompt_whatever_the_handlers_do() -> None:
    async def handle(key: str) -> None:
        await asyncio.sleep(3600)

    queue: WorkQueue[str] = WorkQueue(handle, workers=2)
    queue.start()
    queue.add("a")
    queue.add_after("b", 3600)
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await queue.stop(grace=1.0)
    assert loop.time() - started < 1.0
    assert queue.timers == 0
