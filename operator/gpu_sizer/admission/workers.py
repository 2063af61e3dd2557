"""The processes the webhook's verdicts are computed in, and what crosses over to them.

A verdict is pure Python: parsing the spec, the memory model, the search for fixes (0.1-1 ms for
an LLM or training spec, milliseconds for a diffusion pipeline seen for the first time). In a
thread of the operator's process it holds the interpreter lock, and the event loop, which needs
the lock back after every socket call, waits up to a switch interval each time: with two
threads computing, a 2 ms timer of the loop ran 10-25 ms late (docs/benchmarks.md, "Threads and
the interpreter lock"), so a review shed with 429 took 80 ms to several seconds to be told so,
and every kopf handler, watch and health probe of the operator waited as long. In worker
processes the verdicts run beside the event loop, not instead of it: the loop only decodes,
looks answers up and hands work over.

The processes are started by the ``forkserver`` method (:mod:`multiprocessing`), preloaded with
the verdict modules (:data:`PRELOAD`): a new worker is a fork of a small server process that has
imported them once, so it starts in milliseconds and shares their memory copy-on-write. Not
``fork``: the operator's process runs threads (kopf's, the API client's), and a fork copies the
locks they hold at that instant, which can deadlock the child; Python 3.14 made ``forkserver``
the default on Linux for that reason (``multiprocessing`` docs, "Contexts and start methods").

What crosses over is small: the spec mapping as the API server sent it, the namespace, the
effective policy (a few hundred bytes pickled) and, for pod reviews, the pod and its GPUWorkload.
The GPU catalog, 20 KB and 0.1 ms to pickle as models, crosses as a :class:`Shipped` value:
pickled once in this process, unpickled once per worker, by digest.

Log records of a worker (a sizing failure is logged where it happens) are sent back through a
queue and handled by the operator's own loggers (:class:`logging.handlers.QueueHandler` in the
worker, a relay thread here), so they keep its format and level. An exception a worker raises
comes back as itself, or as :class:`WorkerError` when it would not survive unpickling.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import hashlib
import logging
import logging.handlers
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Final, Generic, TypeVar

from gpu_sizer.admission import pods, verdict
from gpu_sizer.admission.pod_gpus import ClaimGpus
from gpu_sizer.admission.pods import PodAnswer
from gpu_sizer.admission.verdict import Answer
from gpu_sizer.catalog import GPUClass
from gpu_sizer.policy.namespace import EffectivePolicy, PodEnforcement

__all__ = [
    "NICENESS",
    "PRELOAD",
    "PROCESSES",
    "START_TIMEOUT",
    "RemoteTraceback",
    "Shipped",
    "WorkerError",
    "WorkerPool",
    "call",
    "ready",
    "review",
    "review_pod",
]

T = TypeVar("T")

#: Worker processes the webhook computes verdicts in (``--webhook-workers``). Two: one computes
#: while the other's review is handed over; the operator pod requests a tenth of a core and a
#: cluster's admission rate is bursts of a few hundred reviews at most, most answered from
#: memory (:mod:`gpu_sizer.admission.answers`). With the fork server they hold about 97 MiB
#: (proportional set size, docs/benchmarks.md).
PROCESSES: Final = 2
#: Modules the fork server imports before it forks a worker: everything a verdict needs.
PRELOAD: Final = ("gpu_sizer.admission.workers",)
#: Niceness added to each worker (:func:`os.nice`): when the cores are busy, the event loop that
#: answers from memory and sheds with 429 runs before the verdicts do. Under CFS a process at
#: nice 10 weighs 110 against 1024 at nice 0 (``kernel/sched/core.c``, ``sched_prio_to_weight``),
#: so a burst of verdicts cannot keep the loop from the CPU; on idle cores it changes nothing.
#: Raising one's own niceness needs no privilege.
NICENESS: Final = 10
#: Seconds :meth:`WorkerPool.start` waits for each worker to answer (the first start imports the
#: memory model in the fork server: about half a second on an idle core).
START_TIMEOUT: Final = 120.0
#: Shipped values a process keeps unpickled (a catalog is replaced a few times in a lifetime).
MAX_SHIPPED: Final = 8

_received: dict[str, Any] = {}


@dataclass(frozen=True)
class Shipped(Generic[T]):
    """A value sent to worker processes as its pickle, unpickled there once (by digest).

    :param blob: the value pickled (:meth:`of` makes it).
    """

    blob: bytes = field(repr=False)
    digest: str = ""

    @classmethod
    def of(cls, value: T) -> Shipped[T]:
        blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        return cls(blob, hashlib.sha256(blob).hexdigest())

    def value(self) -> T:
        """The value, unpickled on the first call in this process and kept."""
        found = _received.get(self.digest)
        if found is None:
            if len(_received) >= MAX_SHIPPED:
                _received.clear()
            found = _received[self.digest] = pickle.loads(self.blob)
        return found  # type: ignore[no-any-return]


def review(
    spec_doc: Any,
    *,
    namespace: str,
    policy: EffectivePolicy,
    catalog: Shipped[Sequence[GPUClass]],
) -> Answer:
    """:func:`gpu_sizer.admission.verdict.review` with a shipped catalog."""
    return verdict.review(spec_doc, namespace=namespace, policy=policy, catalog=catalog.value())


def review_pod(
    pod: Mapping[str, Any],
    namespace: str,
    workload: Mapping[str, Any] | None,
    *,
    enforcement: PodEnforcement,
    catalog: Shipped[Sequence[GPUClass]],
    lookup_error: str | None = None,
    claims: Sequence[ClaimGpus] = (),
) -> PodAnswer:
    """:func:`gpu_sizer.admission.pods.review_pod` with a shipped catalog."""
    return pods.review_pod(
        pod,
        namespace,
        workload,
        enforcement=enforcement,
        catalog=catalog.value(),
        lookup_error=lookup_error,
        claims=claims,
    )


def ready() -> int:
    """A worker's process id: the task :meth:`WorkerPool.start` waits on."""
    return os.getpid()


