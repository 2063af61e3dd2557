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

import gc
import hashlib
import logging
import logging.handlers
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
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
    takes other arguments than its message cannot be unpickled). ``concurrent.futures`` would
    then report the pool itself as broken, fail every review in it, and the real error would be
    logged nowhere; this carries its type and message instead, and the worker's traceback as its
    cause (``concurrent.futures.process._RemoteTraceback``)."""


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


class WorkerPool:
    """``processes`` worker processes and the relay of their log records.

    :param processes: how many (at least 1).
    :raises ValueError: fewer than one.
    """

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError("a worker pool needs at least one process")
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(PRELOAD))
        self.processes = processes
        self._records: Any = context.Queue()
        threading.Thread(
            target=_relay, args=(self._records,), name="admission-worker-logs", daemon=True
        ).start()
        level = logging.getLogger("gpu_sizer").getEffectiveLevel()
        self.executor = ProcessPoolExecutor(
            max_workers=processes,
            mp_context=context,
            initializer=_initialize,
            initargs=(self._records, level),
        )

    def start(self) -> list[int]:
        """Start every worker now and wait until each answers (blocking: the first start of the
        fork server imports :data:`PRELOAD`, about half a second). Returns their process ids.

        A pool starts one process per task submitted while none is idle, so ``processes``
        tasks submitted at once start all of them.
        """
        futures = [self.executor.submit(ready) for _ in range(self.processes)]
        return [f.result(timeout=START_TIMEOUT) for f in futures]

    def close(self) -> None:
        """Stop the workers (queued work is dropped, running work finishes) and the relay of
        their records, without waiting for either: it is called on the event loop.

        The relay ends when it reads the ``None`` sent here, after the records sent before it.
        Nothing here joins it: a worker killed while it held the queue's write lock (the kernel's
        OOM killer mid-record) leaves that lock taken for good, the ``None`` is then never
        written, and a join would stop the event loop with it; the relay thread, a daemon, stays
        waiting instead.
        """
        self.executor.shutdown(wait=False, cancel_futures=True)
        self._records.put_nowait(None)
