"""How much admission work runs at once, where it runs, and what is shed when there is too much.

The API server waits ``timeoutSeconds`` (10 s by default, the chart's value) for a webhook and
tells it so in the request's ``?timeout=`` parameter; an answer later than that is wasted work,
and a queue that grows without bound turns a burst into minutes of answers nobody waits for,
while the decoded bodies it holds grow the webhook past its memory limit (figures from before
this bound: docs/benchmarks.md, "Admission webhook"). So:

* reviews are worked on within a budget of :data:`CAPACITY_UNITS` units: a review costs one unit
  plus one per :data:`UNIT_BYTES` of its body (an 8 MiB body decodes into some 100 MiB of Python
  objects, so a few big reviews take the room of many small ones, and memory stays bounded
  whatever the mix). At most :data:`MAX_QUEUED` more reviews wait for room;
* room is taken once the body is in, not before: the API server sends a review's body in one
  write, so a body still arriving is a client that trickles it, and while room was taken first
  200 connections sending a byte a second held all of it and the API server's reviews got 429.
  A body being received, or received and waiting for room, holds no unit; the bytes all such
  bodies hold are bounded instead (:data:`BODY_BYTES`, :meth:`AdmissionCapacity.receive`), the
  review that would pass the bound is answered 429 (reason ``BodyBytes``), and the server gives
  the body the review's own deadline to arrive (half its timeout, shared with the wait for
  room). The number of bodies being received is not bounded: a stalled sender costs a socket
  and the bytes it sent, and a bound on their number would be the slots a slow sender fills;
* a review arriving to a full queue is shed at once with HTTP 429, and one that gets no room
  within half of its own timeout with HTTP 503, both with ``Retry-After: 1``. The API server's
  webhook client retries such answers after that second within the same timeout (client-go's
  ``rest.Request`` honours ``Retry-After`` on 429 and 5xx); when the timeout runs out, the
  webhook configuration's ``failurePolicy`` decides, as for any webhook that does not answer;
* the CPU work of a review runs off the event loop that the operator's kopf handlers, watches
  and health probes share: verdicts (validating and sizing a spec, reviewing a pod) in
  :data:`~gpu_sizer.admission.workers.PROCESSES` worker processes
  (:mod:`gpu_sizer.admission.workers`, where the reason is), decoding a large body in one of
  :data:`WORKERS` threads (its result must live in this process). A slow review never stops the
  operator from serving events. A worker process that dies (killed for memory, say) fails the
  reviews it held with 503 and a ``Retry-After``, and the next verdict starts a new pool;
* work is shed *before* it queues: the pool's pace is measured (the interval between
  completions while work is waiting, smoothed), and work whose turn would come later than
  :data:`QUEUE_BUDGET` seconds from now is refused at once with HTTP 429 (reason ``Backlog``)
  instead of waiting its turn. The units and the queue above bound memory; this bounds latency:
  past the rate the pool sustains, the reviews it can answer are answered within the budget and
  the rest get their 429 in microseconds, not after hundreds of milliseconds in a queue;
* the event loop's own lag is watched (a timer every :data:`LAG_INTERVAL`, its lateness
  smoothed): the loop decodes every review, answers the ones it has judged from memory and
  hands the rest over, so past the rate it sustains requests wait in it, unseen, before any
  bound above applies, and a 429 written after that wait arrives as late as an answer would.
  While the loop runs more than :data:`LAG_BUDGET` behind, a review is shed with HTTP 429
  (reason ``LoopLag``) before its body is even read (:meth:`AdmissionCapacity.shed_unread`;
  so is one that arrives to a full queue), which costs the loop what a bare HTTP
  server pays per request, so the loop catches up instead of falling further behind. This is
  the event-loop-lag test of Node's ``toobusy-js``, applied before the work rather than after.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Final, TypeVar

from gpu_sizer.admission.workers import PROCESSES, WorkerPool
from gpu_sizer.metrics import ADMISSION_IN_FLIGHT, ADMISSION_SHED

__all__ = [
    "BODY_BYTES",
    "CAPACITY_UNITS",
    "DEFAULT_TIMEOUT",
    "LAG_BUDGET",
    "LAG_INTERVAL",
    "MAX_QUEUED",
    "QUEUE_BUDGET",
    "UNIT_BYTES",
    "WORKERS",
    "AdmissionCapacity",
    "BodyReceipt",
    "Overloaded",
    "request_timeout",
]

T = TypeVar("T")

#: The review being worked on in this task: (clock time by which its verdict must be ready,
#: its timeout in seconds), set by :meth:`AdmissionCapacity.slot`.
_DUE: Final[contextvars.ContextVar[tuple[float, float] | None]] = contextvars.ContextVar(
    "admission_due", default=None
)

logger = logging.getLogger(__name__)

#: Room for reviews worked on at once, in units (see :data:`UNIT_BYTES`): 32 small reviews, or
#: one of the largest bodies accepted. The CPU work shares a few processes, so more room does
#: not add throughput; it lets reviews that wait on I/O (a Namespace read) overlap with the ones
#: that compute.
CAPACITY_UNITS: Final = 32
#: Body bytes per extra unit a review costs (a 1.5 MiB object: 7 units).
UNIT_BYTES: Final = 256 << 10
#: Bytes that the bodies of reviews not yet in room (being received, or received and waiting)
#: may hold together: four of the largest bodies accepted (``MAX_BODY_BYTES``, 8 MiB), or a
#: full queue of reviews of 256 KiB. Raw bytes, which cost a twelfth of what they decode to;
#: past it a stalled sender's bytes make new reviews shed, never the server's memory grow.
BODY_BYTES: Final = 32 << 20
#: Reviews waiting for room. At about 2 ms of CPU per review (docs/benchmarks.md) a full queue
#: drains in a fraction of a second; beyond it, waiting only adds latency.
MAX_QUEUED: Final = 128
#: Threads for the CPU work whose result stays in this process (decoding a large body), and for
#: verdicts when there are no worker processes: the interpreter lock makes more useless.
WORKERS: Final = 2
#: Seconds the API server waits when the request does not say (``timeoutSeconds`` default).
DEFAULT_TIMEOUT: Final = 10.0
#: Seconds a review's verdict may wait for a worker before the review is shed. An answered
#: review waits up to this, then takes its own time and the hand-overs: at 25 ms (the webhook's
#: p99 target) the answered p99 past the sustainable rate was 42-46 ms, at 10 ms 21 ms, with
#: fewer reviews shed (docs/benchmarks.md, "Worker processes").
QUEUE_BUDGET: Final = 0.010
#: Seconds between two readings of the event loop's lag (a timer's lateness): 200 timers a
#: second, a few microseconds each.
LAG_INTERVAL: Final = 0.005
#: Seconds the event loop may run behind (smoothed) before reviews are shed with 429 before
#: their body is read: the answered p99 target. A loop that far behind answers late whatever it
#: does, while a lower figure would also shed on a node whose other processes merely delay
#: the operator's timers by a few milliseconds. At 1200 reviews/s on 2 vCPUs, 4 ms and 25 ms
#: gave the same shed latency (p50 1.4-2.4 ms, p99 9-17 ms; docs/benchmarks.md).
LAG_BUDGET: Final = 0.025
#: Weight of the newest lateness in the smoothed lag (about the last four readings, 20 ms).
LAG_WEIGHT: Final = 0.25
#: Weight of the newest interval in the smoothed pace of the pool (an exponentially weighted
#: moving average over about the last ten completions).
PACE_WEIGHT: Final = 0.1

_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def request_timeout(value: str | None) -> float:
    """Seconds from the API server's ``?timeout=`` parameter (a Go duration, ``"10s"``).

    The API server sets it from the webhook's ``timeoutSeconds``, rounded up to whole seconds
    (``k8s.io/apiserver`` ``pkg/admission/plugin/webhook/validating/dispatcher.go``,
    ``callHook``). Missing or unreadable: :data:`DEFAULT_TIMEOUT`. At most 30 s, the API's
    maximum ``timeoutSeconds``.
    """
    if not value:
        return DEFAULT_TIMEOUT
    parts = _GO_DURATION.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        return DEFAULT_TIMEOUT
    seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    return min(seconds, 30.0)


class Overloaded(Exception):
    """The review is shed: ``status`` 429 (queue full) or 503 (no room in time)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason

    def __reduce__(self) -> tuple[type[Overloaded], tuple[int, str, str]]:
        return type(self), (self.status, self.reason, str(self))