def _initialize(records: Any, level: int) -> None:
    """Set up a new worker: its log records go to the operator's queue; it yields the CPU to
    the event loop (:data:`NICENESS`); Ctrl-C in a terminal is the operator's to handle (it
    stops the pool); the preloaded modules are moved out of the cyclic collector's reach
    (:func:`gc.freeze`), which also keeps collections from writing to the pages shared with the
    fork server."""
    os.nice(NICENESS)
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(records)]
    root.setLevel(level)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()


class WorkerError(Exception):
    """An exception a worker raised that would not survive the way back (one whose constructor
    takes other arguments than its message cannot be unpickled). Unpickled here, it would fail
    the answer itself and the real error would be reported nowhere; this carries its type and
    message instead, and the worker's traceback as its cause (:class:`RemoteTraceback`)."""


def call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)`` in a worker, with an exception that cannot be unpickled in the
    operator's process raised as :class:`WorkerError`."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        try:
            pickle.loads(pickle.dumps(exc))
        except Exception:
            raise WorkerError(f"{type(exc).__name__}: {exc}") from exc
        raise


def _relay(records: Any) -> None:
    """Handle the workers' log records in this process, each by the logger of its name, until
    the ``None`` that :meth:`WorkerPool.close` sends; then close the queue (the reader's end is
    this thread's to close: closed under it, a read fails)."""
    while True:
        try:
            record = records.get()
        except (EOFError, OSError):  # every writer gone
            return
        if record is None:
            records.close()
            return
        logging.getLogger(record.name).handle(record)


class RemoteTraceback(Exception):
    """A worker's formatted traceback, set as the cause of the exception it raised."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _serve(conn: Connection, records: Any, level: int) -> None:
    """A worker's life: tell its process id, then answer one task at a time until the
    operator closes its end of the pipe. A task is ``(fn, args, kwargs)`` pickled; the answer
    ``(True, result, None)`` or ``(False, exception, traceback)``, one message each."""
    _initialize(records, level)
    conn.send_bytes(pickle.dumps(os.getpid()))
    while True:
        try:
            task = conn.recv_bytes()
        except (EOFError, OSError):  # the operator closed the pool, or is gone
            return
        try:
            fn, args, kwargs = pickle.loads(task)
            answer: tuple[bool, Any, str | None] = (True, call(fn, args, kwargs), None)
        except Exception as exc:
            answer = (False, exc, traceback.format_exc())
        try:
            blob = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a result that does not pickle
            blob = pickle.dumps(
                (False, WorkerError(f"{type(exc).__name__}: {exc}"), traceback.format_exc())
            )
        try:
            conn.send_bytes(blob)
        except OSError:
            return


@dataclass
class _Worker:
    """One worker process, the operator's end of its pipe and the task it holds."""

    process: Any
    conn: Connection
    busy: asyncio.Future[Any] | None = None


