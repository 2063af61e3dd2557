"""A work queue of keys to reconcile: deduplicated, one worker per key at a time, retried with
per-key exponential backoff, and delayed re-runs (the shape of client-go's ``workqueue`` that
every Kubernetes controller uses).

Events only *mark* a key; the reconcile function then reads the latest state for it. So a burst
of events for one object (its Job, its pod, its own status coming back) costs one reconcile, a
key added while it is being reconciled runs once more afterwards (never twice at once), and a
failed reconcile is retried later without blocking the other keys. Nothing here knows about
Kubernetes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Backoff", "Requeue", "WorkQueue"]

K = TypeVar("K", bound=Hashable)
log = logging.getLogger("gpu_sizer.controller")


class Requeue(Exception):
    """Raised by a handler: not a failure; handle the key again after ``delay`` seconds (a
    resource still being deleted, a write that met a newer object)."""

    def __init__(self, delay: float, why: str = "") -> None:
        super().__init__(why)
        self.delay = delay


@dataclass(frozen=True)
class Backoff:
    """Delay before retry ``n`` (0-based) of a failing key: ``first * factor**n``, at most
    ``cap`` seconds."""

    first: float = 0.5
    factor: float = 2.0
    cap: float = 30.0

    def delay(self, failures: int) -> float:
        return float(min(self.cap, self.first * self.factor ** max(0, failures)))


class WorkQueue(Generic[K]):
    """Keys waiting for ``handle(key)``.

    ``handle`` returns ``None`` when done, or a number of seconds after which the key should be
    handled again (a deadline to check); either way it replaces the key's pending timer, so a key
    with nothing left to wait for holds none. An exception counts as a failure: the key is handled
    again after :class:`Backoff` delays that grow with consecutive failures of that key and
    reset on its next success. ``on_error(key, exc, delay)`` reports the failure.
    """

    def __init__(
        self,
        handle: Callable[[K], Awaitable[float | None]],
        *,
        workers: int = 8,
        backoff: Backoff | None = None,
        on_error: Callable[[K, BaseException, float], None] | None = None,
    ) -> None:
        self._handle = handle
        self._workers_wanted = workers
        self._backoff = backoff or Backoff()
        self._on_error = on_error
        self._queue: asyncio.Queue[K] | None = None
        self._pending: list[K] = []  # added before start()
        self._queued: set[K] = set()
        self._busy: set[K] = set()
        self._again: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._workers: list[asyncio.Task[None]] = []

    def __len__(self) -> int:
        return len(self._queued)

    @property
    def busy(self) -> int:
        """Keys being handled right now."""
        return len(self._busy)

    def add(self, key: K) -> None:
        """Mark ``key`` for handling (once, however often it is added before it runs)."""
        if key in self._busy:
            self._again.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        if self._queue is None:
            self._pending.append(key)
        else:
            self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        """Handle ``key`` after ``delay`` seconds; an earlier pending timer of the key wins."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= when:
                return
            current[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def cancel_timer(self, key: K) -> None:
        """Drop the pending timer of ``key`` (nothing left to wait for)."""
        current = self._timers.pop(key, None)
        if current is not None:
            current[1].cancel()

    @property
    def timers(self) -> int:
        """Keys with a pending delayed run."""
        return len(self._timers)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def start(self) -> None:
        """Start the workers in the running loop."""
        if self._queue is not None:
            return
        self._queue = asyncio.Queue()
        for key in self._pending:
            self._queue.put_nowait(key)
        self._pending.clear()
        self._workers = [
            asyncio.create_task(self._work(), name=f"gpu-sizer worker {i}")
            for i in range(self._workers_wanted)
        ]

    async def stop(self, grace: float = 5.0) -> None:
        """Cancel the timers and the workers; wait at most ``grace`` seconds for them."""
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._workers:
            task.cancel()
        if self._workers:
            await asyncio.wait(self._workers, timeout=grace)
        self._workers = []

    async def join(self, timeout: float) -> bool:
        """Wait until nothing is queued or busy (tests and benchmarks); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._queued or self._busy:
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def _work(self) -> None:
        assert self._queue is not None
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._busy.add(key)
            try:
                after = await self._handle(key)
            except asyncio.CancelledError:
                raise
            except Requeue as again:
                self._failures.pop(key, None)
                self.cancel_timer(key)
                self.add_after(key, again.delay)
            except Exception as exc:  # a failed reconcile must never stop the worker
                failures = self._failures.get(key, 0)
                self._failures[key] = failures + 1
                delay = self._backoff.delay(failures)
                if self._on_error is not None:
                    with contextlib.suppress(Exception):
                        self._on_error(key, exc, delay)
                self.add_after(key, delay)
            else:
                # The latest decision says what is still to wait for: nothing, or one deadline.
                self._failures.pop(key, None)
                self.cancel_timer(key)
                if after is not None:
                    self.add_after(key, after)
            finally:
                self._busy.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.add(key)