def _worker_lost(what: str) -> Overloaded:
    """The 503 for a review whose worker process is gone (counted as ``WorkerLost``)."""
    ADMISSION_SHED.labels("WorkerLost").inc()
    return Overloaded(503, "WorkerLost", f"{what}; retry shortly")


def _queue_timeout(what: str, budget: float, timeout: float) -> Overloaded:
    """The 503 for a review whose ``what`` did not come within ``budget`` seconds of its
    ``timeout`` (counted as ``QueueTimeout``)."""
    ADMISSION_SHED.labels("QueueTimeout").inc()
    return Overloaded(
        503,
        "QueueTimeout",
        f"webhook overloaded: {what} within {budget:.1f} s of the request's {timeout:g} s "
        "timeout; retry shortly",
    )


class AdmissionCapacity:
    """The bounds above, for one webhook server; used from one event loop.

    :param units: room for reviews worked on at once (:data:`CAPACITY_UNITS`).
    :param unit_bytes: body bytes per extra unit a review costs (:data:`UNIT_BYTES`).
    :param body_bytes: bytes the bodies of reviews not yet in room may hold together
        (:data:`BODY_BYTES`, :meth:`receive`).
    :param max_queued: reviews waiting for room; more are shed with 429.
    :param workers: threads for the CPU work that stays in this process (:meth:`run_here`).
    :param processes: worker processes for verdicts (:meth:`run`); 0 runs them in the threads
        (a function that cannot be pickled, a test's fake, needs that).
    :param queue_share: share of a review's timeout it may spend waiting for room before it is
        shed with 503 (the rest is for the work itself and the network).
    :param budget: seconds of work that may be ahead of new work in the pool before it is shed
        with 429 (:data:`QUEUE_BUDGET`).
    :param lag_budget: seconds the event loop may run behind before reviews are shed with 429
        unread (:data:`LAG_BUDGET`; read once :meth:`watch_lag` runs).
    :param clock: monotonic seconds (a fake one in tests).
    """

    def __init__(
        self,
        *,
        units: int = CAPACITY_UNITS,
        unit_bytes: int = UNIT_BYTES,
        body_bytes: int = BODY_BYTES,
        max_queued: int = MAX_QUEUED,
        workers: int = WORKERS,
        processes: int = PROCESSES,
        queue_share: float = 0.5,
        budget: float = QUEUE_BUDGET,
        lag_budget: float = LAG_BUDGET,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min(units, unit_bytes, body_bytes, workers) < 1 or max_queued < 0 or processes < 0:
            raise ValueError("capacity bounds must be positive")
        if not 0 < queue_share <= 1:
            raise ValueError("queue_share must be in (0, 1]")
        self.units = units
        self.unit_bytes = unit_bytes
        self.body_bytes = body_bytes
        self.max_queued = max_queued
        self.queue_share = queue_share
        self._free = units
        #: Bodies being received or waiting for room (:meth:`receive`), and their bytes.
        self._receiving = 0
        self._held_body_bytes = 0
        self._queue: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="admission")
        self.processes = processes
        #: The worker processes, started by :meth:`start` or the first verdict.
        self._pool: WorkerPool | None = None
        #: Their start in a thread, while one is under way (:meth:`_ready_pool`).
        self._starting: asyncio.Task[WorkerPool] | None = None
        if budget <= 0 or lag_budget <= 0:
            raise ValueError("budget and lag_budget must be positive")
        self.budget = budget
        self.lag_budget = lag_budget
        #: Smoothed seconds the loop's lag timer fired late (:meth:`watch_lag`).
        self._lag = 0.0
        #: Whether :meth:`watch_lag` was called; when the lag timer is due, while it runs; its
        #: handle.
        self._watching = False
        self._due: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._clock = clock
        #: Work submitted to the pool and not finished.
        self._pending = 0
        #: Smoothed seconds between completions while work was pending: the pool's pace.
        self._pace = 0.0
        #: When the last completion was, or when the pool last became busy, whichever is later.
        self._mark = 0.0

    @property
    def waiting(self) -> int:
        """Reviews waiting for room now."""
        return len(self._queue)

    @property
    def free(self) -> int:
        """Units of room free now."""
        return self._free

    @property
    def receiving(self) -> int:
        """Reviews whose body is being received, or received and waiting for room."""
        return self._receiving

    @property
    def held_body_bytes(self) -> int:
        """Bytes the bodies of those reviews hold."""
        return self._held_body_bytes

    def now(self) -> float:
        """The capacity's clock (monotonic seconds): what :meth:`slot`'s ``started`` is read on."""
        return self._clock()

    def shed_unread(self) -> None:
        """Shed a review before its body is read, when that is already the answer: the loop runs
        behind (``LoopLag``) or the queue is full (``QueueFull``), both 429.

        Reading the body is what a trickling sender stretches, so room is taken after it
        (:meth:`receive`, then :meth:`slot`); but shedding needs no body, and a loop that is
        behind gains most from a review it need not read. The loop's lag is judged here only,
        not again once the body is in: receiving large bodies is itself what makes the loop
        lag (their TLS records are decrypted on it), and a review shed then has cost its read
        for nothing. The first review after an idle spell starts the lag timer and is never
        refused by it.
        """
        if self._lag_timer_running():
            self._refuse_when_behind()
        if self._queue and len(self._queue) >= self.max_queued:  # it would wait, and cannot
            raise self._queue_full()

    def _lag_timer_running(self) -> bool:
        """Whether the lag timer runs; if not, it is started now (when watched)."""
        if self._timer is not None:
            return True
        if self._watching:
            self._schedule_lag_timer()
        return False

    @contextlib.asynccontextmanager
    async def receive(self) -> AsyncIterator[BodyReceipt]:
        """Account for one review's body from its first byte until it has room: the receipt's
        :meth:`~BodyReceipt.take` adds bytes as they arrive, :meth:`~BodyReceipt.release` (once
        room is granted, or when this ends) gives them back. While held, the loop's lag is
        read as for a review in room.
        """
        receipt = BodyReceipt(self)
        self._receiving += 1
        try:
            yield receipt
        finally:
            receipt.release()

    def _take_body_bytes(self, count: int) -> None:
        held = self._held_body_bytes + count
        if held > self.body_bytes:
            ADMISSION_SHED.labels("BodyBytes").inc()
            raise Overloaded(
                429,
                "BodyBytes",
                "webhook overloaded: request bodies being received or waiting for room would hold "
                f"{_size(held)} (budget {_size(self.body_bytes)}); retry shortly",
            )
        self._held_body_bytes = held

    def _give_body_bytes(self, count: int) -> None:
        self._held_body_bytes -= count
        self._receiving -= 1

    def cost(self, body_bytes: int) -> int:
        """Units a review with a body of ``body_bytes`` takes (at most all of them)."""
        return min(self.units, 1 + max(body_bytes, 0) // self.unit_bytes)

    @contextlib.asynccontextmanager
    async def slot(
        self, timeout: float, body_bytes: int = 0, *, started: float | None = None
    ) -> AsyncIterator[None]:
        """Hold room for one review while it is worked on, first come first served.

        ``timeout`` is the review's own (:func:`request_timeout`), ``body_bytes`` its size,
        ``started`` when the review arrived on :meth:`now`'s clock (now by default): receiving
        its body and waiting for room share one deadline, ``queue_share x timeout`` from then.

        :raises Overloaded: the queue is full (429), or no room came by the deadline (503).
        """
        self._lag_timer_running()
        at = (self._clock() if started is None else started) + timeout * self.queue_share
        due = _DUE.set((at, timeout))
        try:
            async with self._room(timeout, body_bytes, at):
                yield
        finally:
            _DUE.reset(due)

    @contextlib.asynccontextmanager
    async def _room(self, timeout: float, body_bytes: int, at: float) -> AsyncIterator[None]:
        cost = self.cost(body_bytes)
        if self._queue or self._free < cost:
            await self._wait(cost, timeout, at)
        else:
            self._free -= cost
        ADMISSION_IN_FLIGHT.inc()
        try:
            yield
        finally:
            ADMISSION_IN_FLIGHT.dec()
            self._release(cost)

    def lag(self) -> float:
        """Seconds the event loop runs behind: the smoothed lateness of its lag timer, or how
        overdue that timer is now when that is more (the loop is in a long iteration). 0 while
        nothing watches (:meth:`watch_lag`)."""
        if self._due is None:
            return 0.0
        return max(self._lag, self._clock() - self._due)

    def watch_lag(self) -> None:
        """Read the running event loop's lag from now on, while reviews are worked on: a timer
        every :data:`LAG_INTERVAL`, whose lateness is smoothed over about four readings. The
        timer runs from the first review after an idle spell until it finds no review held
        (an idle operator does not wake 200 times a second for it). :meth:`stop` ends it."""
        self._watching = True

    def _schedule_lag_timer(self) -> None:
        self._due = self._clock() + LAG_INTERVAL
        self._timer = asyncio.get_running_loop().call_later(LAG_INTERVAL, self._lag_timer)

    def _lag_timer(self) -> None:
        assert self._due is not None
        # One reading counts as at most twice the budget, as one stalled piece of work does
        # for the pool's pace: a single long pause (a large body decoding, which holds the
        # interpreter lock) is over when the timer reads it, and shedding the reviews behind
        # it sends them to the API server's retry a second later instead of answering them
        # after the pause; a loop that stays behind is still shed from the third late reading.
        late = min(max(0.0, self._clock() - self._due), 2 * self.lag_budget)
        self._lag = LAG_WEIGHT * late + (1 - LAG_WEIGHT) * self._lag
        if self._free < self.units or self._queue or self._receiving:
            self._schedule_lag_timer()
        else:  # nothing held: no review waits behind the loop; the next one starts it again
            self._timer = self._due = None
            self._lag = 0.0

    def _refuse_when_behind(self) -> None:
        """Shed a review before anything is done for it while the loop runs behind."""
        lag = self.lag()
        if lag > self.lag_budget:
            ADMISSION_SHED.labels("LoopLag").inc()
            raise Overloaded(
                429,
                "LoopLag",
                f"webhook overloaded: it runs {1000 * lag:.0f} ms behind its requests "
                f"(budget {1000 * self.lag_budget:.0f} ms); retry shortly",
            )

    def _queue_full(self) -> Overloaded:
        ADMISSION_SHED.labels("QueueFull").inc()
        return Overloaded(
            429,
            "QueueFull",
            f"webhook overloaded: {len(self._queue)} reviews waiting; retry shortly",
        )

    async def _wait(self, cost: int, timeout: float, at: float) -> None:
        if len(self._queue) >= self.max_queued:
            raise self._queue_full()
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (cost, granted)
        self._queue.append(entry)
        budget = timeout * self.queue_share
        try:
            async with asyncio.timeout(max(0.0, at - self._clock())):
                await granted
        except BaseException as exc:
            if granted.done() and not granted.cancelled():
                self._release(cost)  # room was granted just as the wait ended: give it back
            else:
                granted.cancel()
                with contextlib.suppress(ValueError):  # already dropped by _grant
                    self._queue.remove(entry)
                self._grant()  # the reviews behind this one may fit now
            if isinstance(exc, TimeoutError):
                raise _queue_timeout("no capacity", budget, timeout) from None
            raise

    def _release(self, cost: int) -> None:
        self._free += cost
        self._grant()

    def _grant(self) -> None:
        """Hand room to the waiting reviews in order, as long as the first one fits."""
        while self._queue:
            cost, granted = self._queue[0]
            if granted.done():  # given up (cancelled) and not yet removed by its waiter
                self._queue.popleft()
                continue
            if cost > self._free:
                break
            self._queue.popleft()
            self._free -= cost
            granted.set_result(None)

    @property
    def pending(self) -> int:
        """Work submitted to the worker threads and processes and not finished."""
        return self._pending

    @property
    def pace(self) -> float:
        """Smoothed seconds the pool takes per piece of work while work is waiting (0 until a
        piece has finished)."""
        return self._pace

    def backlog(self) -> float:
        """Seconds new work submitted now waits before it starts: the completions it waits
        for, at the pool's pace. The pace is the interval between completions, so it already
        is the whole pool's, however many pieces run at once; with ``P`` worker processes, new
        work starts at once while fewer than ``P`` pieces are pending, and otherwise after
        ``pending - P + 1`` completions (threads share one interpreter lock: ``P`` is 1). An
        idle pool has none, so work is always admitted to it (and its pace measured again)
        whatever the last pace was."""
        return max(0, self._pending - max(1, self.processes) + 1) * self._pace

    def start(self) -> None:
        """Start the worker processes now rather than on the first verdict (blocking, about half
        a second the first time: call it from a thread, or before serving)."""
        if self.processes and self._pool is None:
            self._pool = self._started_pool()

    async def run(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
        """``fn(*args, **kwargs)`` in a worker process (a thread when :attr:`processes` is 0),
        awaited from the event loop. ``fn`` and its arguments are pickled: a module-level
        function of plain data.

        :raises Overloaded: 429 (``Backlog``) at once when more than :attr:`budget` seconds
            of work are ahead of it (:meth:`backlog`); 503 (``QueueTimeout``) when, within a
            review's :meth:`slot`, the answer is not ready within ``queue_share`` of the
            review's timeout (the task is dropped if no worker took it yet); 503
            (``WorkerLost``) when the worker process running it ended.
        """
        if not self.processes:
            return await self.run_here(fn, *args, **kwargs)
        self._admit()
        pool = await self._ready_pool()
        try:
            return await self._submit(lambda: self._in_time(pool.submit(fn, args, kwargs)))
        except BrokenProcessPool as exc:
            if self._pool is pool:  # the first review to see it replaces the pool
                logger.warning("An admission worker process ended (%s); starting new ones", exc)
                self._pool = None
                pool.close()
            raise _worker_lost("webhook worker process ended during the review") from None

    async def _in_time(self, answer: Awaitable[T]) -> T:
        """``answer``, or a 503 once the review's time in this server is up: the backlog rule
        judges work by the workers' recent pace, which says nothing of a first-sight spec that
        takes seconds, and an answer after the API server's timeout reaches no one (its webhook
        client has given up and retries, or applies ``failurePolicy``). The cancelled task is
        skipped if it still waits for a worker; one already running finishes unheard."""
        due = _DUE.get()
        if due is None:
            return await answer
        at, timeout = due
        try:
            async with asyncio.timeout(max(0.0, at - self._clock())):
                return await answer
        except TimeoutError:
            raise _queue_timeout(
                "the verdict was not ready", timeout * self.queue_share, timeout
            ) from None

    async def _ready_pool(self) -> WorkerPool:
        """The worker pool, started in a thread when there is none (at the first verdict, or
        after one died): starting forks from the fork server, and a fork server that died itself
        imports the memory model again, half a second the event loop must not wait. Reviews that
        arrive meanwhile wait for the same start.

        :raises Overloaded: 503 (``WorkerLost``) when the processes could not be started.
        """
        if self._pool is not None:
            return self._pool
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_task(
                asyncio.to_thread(self._started_pool)
            )
        starting = self._starting
        try:
            pool = await asyncio.shield(starting)
        except Exception as exc:
            logger.error("The admission worker processes could not be started: %s", exc)
            raise _worker_lost(f"webhook worker processes could not start ({exc})") from None
        finally:
            if starting.done() and self._starting is starting:
                self._starting = None
        if self._pool is None:
            self._pool = pool
        elif self._pool is not pool:  # started meanwhile by start(): keep one
            pool.close()
        return self._pool

    def _started_pool(self) -> WorkerPool:
        pool = WorkerPool(self.processes)
        try:
            pool.start()
        except BaseException:
            pool.close()
            raise
        return pool

    async def run_here(self, fn: Callable[..., T], /, *args: object, **kwargs: object) -> T:
        """``fn(*args, **kwargs)`` in a worker thread of this process, awaited from the event
        loop: for work whose result must live here (a decoded body) or that cannot be pickled.

        :raises Overloaded: 429 (``Backlog``), as :meth:`run`.
        """
        self._admit()
        loop = asyncio.get_running_loop()
        return await self._submit(
            lambda: loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        )

    def _admit(self) -> None:
        """Refuse work that would wait longer than the budget (:meth:`backlog`)."""
        backlog = self.backlog()
        if backlog > self.budget:
            ADMISSION_SHED.labels("Backlog").inc()
            raise Overloaded(
                429,
                "Backlog",
                f"webhook overloaded: {self._pending} reviews ahead, about "
                f"{1000 * backlog:.0f} ms of work (budget {1000 * self.budget:.0f} ms); "
                "retry shortly",
            )

    async def _submit(self, work: Callable[[], Awaitable[T]]) -> T:
        """Await ``work()`` (a submission to the threads or processes) as pending work."""
        if self._pending == 0:
            self._mark = self._clock()  # the pool becomes busy: the next interval starts now
        self._pending += 1
        try:
            return await work()
        finally:
            self._finished()

    def _finished(self) -> None:
        """One piece of work done: the interval since the previous completion (or since the
        pool became busy) is one sample of the pool's pace."""
        now = self._clock()
        # One piece held far longer than the rest (a stalled read, a debugger) counts as twice
        # the budget: enough to shed while it holds the pool, not enough to keep shedding long
        # after it is gone.
        interval = min(max(0.0, now - self._mark), 2 * self.budget)
        self._pace = (
            interval
            if self._pace == 0.0
            else (PACE_WEIGHT * interval + (1 - PACE_WEIGHT) * self._pace)
        )
        self._mark = now
        self._pending -= 1

    def stop(self) -> None:
        """Stop the worker processes (queued work is dropped, running work finishes) and the
        reading of the loop's lag; a later verdict starts new processes."""
        self._watching = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._due = None
        self._lag = 0.0
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def close(self) -> None:
        """Stop the worker threads and processes for good (queued work is dropped; running
        work finishes)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.stop()


class BodyReceipt:
    """The bytes of one review's body received while it has no room
    (:meth:`AdmissionCapacity.receive`), counted against the capacity's ``body_bytes`` until
    released."""

    __slots__ = ("_capacity", "_open", "bytes")

    def __init__(self, capacity: AdmissionCapacity) -> None:
        self._capacity = capacity
        self._open = True
        #: Bytes taken so far.
        self.bytes = 0

    def take(self, count: int) -> None:
        """Add ``count`` bytes just received.

        :raises Overloaded: 429 (``BodyBytes``) when the bodies not yet in room would hold more
            than the capacity's bound; the bytes are not taken.
        """
        if self._open:
            self._capacity._take_body_bytes(count)
            self.bytes += count

    def release(self) -> None:
        """Give the bytes back: the review has room (its units account for the body from now
        on), or it ended. Once; later calls do nothing."""
        if self._open:
            self._open = False
            self._capacity._give_body_bytes(self.bytes)
            self.bytes = 0


def _size(count: int) -> str:
    return f"{count >> 10} KiB" if count < 1 << 20 else f"{count / (1 << 20):.3g} MiB"