class WorkerPool:
    """``processes`` worker processes, the tasks waiting for one, and the relay of their log
    records.

    Each worker has a pipe of its own, read by the event loop itself (``loop.add_reader``): a
    task is written to an idle worker's pipe as it is submitted, and its answer read when the
    pipe turns readable, so a verdict costs the event loop's process two pipe writes and two
    reads. Not :class:`concurrent.futures.ProcessPoolExecutor`: it moves every task through a
    feeder thread and a result thread that take the interpreter lock from the event loop, and
    wakes its manager thread through a third pipe per submission, which took about a sixth of
    the operator process's CPU under load (docs/benchmarks.md, "Worker processes"). A worker
    takes one task at a time; the rest wait here, in order, and never in a pipe, so a write
    never waits for a busy worker (a task larger than the pipe's buffer, a pod review of
    megabytes, waits only for the idle worker to read it).

    :param processes: how many (at least 1).
    :raises ValueError: fewer than one.
    """

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError("a worker pool needs at least one process")
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(list(PRELOAD))
        self.processes = processes
        self._records: Any = self._context.Queue()
        threading.Thread(
            target=_relay, args=(self._records,), name="admission-worker-logs", daemon=True
        ).start()
        self._level = logging.getLogger("gpu_sizer").getEffectiveLevel()
        self._workers: list[_Worker] = []
        self._waiting: collections.deque[tuple[bytes, asyncio.Future[Any]]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Why the pool can take no more work (a worker ended, or it was closed), once it can't.
        self.broken: str | None = None

    def start(self) -> list[int]:
        """Start every worker now and wait until each answers (blocking: the first start of the
        fork server imports :data:`PRELOAD`, about half a second). Returns their process ids.

        :raises TimeoutError: a worker did not answer within :data:`START_TIMEOUT` seconds.
        :raises EOFError: a worker ended before it answered.
        """
        for _ in range(self.processes - len(self._workers)):
            mine, theirs = self._context.Pipe(duplex=True)
            process = self._context.Process(
                target=_serve,
                args=(theirs, self._records, self._level),
                name="gpu-sizer-admission-worker",
                daemon=True,
            )
            process.start()
            theirs.close()
            self._workers.append(_Worker(process, mine))
        pids = []
        for worker in self._workers:
            if not worker.conn.poll(START_TIMEOUT):
                raise TimeoutError(f"an admission worker did not start in {START_TIMEOUT:g} s")
            pids.append(pickle.loads(worker.conn.recv_bytes()))
        return pids

    def submit(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> asyncio.Future[Any]:
        """``fn(*args, **kwargs)`` in a worker, as a future of the running event loop (the loop
        this pool serves from its first submission on).

        :raises BrokenProcessPool: the pool can take no work (:attr:`broken`); the future
            fails with it when the worker running the task ends.
        :raises pickle.PicklingError: (or what pickling raises) for arguments that do not pickle.
        """
        if self.broken is not None:
            raise BrokenProcessPool(self.broken)
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            for worker in self._workers:
                loop.add_reader(worker.conn.fileno(), self._readable, worker)
        task = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        future: asyncio.Future[Any] = loop.create_future()
        idle = next((w for w in self._workers if w.busy is None), None)
        if idle is None:
            self._waiting.append((task, future))
        else:
            self._send(idle, task, future)
        return future

    def _send(self, worker: _Worker, task: bytes, future: asyncio.Future[Any]) -> None:
        worker.busy = future
        try:
            worker.conn.send_bytes(task)
        except OSError:  # the worker is gone: its pipe's reader reports it
            self._lost(worker)

    def _readable(self, worker: _Worker) -> None:
        """A worker's answer, or the end of its pipe (the worker ended)."""
        try:
            blob = worker.conn.recv_bytes()
        except (EOFError, OSError):
            self._lost(worker)
            return
        future, worker.busy = worker.busy, None
        try:
            ok, value, remote = pickle.loads(blob)
        except Exception as exc:  # an answer that pickles but does not unpickle
            ok, value, remote = False, WorkerError(f"{type(exc).__name__}: {exc}"), None
        if future is not None and not future.done():
            if ok:
                future.set_result(value)
            else:
                if remote:
                    value.__cause__ = RemoteTraceback(remote)
                future.set_exception(value)
        while self._waiting and worker.busy is None:
            task, waiting = self._waiting.popleft()
            if not waiting.done():  # not given up meanwhile
                self._send(worker, task, waiting)

    def _lost(self, worker: _Worker) -> None:
        """A worker ended: the pool takes no more work and every task in it fails (the
        capacity starts a new pool for the next review)."""
        self._fail(f"admission worker process {worker.process.pid} ended")

    def _fail(self, why: str) -> None:
        """Take no more work, close every pipe (each worker then exits) and fail every task."""
        if self.broken is not None:
            return
        self.broken = why
        futures = [w.busy for w in self._workers] + [f for _, f in self._waiting]
        self._waiting.clear()
        for worker in self._workers:
            worker.busy = None
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(worker.conn.fileno())
            worker.conn.close()
        for future in futures:
            if future is not None and not future.done():
                future.set_exception(BrokenProcessPool(self.broken))

    def close(self) -> None:
        """Stop the workers and the relay of their records, without waiting for either: called
        on the event loop the pool serves (or before it served one). Each worker reads the end
        of its pipe and exits once its current task is done; that task's review and the ones
        waiting fail with :class:`BrokenProcessPool`.

        The relay ends when it reads the ``None`` sent here, after the records sent before it.
        Nothing here joins it: a worker killed while it held the queue's write lock (the kernel's
        OOM killer mid-record) leaves that lock taken for good, the ``None`` is then never
        written, and a join would stop the event loop with it; the relay thread, a daemon, stays
        waiting instead.
        """
        self._fail("the admission worker pool was closed")
        self._records.put_nowait(None)
