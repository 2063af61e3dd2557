"""Measurement slots: who may start a measurement Job now, and who waits in the queue.

At most ``--max-concurrent-measurements`` Jobs run at once cluster-wide, and a namespace's
policy may cap its own (``maxConcurrentMeasurements``) and its GPU-seconds per UTC day
(``measurementGpuSecondsPerDay``, charged to a ledger no tenant can write). A measurement that
may not start waits in a fair queue (:class:`~gpu_sizer.measurement.queue.MeasurementQueue`),
its position in its status; a ResourceQuota that refuses a Job pauses its namespace for
``--quota-retry-seconds``. Namespaces whose Jobs go through a Kueue LocalQueue are Kueue's to
queue. The queue is rebuilt from the stored statuses on the first decision, so a restart keeps
the order.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpu_sizer import metrics
from gpu_sizer.api import GPUWorkloadStatus
from gpu_sizer.controller import kube
from gpu_sizer.controller.ledger_store import LedgerStore
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.policy_cache import PolicyCache
from gpu_sizer.controller.workloads import Key, WorkloadIndex
from gpu_sizer.lifecycle.step import QueueWait
from gpu_sizer.measurement import gpu_time
from gpu_sizer.measurement.backends import Backend
from gpu_sizer.measurement.ledger import Charge
from gpu_sizer.measurement.outcome import parse_time
from gpu_sizer.measurement.queue import Admission, MeasurementQueue

__all__ = ["POSITIONS_SHOWN", "Slots", "queued_since", "shown_position"]

#: Queue positions are written exactly up to this one; later entries say "over N", so a Job
#: that starts does not rewrite the status of every workload in a long queue.
POSITIONS_SHOWN = 10
#: Beyond POSITIONS_SHOWN, a position reads "over T" for the largest of these below it: an entry
#: deep in a long queue is rewritten only when it crosses one, not on every start ahead of it.
POSITION_STEPS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
#: Positions beyond POSITIONS_SHOWN are checked against the ones written at most this often:
#: the check walks the whole queue, and a decision that changes the queue comes every few
#: milliseconds while thousands of workloads arrive.
POSITION_SCAN_SECONDS = 1.0


class Slots:
    """The measurement queue, the slots held, the namespaces paused, and the GPU-second ledger.

    :param wake: marks a workload for a decision (the controller's work queue).
    :param client: the API client once the operator is connected (None before).
    """

    def __init__(
        self,
        opts: Options,
        backend: Backend,
        policy: PolicyCache,
        workloads: WorkloadIndex,
        wake: Callable[[Key], None],
        client: Callable[[], kube.Client | None],
    ) -> None:
        self._opts = opts
        self._backend = backend
        self._policy = policy
        self._workloads = workloads
        self._wake_one = wake
        self._client = client
        self.queue = MeasurementQueue(opts.max_concurrent_measurements or None)
        self._seeded = False
        #: Slots taken by admitted starts whose Job the backend does not list yet, by namespace.
        self._reserved: dict[str, int] = {}
        #: The queue position last written per waiting workload (see :func:`shown_position`).
        self._shown: dict[Key, tuple[bool, int]] = {}
        #: The pending check of the positions beyond POSITIONS_SHOWN, and when the last ran.
        self._scan: asyncio.TimerHandle | None = None
        self._scanned_at = 0.0
        #: Namespaces whose ResourceQuota refused a Job: monotonic time until which they wait.
        self._quota_blocked: dict[str, float] = {}
        #: The API server's words of the last quota refusal per namespace.
        self._quota_text: dict[str, str] = {}
        #: Namespaces whose daily measurement GPU-second budget is used up (last computed).
        self.budget_out: dict[str, gpu_time.BudgetState] = {}
        #: Each namespace's GPU-seconds of the day, where no tenant can write (None without an
        #: operator namespace: the budget then counts the live workloads' statuses only).
        self.ledger = (
            LedgerStore(opts.operator_namespace, opts.measurement_ledger)
            if opts.operator_namespace
            else None
        )
        self._gauged: set[str] = set()

    def stop(self) -> None:
        """Cancel the pending position check (operator shutdown)."""
        if self._scan is not None:
            self._scan.cancel()
            self._scan = None

    # ----------------------------------------------------------------------- admission

    def _seed(self) -> None:
        """Once, on the first decision: every workload whose stored status says Queued waits
        again from the time it entered the queue, so a restart keeps the order and loses no
        entry (the index is complete by then: kopf lists before the first event handler)."""
        if self._seeded:
            return
        self._seeded = True
        for key, body in self._workloads.all():
            since = queued_since(body.get("status"))
            if since is not None:
                self.queue.enter(key, since)

    def running(self) -> dict[str, int]:
        """Measurement Jobs holding a slot per namespace (reservations included); namespaces
        whose Jobs go through a Kueue LocalQueue are Kueue's to count, not ours."""
        running = {
            ns: n
            for ns, n in self._backend.live_jobs().items()
            if self._policy.kueue_queue(ns) is None
        }
        for ns, n in self._reserved.items():
            running[ns] = running.get(ns, 0) + n
        return running

    def blocked(self) -> set[str]:
        """Namespaces offered no slot now: refused by their ResourceQuota a moment ago, or
        out of their daily measurement GPU-seconds (namespace policy)."""
        now = time.monotonic()
        for ns in [ns for ns, until in self._quota_blocked.items() if until <= now]:
            del self._quota_blocked[ns]
            self._quota_text.pop(ns, None)
        self.budget_out = self._budgets_out()
        return set(self._quota_blocked) | self.budget_out.keys()

    def quota_paused(self, namespace: str) -> bool:
        """Whether a quota refusal pauses ``namespace`` now."""
        return namespace in self._quota_blocked

    def quota_pause_left(self, namespace: str) -> float:
        """Seconds until the namespace's quota pause ends (0.1 at least)."""
        return max(0.1, self._quota_blocked.get(namespace, 0.0) - time.monotonic())

    def admit(
        self, key: Key, wanted: Iterable[str], stored: Mapping[str, Any], now: str
    ) -> tuple[QueueWait | None, bool]:
        """A decision starts a new measurement (Jobs ``wanted``): start it when a slot is free
        and no one is ahead, else hold it back. The reason it waits (None: it starts), and
        True when a slot was reserved (:meth:`release` it once its Job is created)."""
        self._seed()
        if self._policy.kueue_queue(key[0]) is not None:
            # Kueue queues this namespace's Jobs (created suspended): not our queue's business.
            self.dequeue(key)
            return None, False
        names = set(wanted)
        if any(
            j.name in names and not j.deleting and not j.finished for j in self._backend.jobs(*key)
        ):
            # Started by an earlier decision whose status write did not land (a kill, a 5xx):
            # it holds its slot already (it counts as running). Adopt it; queued again, it
            # would be deleted as unwanted and created once more when its turn came.
            self.dequeue(key)
            return None, False
        self.queue.enter(key, queued_since(stored) or now)
        # Its namespace's gauges exist from now on (0 when nothing waits or runs), even when
        # its Job starts and finishes between two gauge updates.
        self._gauged.add(key[0])
        verdict = self.queue.admit(key, self.running(), self._policy.limit_of, self.blocked())
        if verdict.admitted:
            self.queue.leave(key)
            self._shown.pop(key, None)
            self._reserved[key[0]] = self._reserved.get(key[0], 0) + 1
            return None, True
        return self._wait(key, verdict), False

    def quota_refused(self, key: Key, text: str, stored: Mapping[str, Any], now: str) -> QueueWait:
        """A ResourceQuota refused the measurement Job (the API's words ``text``): the
        workload waits in the queue (in its place) and its namespace is offered no slot for
        ``--quota-retry-seconds``; the measurement has not failed."""
        namespace = key[0]
        self._quota_blocked[namespace] = time.monotonic() + self._opts.quota_retry_seconds
        self._quota_text[namespace] = text
        self.queue.enter(key, queued_since(stored) or now)
        verdict = self.queue.admit(key, self.running(), self._policy.limit_of, self.blocked())
        return self._wait(key, verdict)

    def _wait(self, key: Key, verdict: Admission) -> QueueWait:
        over, shown = self._shown[key] = shown_position(verdict.position)
        budget = self.budget_out.get(key[0])
        return QueueWait(
            position=shown,
            over=over,
            reason=verdict.reason,
            quota_text=self._quota_text.get(key[0]),
            quota_retry_seconds=self._opts.quota_retry_seconds,
            namespace_limit=self._policy.limit_of(key[0]),
            cap=self.queue.cap,
            budget=budget.message(key[0]) if budget is not None else None,
        )

    def release(self, namespace: str) -> None:
        """Give back the slot :meth:`admit` reserved (its Job is listed now, or not created)."""
        left = self._reserved.get(namespace, 0) - 1
        if left > 0:
            self._reserved[namespace] = left
        else:
            self._reserved.pop(namespace, None)

    def dequeue(self, key: Key) -> None:
        """``key`` waits no more (it starts, it settled, it is gone)."""
        self.queue.leave(key)
        self._shown.pop(key, None)

    # ----------------------------------------------------------------------- GPU-seconds

    async def charge_ledger(self, namespace: str, job_uid: str, seconds: int) -> None:
        """Charge ``seconds`` GPU-seconds of the Job ``job_uid`` to ``namespace`` in the ledger
        (and write the charges that did not land before); a failed write stays pending and
        counts against the budget meanwhile (see :mod:`gpu_sizer.controller.ledger_store`)."""
        client = self._client()
        if self.ledger is None or client is None:
            return
        if seconds > 0:
            now = datetime.datetime.now(datetime.UTC)
            self.ledger.charge(namespace, Charge(job_uid, gpu_time.day_of(now), seconds))
        await self.ledger.flush(client, namespace)

    def ledger_pending(self, namespace: str) -> bool:
        """Whether charges of ``namespace`` wait to be written to the ledger."""
        return self.ledger is not None and self.ledger.pending(namespace)

    async def read_ledger(self) -> None:
        """Read the ledger once (the first decision after a start): the namespaces' charges of
        the day survive the restart."""
        client = self._client()
        if self.ledger is not None and client is not None and not self.ledger.loaded:
            await self.ledger.load(client)

    def budget_frees_in(self, namespace: str) -> float | None:
        """Seconds until the namespace's used-up GPU-second budget frees (None: it is not
        used up, or says no time)."""
        state = self.budget_out.get(namespace)
        if state is None:
            return None
        frees = parse_time(state.frees_at)
        if frees is None:
            return None
        return (frees - datetime.datetime.now(datetime.UTC)).total_seconds()

    def _budgets_out(self) -> dict[str, gpu_time.BudgetState]:
        """The namespaces with waiting measurements whose daily GPU-second budget is used up,
        from their workloads' statuses (see :mod:`gpu_sizer.measurement.gpu_time`)."""
        limits = {
            ns: limit
            for ns in self.queue.waiting_by_namespace()
            if (limit := self._policy.gpu_seconds_limit(ns)) is not None
        }
        if not limits:
            return {}
        now = datetime.datetime.now(datetime.UTC)
        out: dict[str, gpu_time.BudgetState] = {}
        for ns, limit in limits.items():
            charged = self.ledger.used(ns, now) if self.ledger is not None else 0
            state = gpu_time.budget_state(self._statuses(ns), limit, now, charged)
            metrics.MEASUREMENT_GPU_SECONDS_TODAY.labels(ns).set(state.used)
            if state.exhausted:
                out[ns] = state
        return out

    def _statuses(self, namespace: str) -> Iterable[GPUWorkloadStatus]:
        """The readable statuses of the workloads of ``namespace`` (newest known state)."""
        for key in [
            k for k in self._workloads.known() if isinstance(k, tuple) and k[0] == namespace
        ]:
            view = self._workloads.status_view(key, gpu_time.charge_view)
            if view is not None:
                yield view

    # ----------------------------------------------------------------------- positions

    def wake(self) -> None:
        """Offer free slots to the entries first in fair order, and have the entries whose
        shown position moved write their new one: at once for the first
        :data:`POSITIONS_SHOWN` (and the one after), within :data:`POSITION_SCAN_SECONDS` for
        the others (a stepped position rarely changes; checking it walks the whole queue)."""
        if len(self.queue):
            running = self.running()
            blocked = self.blocked()
            limit_of = self._policy.limit_of
            for key in self.queue.startable(running, limit_of, blocked):
                self._wake_one(key)
            head = self.queue.positions(running, limit_of, blocked, first=POSITIONS_SHOWN + 1)
            self._reposition(head)
            if len(self.queue) > len(head) and self._scan is None:
                loop = asyncio.get_running_loop()
                delay = self._scanned_at + POSITION_SCAN_SECONDS - time.monotonic()
                self._scan = loop.call_later(max(0.0, delay), self._scan_positions)
        self._gauge()

    def _scan_positions(self) -> None:
        """Check every waiting entry's written position (see :meth:`wake`)."""
        self._scan = None
        self._scanned_at = time.monotonic()
        if len(self.queue):
            ranked = self.queue.positions(self.running(), self._policy.limit_of, self.blocked())
            self._reposition(ranked)

    def _reposition(self, ranked: Iterable[Key]) -> None:
        """Reconcile the entries of ``ranked`` (the fair order from position 1) whose written
        position differs from their place in it."""
        for position, key in enumerate(ranked, 1):
            if self._shown.get(key) != shown_position(position):
                self._wake_one(key)

    def _gauge(self) -> None:
        waiting = self.queue.waiting_by_namespace()
        running = self._backend.live_jobs()
        for ns in self._gauged | waiting.keys() | running.keys():
            metrics.MEASUREMENT_QUEUE_LENGTH.labels(ns).set(waiting.get(ns, 0))
            metrics.MEASUREMENTS_RUNNING.labels(ns).set(running.get(ns, 0))
        self._gauged |= waiting.keys() | running.keys()


def shown_position(position: int) -> tuple[bool, int]:
    """How a queue position is written: exactly up to :data:`POSITIONS_SHOWN` (False, n), else
    "over T" (True, T) for the largest step T of :data:`POSITION_STEPS` below it."""
    if position <= POSITIONS_SHOWN:
        return False, position
    return True, max(t for t in POSITION_STEPS if t < position)


def queued_since(status: Any) -> str | None:
    """When the stored status entered the measurement queue (its Queued condition's
    transition time); None when it is not queued."""
    if not isinstance(status, Mapping):
        return None
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Measured":
            if cond.get("reason") == "Queued" and cond.get("status") == "False":
                return str(cond.get("lastTransitionTime") or "")
            return None
    return None
