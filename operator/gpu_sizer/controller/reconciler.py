"""Reconcile one GPUWorkload: decide from everything known, act on Jobs, write the status once.

Level-triggered, as Kubernetes controllers are: every event about a workload (its own object,
its measurement Job, the Job's pods, a GPU node joining) only marks the workload in the
:class:`~gpu_sizer.controller.workqueue.WorkQueue`; :meth:`Reconciler.reconcile` then reads the
latest state and runs the pure decision (:func:`gpu_sizer.lifecycle.decide`). Nothing polls: a
measurement is followed through its Job's and pods' watch events, and the only timer is the
unschedulable deadline of a pod that waits for a node.

What a decision rests on (issue 13):

- **Confirmed state.** The watch lags behind the operator's own writes. The workload's status
  is taken from the operator's last status write until the watch has caught up with it (by
  ``resourceVersion``), and Jobs from the backend's overlay of its own creations and deletions
  (:class:`~gpu_sizer.measurement.backends.KubernetesJobBackend`); pods are matched to their Job
  by uid. Status writes carry the ``resourceVersion`` the decision was made on; a 409 means the
  object changed meanwhile, so the decision is made again from the fresh object, never re-sent.
- **Writes land.** A failed write (5xx, 429, timeout, conflict) fails the reconcile, and the
  queue retries the workload with growing backoff until the write lands or the object is gone.
- **Nothing written for nothing.** A status equal to the stored one is not written; the
  decision keeps transition times of unchanged conditions, so resuming over settled workloads
  costs a spec hash and a comparison each, and no API call.
- **At most one live Job.** Every unfinished Job of the workload other than the one its status
  names for the current spec is deleted, as are Jobs of a deleted (or re-created) workload of
  that name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from gpu_sizer import metrics
from gpu_sizer.api import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    CalibrationMode,
    GPUWorkloadSpec,
    GPUWorkloadStatus,
    InvalidWorkload,
    MeasurementStatus,
    Phase,
    parse_spec,
    spec_hash,
)
from gpu_sizer.api.record import (
    KEY_LABEL,
    RECORD_PLURAL,
    GPUMeasurement,
    RecordEstimate,
    RecordScope,
    build_record,
    effective_expiry,
    is_fresh,
    key_label,
    parse_record,
    record_name,
    record_names,
    reusable_by,
    shareable,
)
from gpu_sizer.api.times import rfc3339
from gpu_sizer.controller import kube
from gpu_sizer.controller.ledger_store import LedgerStore
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.workqueue import Requeue, WorkQueue
from gpu_sizer.inventory.dra import DraNode, claim_template, merge_inventory, parse_resource_slices
from gpu_sizer.inventory.nodes import GpuNode, IgnoredNode, Inventory, MigStrategy
from gpu_sizer.lifecycle import (
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
    decide,
    invalid_plan,
    queued_plan,
    starts_measurement,
)
from gpu_sizer.measurement import gpu_time
from gpu_sizer.measurement.backends import (
    Backend,
    BackendError,
    JobConflict,
    JobTerminating,
    JobView,
    QuotaExceeded,
)
from gpu_sizer.measurement.job import (
    ANNOTATION_WORKLOAD,
    ANNOTATION_WORKLOAD_NAMESPACE,
    ANNOTATION_WORKLOAD_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    JobRequest,
    host_memory_bytes,
    job_gpu_count,
    job_manifest,
    job_name,
    owner_uid,
)
from gpu_sizer.measurement.ledger import Charge
from gpu_sizer.measurement.outcome import (
    POD_RESULT_GRACE_SECONDS,
    Outcome,
    OutcomeKind,
    parse_time,
)
from gpu_sizer.measurement.queue import Admission, MeasurementQueue, QueueReason
from gpu_sizer.policy.namespace import (
    EffectivePolicy,
    MeasurementSharing,
    Policy,
    PolicyError,
    load_policy,
)
from gpu_sizer.records.calibration import Calibration, Sample, learn_calibration, sample_from_record
from gpu_sizer.records.checks import implausibilities
from gpu_sizer.records.sharing import (
    UNNAMED_JOB_GRACE_SECONDS,
    Reuse,
    Stale,
    Wait,
    candidate_keys,
    find_shared,
    remeasure_previous,
    restated,
    reuse_previous,
    reused_measurement,
    revalidation_due,
    stale,
    trusted_run,
    wait_until,
    waiting_plan,
)
from gpu_sizer.sizing.placement import for_strategy
from gpu_sizer.sizing.verdict import assess

__all__ = ["CompactWorkload", "Key", "Reconciler", "merge_patch", "slim_workload"]

Key = tuple[str, str]
T = TypeVar("T")
log = logging.getLogger("gpu_sizer.controller")

#: How long the operator's own status write stands in for a watch that has not shown it, when
#: resourceVersions cannot be ordered (they are opaque strings by contract; etcd's are integers).
WRITE_OVERLAY_SECONDS = 30.0
#: Retry delay while a Job of the wanted name is still being deleted.
TERMINATING_RETRY_SECONDS = 1.0
#: Retry delay after a Job name conflict with another object's Job (reported as an Event).
CONFLICT_RETRY_SECONDS = 60.0
#: Seconds between two full rebuilds of the calibration samples from the indexes (between them
#: the samples follow this process's own writes and the record watch).
CALIBRATION_REFRESH_SECONDS = 600.0
#: Seconds the labels of a namespace (for the namespace policy's measurement settings) are reused.
NAMESPACE_LABELS_TTL = 30.0
#: Queue positions are written exactly up to this one; later entries say "over N", so a Job
#: that starts does not rewrite the status of every workload in a long queue.
POSITIONS_SHOWN = 10
#: Beyond POSITIONS_SHOWN, a position reads "over T" for the largest of these below it: an entry
#: deep in a long queue is rewritten only when it crosses one, not on every start ahead of it.
POSITION_STEPS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
#: Positions beyond POSITIONS_SHOWN are checked against the ones written at most this often:
#: the check walks the whole queue, and a decision that changes the queue comes every few
#: milliseconds while thousands of workloads arrive (issue 17).
POSITION_SCAN_SECONDS = 1.0


def now_rfc3339() -> str:
    """Current UTC time, second precision, ``Z`` suffix (metav1.Time)."""
    return rfc3339(datetime.datetime.now(datetime.UTC))


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``: removed keys become None."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif before != value or key not in old:
            patch[key] = value
    return patch


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def slim_workload(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a decision reads of a GPUWorkload: identity, generation, resourceVersion, deletion,
    the raw spec and status (plain data, whatever their types: an object stored without the
    CRD's schema may hold a string as its spec; :func:`parse_spec` says so)."""
    meta = body.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "generation": meta.get("generation"),
            "resourceVersion": meta.get("resourceVersion"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": _plain(body.get("spec")),
        "status": _plain(body.get("status")),
    }


_META_FIELDS = ("name", "namespace", "uid", "generation", "resourceVersion", "deletionTimestamp")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON data")


class CompactWorkload(Mapping[str, Any]):
    """A GPUWorkload as the watch's index keeps it: what :func:`slim_workload` keeps, with the
    spec and the status held as compact JSON text and decoded when read.

    The index holds every workload for the operator's lifetime. As nested dicts a settled
    workload's spec and status took about 15 KiB (their JSON is about 4 KiB): 150 MiB at 10,000
    workloads (issue 17). A decision reads them once (:meth:`expand`, about 50 µs for both);
    encoding them on each watch event costs less than the deep copy it replaces.
    """

    __slots__ = ("_derived", "_meta", "_spec", "_status")

    def __init__(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        self._meta = tuple(meta.get(f) for f in _META_FIELDS)
        dump = json.JSONEncoder(separators=(",", ":"), default=_jsonable).encode
        self._spec = dump(body.get("spec"))
        self._status = dump(body.get("status"))
        self._derived: dict[Callable[[Any], Any], Any] | None = None

    def __getitem__(self, key: str) -> Any:
        if key == "metadata":
            return dict(zip(_META_FIELDS, self._meta, strict=True))
        if key == "spec":
            return json.loads(self._spec)
        if key == "status":
            return json.loads(self._status)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("metadata", "spec", "status"))

    def __len__(self) -> int:
        return 3

    def expand(self) -> dict[str, Any]:
        """The same as :func:`slim_workload` of the body it was made from (plain data)."""
        return {"metadata": self["metadata"], "spec": self["spec"], "status": self["status"]}

    def derive(self, view: Callable[[Any], T]) -> T:
        """``view(status)``, worked out once for this state (a watch event makes a new one)."""
        if self._derived is None:
            self._derived = {}
        if view not in self._derived:
            self._derived[view] = view(self["status"])
        result: T = self._derived[view]
        return result


def _newer(a: str | None, b: str | None) -> bool | None:
    """Whether resourceVersion ``a`` is newer than ``b``; None when they cannot be ordered."""
    if a and b and a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return None


@dataclass
class _Written:
    body: dict[str, Any]
    at: float


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class Reconciler:
    """The operator's controller: one queue, one decision per workload at a time.

    :meth:`attach` connects it to the running operator (API client, watch indexes); the kopf
    handlers in :mod:`gpu_sizer.controller.handlers` feed :attr:`queue`.
    """

    def __init__(self, opts: Options, backend: Backend, *, workers: int = 16) -> None:
        runner = "local probe" if opts.measurement_backend == "local" else "Job"
        self.opts = opts
        self.config = Config(
            catalog=opts.catalog,
            unschedulable_timeout_seconds=opts.unschedulable_timeout,
            runner=runner,
        )
        self.backend = backend
        self.queue: WorkQueue[Key] = WorkQueue(
            self.reconcile, workers=workers, on_error=self._failed
        )
        self._client: kube.Client | None = None
        self._workloads: Mapping[Any, Iterable[Mapping[str, Any]]] = {}
        self._nodes: dict[str, GpuNode | IgnoredNode] = {}
        self._present: frozenset[str] = frozenset()
        #: MIG classes the cluster's nodes offer under the ``mixed`` strategy (see
        #: :meth:`Inventory.mig_strategy`): their Jobs and snippets use ``nvidia.com/mig-*``.
        self._mixed: frozenset[str] = frozenset()
        #: DRA: ResourceSlices by name, the per-node offers they make, the API version they are
        #: served in (None: no slice seen), and the classes Jobs claim through DRA.
        self._slices: dict[str, Mapping[str, Any]] = {}
        self._dra: dict[str, DraNode] = {}
        self._dra_version: str | None = None
        self._claimed: frozenset[str] = frozenset()
        self._written: dict[Key, _Written] = {}
        #: What was last logged per workload and topic: the same warning is not repeated.
        self._said: dict[Key, dict[str, str]] = {}
        #: Workloads decided at least once by this process (to log a restart's takeover once).
        self._resumed: set[Key] = set()
        self._events: asyncio.Queue[tuple[dict[str, Any], str, str, str]] | None = None
        self._poster: asyncio.Task[None] | None = None
        #: Measurements waiting for a slot (issue 15); rebuilt from stored statuses on start.
        self.slots = MeasurementQueue(opts.max_concurrent_measurements or None)
        self._seeded = False
        #: Slots taken by admitted starts whose Job the backend does not list yet, by namespace.
        self._reserved: dict[str, int] = {}
        #: The queue position last written per waiting workload (see :func:`_shown_position`).
        self._shown: dict[Key, tuple[bool, int]] = {}
        #: The pending check of the positions beyond POSITIONS_SHOWN, and when the last ran.
        self._scan: asyncio.TimerHandle | None = None
        self._scanned_at = 0.0
        #: Namespaces whose ResourceQuota refused a Job: monotonic time until which they wait.
        self._quota_blocked: dict[str, float] = {}
        #: The API server's words of the last quota refusal per namespace.
        self._quota_text: dict[str, str] = {}
        #: Namespaces whose daily measurement GPU-second budget is used up (last computed).
        self._budget_out: dict[str, gpu_time.BudgetState] = {}
        #: Each namespace's GPU-seconds of the day, where no tenant can write (None without an
        #: operator namespace: the budget then counts the live workloads' statuses only).
        self._ledger = (
            LedgerStore(opts.operator_namespace, opts.measurement_ledger)
            if opts.operator_namespace
            else None
        )
        #: The uid of the measurement Job last observed per workload (charged once per uid).
        self._job_uids: dict[Key, str] = {}
        self._gauged: set[str] = set()
        #: Namespace policy (its measurement settings: per-namespace limits, Kueue queues).
        self._policy = _load_policy(opts)
        #: namespace -> (its effective policy, monotonic time read).
        self._ns_policy: dict[str, tuple[EffectivePolicy, float]] = {}
        #: The workloads known when the first decision was made, not decided yet since the
        #: start (None before that, and after each was decided once); see :meth:`_count_resume`.
        self._resuming: set[Key] | None = None
        self._resume_done = False
        self._resume_writes = 0
        self._started = time.monotonic()
        #: Calibration factors and the monotonic time they were learned (see :meth:`calibration`).
        self._calibration: tuple[Calibration, float] | None = None
        #: The calibration sample of each shared measurement record (by name), with its key;
        #: built from the index on first use, then kept up to date from the record watch.
        self._record_samples: dict[str, tuple[Sample, str]] = {}
        self._record_samples_built = False
        #: Shared measurement records (issue 15): the watch's index by name, the records this
        #: process created (until the watch shows them) and deleted (until the watch drops them).
        self._records: Mapping[Any, Iterable[Mapping[str, Any]]] = {}
        self._records_made: dict[str, GPUMeasurement] = {}
        self._records_gone: set[str] = set()
        #: Records this process deleted because they expired (their users keep their results).
        self._records_expired: set[str] = set()
        #: Measurement keys a decision is starting a Job for right now -> the workload, and
        #: whether its result will be trusted (a Cluster record) or its namespace's own.
        self._claims: dict[str, tuple[Key, bool]] = {}
        #: Waiting workloads -> when their wait ends (they are decided again then).
        self._wait_until: dict[Key, datetime.datetime] = {}
        #: Workloads waiting for another one's measurement, by the key's label value.
        self._waiters: dict[str, set[Key]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._sweep_now = asyncio.Event()
        backend.notify = self.notify

    # ----------------------------------------------------------------------- wiring

    def attach(
        self,
        client: kube.Client,
        *,
        workloads: Mapping[Any, Iterable[Mapping[str, Any]]],
        records: Mapping[Any, Iterable[Mapping[str, Any]]] | None = None,
    ) -> None:
        """Connect the API client and the watch's indexes of workloads and measurement records;
        start the workers."""
        self._client = client
        self._workloads = workloads
        if records is not None:
            self._records = records
            self._sweeper = asyncio.create_task(self._sweep(), name="gpu-sizer records")
        self._started = time.monotonic()
        self._events = asyncio.Queue(maxsize=10_000)
        self._poster = asyncio.create_task(self._post_events(), name="gpu-sizer events")
        self.queue.start()

    async def stop(self) -> None:
        """Stop the workers and timers, post the Events still queued (for at most 2 s), stop
        the poster (operator shutdown)."""
        await self.queue.stop(grace=2.0)
        if self._scan is not None:
            self._scan.cancel()
            self._scan = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        if self._poster is not None:
            if self._events is not None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(2.0):
                        await self._events.join()
            self._poster.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poster
            self._poster = None

    def notify(self, namespace: str, name: str) -> None:
        """Something about the workload changed (its Job, its pod): reconcile it."""
        self.queue.add((namespace, name))

    # ----------------------------------------------------------------------- calibration

    def calibration(self) -> Calibration | None:
        """The ``--calibration`` mode with the factors learned from the shared measurement
        records (:mod:`gpu_sizer.records.calibration`: cluster-wide from the records no tenant could
        have written, from several namespaces; each namespace's own from its own records),
        learned again at most every :data:`CALIBRATION_REFRESH_SECONDS` and after each record
        that came or went; None when off. Workload statuses are not evidence: a tenant who may
        write its workload's status could forge one, and every measurement the operator trusts
        is a record. The same records give the same factors, so a restart writes nothing new
        over settled workloads. New factors reach a workload when its spec is next
        estimated."""
        mode = self.opts.calibration
        if mode is CalibrationMode.Off:
            return None
        now = time.monotonic()
        if not self._record_samples_built or (
            self._calibration is not None
            and now - self._calibration[1] >= CALIBRATION_REFRESH_SECONDS
        ):
            self._record_samples = {}
            for name, store in list(self._records.items()):
                for body in store:
                    self._record_sample(str(name), body)
            self._record_samples_built = True
            self._calibration = None
        if self._calibration is None:
            samples = [s for s, _ in self._record_samples.values()]
            learned = learn_calibration(mode, samples)
            self._calibration = (learned, now)
            self._log_factors(learned)
        return self._calibration[0]

    def _log_factors(self, learned: Calibration) -> None:
        """Say which cluster-wide factors are usable and which workloads moved them, once per
        change (the record of who moved calibration)."""
        for (engine, gpu_class, comp), f in (learned.factors or {}).items():
            if not f.usable:
                continue
            text = (
                f"x{f.factor:g} (observed {f.observed_ratio:g}) from {f.records} records in "
                f"{f.namespaces} namespaces: {', '.join(f.sources)}"
            )
            if self._say(("", f"calibration {engine} {gpu_class} {comp}"), "factor", text):
                log.info("calibration: %s on %s, %s %s", engine, gpu_class, comp, text)

    def _record_sample(self, name: str, body: Mapping[str, Any] | None) -> None:
        """Take a record's calibration sample (or drop it: gone, or not a usable one)."""
        spec = body.get("spec") if body is not None else None
        sample = sample_from_record(body)[0] if body is not None else None
        key = spec.get("key") if isinstance(spec, Mapping) else None
        if sample is None or not key:
            self._record_samples.pop(name, None)
        else:
            self._record_samples[name] = (sample, str(key))

    def _calibration_for(
        self, prev: GPUWorkloadStatus | None, hash_: str, namespace: str
    ) -> Calibration | None:
        """The factors a workload is judged with: those learned now (the cluster's, and its
        namespace's own where they are larger) when its spec is new or changed; for the same
        spec, the ones its status was judged with (they are in it). A settled workload keeps its
        figures and recommendation while the fleet's records grow (a GitOps gate does not flip
        because other teams measured), and a restart writes nothing new over it; the live
        factors reach it with its next spec change."""
        live = self.calibration()
        if live is None:
            return None
        if prev is not None and prev.spec_hash == hash_ and prev.estimate is not None:
            return Calibration.frozen(live.mode, prev.estimate.calibration)
        return live.for_namespace(namespace)

    # ----------------------------------------------------------------------- measurement slots

    def _seed(self) -> None:
        """Once, on the first decision: every workload whose stored status says Queued waits
        again from the time it entered the queue, so a restart keeps the order and loses no
        entry (the index is complete by then: kopf lists before the first event handler)."""
        if self._seeded:
            return
        self._seeded = True
        for key, body in self._all_workloads():
            since = _queued_since(body.get("status"))
            if since is not None:
                self.slots.enter(key, since)

    def _running(self) -> dict[str, int]:
        """Measurement Jobs holding a slot per namespace (reservations included); namespaces
        whose Jobs go through a Kueue LocalQueue are Kueue's to count, not ours."""
        running = {
            ns: n for ns, n in self.backend.live_jobs().items() if self._kueue_queue(ns) is None
        }
        for ns, n in self._reserved.items():
            running[ns] = running.get(ns, 0) + n
        return running

    def _limit_of(self, namespace: str) -> int | None:
        known = self._ns_policy.get(namespace)
        return known[0].max_concurrent_measurements if known is not None else None

    def _kueue_queue(self, namespace: str) -> str | None:
        known = self._ns_policy.get(namespace)
        return known[0].local_queue if known is not None else None

    async def _namespace_policy(self, namespace: str) -> EffectivePolicy | None:
        """The namespace policy's settings for ``namespace`` (None without a policy file),
        from its labels read at most every :data:`NAMESPACE_LABELS_TTL` seconds; when a read
        fails, the last settings known (else those of a namespace without labels) apply."""
        policy = self._policy
        if policy is None:
            return None
        known = self._ns_policy.get(namespace)
        now = time.monotonic()
        if known is not None and now - known[1] < NAMESPACE_LABELS_TTL:
            return known[0]
        labels: Mapping[str, str] = {}
        if policy.uses_labels:
            assert self._client is not None
            try:
                ns = await self._client.get(
                    kube.object_path("", "v1", "namespaces", None, namespace)
                )
                labels = _labels_of(ns)
                self._unsay((namespace, ""), "labels")
            except kube.ApiError as exc:
                if self._say((namespace, ""), "labels", str(exc)):
                    log.warning(
                        "namespace %s: labels unreadable (%s); its measurement policy is %s",
                        namespace,
                        exc,
                        "the last one known" if known else "that of a namespace without labels",
                    )
                if known is not None:
                    self._ns_policy[namespace] = (known[0], now)
                    return known[0]
        effective = policy.for_namespace(labels)
        self._ns_policy[namespace] = (effective, now)
        return effective

    def _blocked(self) -> set[str]:
        """Namespaces offered no slot now: refused by their ResourceQuota a moment ago, or
        out of their daily measurement GPU-seconds (namespace policy)."""
        now = time.monotonic()
        for ns in [ns for ns, until in self._quota_blocked.items() if until <= now]:
            del self._quota_blocked[ns]
            self._quota_text.pop(ns, None)
        self._budget_out = self._budgets_out()
        return set(self._quota_blocked) | self._budget_out.keys()

    async def _charge_ledger(self, namespace: str, job_uid: str, seconds: int) -> None:
        """Charge ``seconds`` GPU-seconds of the Job ``job_uid`` to ``namespace`` in the ledger
        (and write the charges that did not land before); a failed write stays pending and
        counts against the budget meanwhile (see :mod:`gpu_sizer.controller.ledger_store`)."""
        if self._ledger is None or self._client is None:
            return
        if seconds > 0:
            now = datetime.datetime.now(datetime.UTC)
            self._ledger.charge(namespace, Charge(job_uid, gpu_time.day_of(now), seconds))
        await self._ledger.flush(self._client, namespace)

    async def _read_ledger(self) -> None:
        """Read the ledger once (the first decision after a start): the namespaces' charges of
        the day survive the restart."""
        if self._ledger is not None and self._client is not None and not self._ledger.loaded:
            await self._ledger.load(self._client)

    def _gpu_seconds_limit(self, namespace: str) -> int | None:
        known = self._ns_policy.get(namespace)
        return known[0].measurement_gpu_seconds_per_day if known is not None else None

    def _budgets_out(self) -> dict[str, gpu_time.BudgetState]:
        """The namespaces with waiting measurements whose daily GPU-second budget is used up,
        from their workloads' statuses (see :mod:`gpu_sizer.measurement.gpu_time`)."""
        limits = {
            ns: limit
            for ns in self.slots.waiting_by_namespace()
            if (limit := self._gpu_seconds_limit(ns)) is not None
        }
        if not limits:
            return {}
        now = datetime.datetime.now(datetime.UTC)
        out: dict[str, gpu_time.BudgetState] = {}
        for ns, limit in limits.items():
            charged = self._ledger.used(ns, now) if self._ledger is not None else 0
            state = gpu_time.budget_state(self._statuses(ns), limit, now, charged)
            metrics.MEASUREMENT_GPU_SECONDS_TODAY.labels(ns).set(state.used)
            if state.exhausted:
                out[ns] = state
        return out

    def _statuses(self, namespace: str) -> Iterable[GPUWorkloadStatus]:
        """The readable statuses of the workloads of ``namespace`` (newest known state)."""
        for key in [k for k in self._workloads if isinstance(k, tuple) and k[0] == namespace]:
            view = self._status_view(key, gpu_time.charge_view)
            if view is not None:
                yield view

    def _admit(
        self, key: Key, wl: Workload, plan: Plan, stored: Mapping[str, Any], now: str
    ) -> tuple[Plan, bool]:
        """A plan that starts a new measurement: start it when a slot is free and no one is
        ahead, else hold it back as Queued. True when a slot was reserved (release it)."""
        self._seed()
        if self._kueue_queue(key[0]) is not None:
            # Kueue queues this namespace's Jobs (created suspended): not our queue's business.
            self._dequeue(key)
            return plan, False
        wanted = {a.name for a in plan.actions if isinstance(a, StartJob)}
        if any(
            j.name in wanted and not j.deleting and not j.finished for j in self.backend.jobs(*key)
        ):
            # Started by an earlier decision whose status write did not land (a kill, a 5xx):
            # it holds its slot already (it counts as running). Adopt it; queued again, it
            # would be deleted as unwanted and created once more when its turn came.
            self._dequeue(key)
            return plan, False
        self.slots.enter(key, _queued_since(stored) or now)
        # Its namespace's gauges exist from now on (0 when nothing waits or runs), even when
        # its Job starts and finishes between two gauge updates.
        self._gauged.add(key[0])
        running = self._running()
        verdict = self.slots.admit(key, running, self._limit_of, self._blocked())
        if verdict.admitted:
            self.slots.leave(key)
            self._shown.pop(key, None)
            self._reserved[key[0]] = self._reserved.get(key[0], 0) + 1
            return plan, True
        return self._queued(key, wl, plan, verdict, now), False

    def _queued(self, key: Key, wl: Workload, plan: Plan, verdict: Admission, now: str) -> Plan:
        over, shown = self._shown[key] = _shown_position(verdict.position)
        where = f"position {'over ' if over else ''}{shown} in the measurement queue"
        if verdict.reason == QueueReason.Quota:
            because = (
                f"a ResourceQuota of namespace {key[0]} refused a measurement Job "
                f"({self._quota_text.get(key[0], 'exceeded quota')}); trying again in "
                f"{self.opts.quota_retry_seconds:g} s"
            )
        elif verdict.reason == QueueReason.NamespaceLimit:
            because = (
                f"namespace {key[0]} may run {self._limit_of(key[0])} measurement Jobs at once "
                "(namespace policy maxConcurrentMeasurements)"
            )
        else:
            because = (
                f"at most {self.slots.cap} measurement Jobs run at once cluster-wide "
                "(--max-concurrent-measurements)"
            )
        budget = self._budget_out.get(key[0])
        if budget is not None and verdict.reason == QueueReason.Quota:
            because = budget.message(key[0])
        message = f"queued: {where}; {because}"
        queued = queued_plan(plan, wl, self.config, message=message, now=now)
        if budget is not None and verdict.reason == QueueReason.Quota:
            was = wl.previous.conditions if wl.previous is not None else []
            if not any(
                c.type == "Measured" and "measurementGpuSecondsPerDay" in c.message for c in was
            ):
                text = budget.message(key[0])
                queued = replace(
                    queued,
                    actions=(*queued.actions, Emit("Normal", "MeasurementBudgetExhausted", text)),
                )
        return queued

    def _dequeue(self, key: Key) -> None:
        self.slots.leave(key)
        self._shown.pop(key, None)

    def _wake(self) -> None:
        """Offer free slots to the entries first in fair order, and have the entries whose
        shown position moved write their new one: at once for the first
        :data:`POSITIONS_SHOWN` (and the one after), within :data:`POSITION_SCAN_SECONDS` for
        the others (a stepped position rarely changes; checking it walks the whole queue)."""
        if len(self.slots):
            running = self._running()
            blocked = self._blocked()
            for key in self.slots.startable(running, self._limit_of, blocked):
                self.queue.add(key)
            head = self.slots.positions(running, self._limit_of, blocked, first=POSITIONS_SHOWN + 1)
            self._reposition(head)
            if len(self.slots) > len(head) and self._scan is None:
                loop = asyncio.get_running_loop()
                delay = self._scanned_at + POSITION_SCAN_SECONDS - time.monotonic()
                self._scan = loop.call_later(max(0.0, delay), self._scan_positions)
        self._gauge_slots()

    def _scan_positions(self) -> None:
        """Check every waiting entry's written position (see :meth:`_wake`)."""
        self._scan = None
        self._scanned_at = time.monotonic()
        if len(self.slots):
            ranked = self.slots.positions(self._running(), self._limit_of, self._blocked())
            self._reposition(ranked)

    def _reposition(self, ranked: Iterable[Key]) -> None:
        """Reconcile the entries of ``ranked`` (the fair order from position 1) whose written
        position differs from their place in it."""
        for position, key in enumerate(ranked, 1):
            if self._shown.get(key) != _shown_position(position):
                self.queue.add(key)

    def _gauge_slots(self) -> None:
        waiting = self.slots.waiting_by_namespace()
        running = self.backend.live_jobs()
        for ns in self._gauged | waiting.keys() | running.keys():
            metrics.MEASUREMENT_QUEUE_LENGTH.labels(ns).set(waiting.get(ns, 0))
            metrics.MEASUREMENTS_RUNNING.labels(ns).set(running.get(ns, 0))
        self._gauged |= waiting.keys() | running.keys()

    def node_seen(self, name: str, parsed: GpuNode | IgnoredNode | None) -> bool:
        """Node ``name`` is now ``parsed`` (None: gone, or no GPUs). True when that changed
        the node's entry; when it changed the present GPU classes, the workloads waiting for a
        node of their class are decided again."""
        before = self._nodes.get(name)
        if before == parsed:
            return False
        classes = frozenset(
            c for n in (before, parsed) if isinstance(n, GpuNode) for c in n.classes()
        )
        drivers_before = {c: self._drivers(c) for c in classes}
        if parsed is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = parsed
        changed = {c for c in classes if self._drivers(c) != drivers_before[c]}
        if changed:
            # GFD reports another NVIDIA driver major on a class's nodes: the measurements
            # taken on that class are checked against it (issue 15, item 5).
            for key, body in self._all_workloads():
                status = body.get("status")
                measurement = status.get("measurement") if isinstance(status, Mapping) else None
                if isinstance(measurement, Mapping) and measurement.get("gpuClass") in changed:
                    self.queue.add(key)
        self._refresh()
        return True

    def slice_seen(self, name: str, body: Mapping[str, Any] | None) -> bool:
        """ResourceSlice ``name`` is now ``body`` (None: deleted). True when that changed what
        the slices offer; the inventory is then rebuilt as in :meth:`node_seen`."""
        if body is None:
            self._slices.pop(name, None)
        else:
            self._slices[name] = body
            version = body.get("apiVersion")
            if isinstance(version, str) and version.startswith("resource.k8s.io/"):
                self._dra_version = version
        dra = parse_resource_slices(self._slices.values(), self.config.catalog)
        if dra == self._dra:
            return False
        self._dra = dra
        self._refresh()
        return True

    def dra_nodes(self) -> Mapping[str, DraNode]:
        """What the ResourceSlices seen offer, per node."""
        return self._dra

    def _refresh(self) -> None:
        """Recompute the present classes and how each is requested; when the present classes
        changed, the workloads waiting for a node of their class are decided again."""
        inventory = self.inventory()
        modes = inventory.request_modes()
        present = inventory.present_classes()
        self._mixed = frozenset(c for c, mode in modes.items() if mode == "mixed")
        self._claimed = frozenset(c for c, mode in modes.items() if mode == "dra")
        if present != self._present:
            self._present = present
            for key, body in self._all_workloads():
                status = body.get("status")
                measurement = status.get("measurement") if isinstance(status, Mapping) else None
                if isinstance(measurement, Mapping) and (
                    measurement.get("reason") == "NoNodeOfClass"
                ):
                    self.queue.add(key)

    def inventory(self) -> Inventory:
        """The GPU nodes known (DRA ResourceSlices before GFD labels, :func:`merge_inventory`),
        and the nodes ignored with their reasons."""
        nodes = tuple(n for n in self._nodes.values() if isinstance(n, GpuNode))
        ignored = tuple(n for n in self._nodes.values() if isinstance(n, IgnoredNode))
        return merge_inventory(Inventory(nodes, ignored), self._dra)

    def present(self) -> frozenset[str]:
        """The GPU classes with at least one node in the cluster."""
        return self._present

    def mig_strategy(self, gpu_class: str) -> MigStrategy:
        """How the cluster's nodes offer ``gpu_class`` (MIG ``mixed`` or ``single``)."""
        return "mixed" if gpu_class in self._mixed else "single"

    def _for_cluster(self, plan: Plan) -> Plan:
        """The plan with its recommendation's snippets for the MIG strategy of the class's
        nodes (the pure core writes the ``single`` ones)."""
        rec = plan.status.recommendation
        if rec is None or rec.gpu_class not in self._mixed:
            return plan
        local = for_strategy(rec, "mixed", self.config.catalog)
        status = plan.status.model_copy(update={"recommendation": local})
        return dataclasses.replace(plan, status=status)

    def _all_workloads(self) -> Iterable[tuple[Key, Mapping[str, Any]]]:
        for key, store in list(self._workloads.items()):
            for body in store:
                yield key, body

    # ----------------------------------------------------------------------- shared records

    def _sharing(self, namespace: str) -> bool:
        """Whether the namespace takes part in shared measurement records (its policy read by
        :meth:`_namespace_policy` before; no policy: yes)."""
        if not self.opts.measurement_sharing:
            return False
        known = self._ns_policy.get(namespace)
        return known is None or known[0].measurement_sharing is MeasurementSharing.Enabled

    def _drivers(self, gpu_class: str) -> frozenset[str]:
        """NVIDIA driver majors (GFD labels) of the nodes offering ``gpu_class``."""
        return frozenset(
            n.driver_major
            for n in self._nodes.values()
            if isinstance(n, GpuNode) and n.driver_major and gpu_class in n.classes()
        )

    def _record_named(self, name: str) -> GPUMeasurement | None:
        if name in self._records_gone:
            return None
        for body in self._records.get(name, ()):
            parsed = parse_record(body)
            if parsed is not None:
                return parsed
        return self._records_made.get(name)

    def _reusable(
        self, key: str, me: Key, estimate: Any, *, say: bool = True
    ) -> GPUMeasurement | None:
        """The record of ``key`` the workload ``me`` may reuse: the cluster's, else its
        namespace's own (:func:`~gpu_sizer.api.record.reusable_by`); fresh (its expiry capped
        by the TTL), of that very key, with a shareable result, and plausible against the
        workload's own ``estimate`` and the class (:mod:`gpu_sizer.records.checks`). A record
        that fails a check is said once and passed over: the workload measures instead."""
        now = datetime.datetime.now(datetime.UTC)
        for name in record_names(key, me[0]):
            rec = self._record_named(name)
            if rec is None or rec.spec.key != key or not reusable_by(rec, me[0]):
                continue
            if not is_fresh(rec, now, self.opts.measurement_record_ttl):
                continue
            limit = self.opts.measurement_revalidate_after
            taken = parse_time(rec.spec.result.completed_at)
            if limit and taken is not None and (now - taken).total_seconds() >= limit:
                continue  # older than the re-validation interval: measured again, not reused
            if not shareable(rec.spec.result):
                continue
            cls = _class_named(self.config.catalog, rec.spec.gpu_class)
            problems = (
                ["its class is not in the catalog"]
                if cls is None
                else implausibilities(rec, cls, estimate, now)
            )
            if problems:
                if say and self._say(me, f"record {name}", "; ".join(problems)):
                    log.warning(
                        "%s/%s: GPUMeasurement %s not reused, implausible: %s",
                        *me,
                        name,
                        "; ".join(problems),
                    )
                continue
            return rec
        return None

    def _in_flight(self, key: str, me: Key) -> tuple[str, datetime.datetime | None] | None:
        """``namespace/name`` of another workload's live measurement Job of ``key`` whose record
        ``me`` could reuse (a trusted run, or one of its own namespace), found by its label, so
        also after a restart, or of one being started right now; and until when it is waited
        for (:func:`gpu_sizer.records.sharing.wait_until`). Only a Job with a live owner counts: its
        workload exists and names it as its unfinished measurement (or has not written its
        status since creating it, for at most :data:`UNNAMED_JOB_GRACE_SECONDS`)."""
        claim = self._claims.get(key)
        if claim is not None and claim[0] != me and (claim[1] or claim[0][0] == me[0]):
            return f"{claim[0][0]}/{claim[0][1]} (starting)", None
        now = datetime.datetime.now(datetime.UTC)
        for namespace, job in self.backend.labelled(KEY_LABEL, key_label(key)):
            owner = (namespace, job.workload)
            if owner == me:
                continue
            trusted = bool(self.opts.operator_namespace) and (
                job.namespace == self.opts.operator_namespace
            )
            if self.config.runner != "Job":
                trusted = True  # local probes: the operator's own processes
            if not trusted and namespace != me[0]:
                continue  # its result stays private to its namespace: nothing to wait for
            until = wait_until(job.started, job.deadline_seconds, POD_RESULT_GRACE_SECONDS)
            if until is not None and now >= until:
                continue  # past its deadline: it cannot produce a result any more
            if self._live_owner(owner, job, now):
                return f"{job.namespace or namespace}/{job.name}", until
        return None

    def _live_owner(self, owner: Key, job: JobView, now: datetime.datetime) -> bool:
        """Whether ``job`` still works for a live workload ``owner``: it exists (the uid the
        Job names), is not being deleted, and its status names ``job`` as its measurement
        without a result yet; or it has not named any Job since this one was created, for at
        most :data:`UNNAMED_JOB_GRACE_SECONDS`."""
        body = self.workload(owner)
        if body is None:
            return False
        meta = _meta(body)
        if meta.get("deletionTimestamp") or (job.owner_uid and meta.get("uid") != job.owner_uid):
            return False
        status = body.get("status")
        m = status.get("measurement") if isinstance(status, Mapping) else None
        if isinstance(m, Mapping) and m.get("jobName") == job.name:
            return not m.get("completedAt")
        created = parse_time(job.started)
        young = created is not None and (now - created).total_seconds() < UNNAMED_JOB_GRACE_SECONDS
        named_other = isinstance(m, Mapping) and bool(m.get("jobName")) and m.get("completedAt")
        return young and not job.finished and not named_other

    def _job_namespace(self, namespace: str, spec: GPUWorkloadSpec) -> str:
        """Where a new measurement Job of a workload of ``namespace`` runs: the operator's own
        namespace when its result may be shared with other namespaces (sharing on, a trusted
        run by :func:`~gpu_sizer.records.sharing.trusted_run`, no Kueue LocalQueue, which is a
        namespace's own), else the workload's namespace."""
        operator_ns = self.opts.operator_namespace
        if (
            operator_ns
            and self.config.runner == "Job"
            and self._sharing(namespace)
            and self._kueue_queue(namespace) is None
            and trusted_run(
                spec,
                effective_image=self._image(spec),
                probe_image=self.opts.probe_image,
                job_namespace=operator_ns,
                operator_namespace=operator_ns,
                local=False,
            )
        ):
            return operator_ns
        return namespace

    def _scope(self, key: Key, m: MeasurementStatus, spec: GPUWorkloadSpec) -> RecordScope:
        """The scope of the record of the finished measurement ``m``: Cluster only when the Job
        that ran it (found again by name, its namespace and image as the API has them) was a
        trusted run (:func:`~gpu_sizer.records.sharing.trusted_run`)."""
        local = self.config.runner != "Job"
        job = next((j for j in self.backend.jobs(*key) if j.name == m.job_name), None)
        if job is None and not local:
            return RecordScope.Namespace
        trusted = trusted_run(
            spec,
            effective_image=(job.image if job is not None and job.image else self._image(spec)),
            probe_image=self.opts.probe_image,
            job_namespace=job.namespace if job is not None else None,
            operator_namespace=self.opts.operator_namespace,
            local=local,
        )
        return RecordScope.Cluster if trusted else RecordScope.Namespace

    def _image(self, spec: GPUWorkloadSpec) -> str:
        return spec.measurement.image or self.opts.probe_image

    def _job_key(self, spec: GPUWorkloadSpec, gpu_class: Any) -> str:
        """The key a Job of ``spec`` on ``gpu_class`` is labelled with (the first driver major
        among the class's nodes; waiters try every one)."""
        keys = candidate_keys(
            spec, gpu_class, probe_image=self._image(spec), drivers=self._drivers(gpu_class.name)
        )
        return keys[0].digest()

    def _stale(self, m: MeasurementStatus, spec: GPUWorkloadSpec, namespace: str) -> Stale | None:
        now = datetime.datetime.now(datetime.UTC)
        gone = False
        names: tuple[str, ...] = ()
        if m.reused_from:
            names = (m.reused_from,)
        elif m.measurement_key:
            names = record_names(m.measurement_key, namespace)
        expires = parse_time(m.record_expires_at)
        if (
            names
            and expires is not None
            and expires > now
            and self._sharing(namespace)
            and not any(n in self._records_expired for n in names)
        ):
            gone = all(self._record_named(n) is None for n in names)
        return stale(
            m,
            spec,
            self.config,
            probe_image=self._image(spec),
            drivers=self._drivers,
            record_gone=gone,
            now=now,
            revalidate_after_seconds=self.opts.measurement_revalidate_after,
        )

    def _keyed(
        self,
        plan: Plan,
        spec: GPUWorkloadSpec,
        old: MeasurementStatus | None,
        publish_at: datetime.datetime | None,
    ) -> tuple[Plan, bool]:
        """A measurement that finished in this decision gets its key (with the driver of the
        node it ran on); True when it did."""
        m = plan.status.measurement
        if (
            m is None
            or not m.completed_at
            or m.reused_from
            or m.key_fields is not None
            or m.reason in ("NoNodeOfClass", "Unschedulable", "JobDeleted")
            or (old is not None and old.completed_at)
        ):
            return plan, False
        cls = _class_named(self.config.catalog, m.gpu_class)
        if cls is None:
            return plan, False
        node = self._nodes.get(m.node_name or "")
        driver = node.driver_major if isinstance(node, GpuNode) else ""
        fields = candidate_keys(
            spec, cls, probe_image=self._image(spec), drivers={driver} if driver else ()
        )[0]
        update: dict[str, Any] = {"measurement_key": fields.digest(), "key_fields": fields}
        if publish_at is not None and shareable(m):
            expires = publish_at + datetime.timedelta(seconds=self.opts.measurement_record_ttl)
            update["record_expires_at"] = rfc3339(expires)
        keyed = m.model_copy(update=update)
        return Plan(plan.status.model_copy(update={"measurement": keyed}), plan.actions), True

    def _oom_moved_on(
        self, plan: Plan, spec: GPUWorkloadSpec, old: MeasurementStatus | None, now: str
    ) -> MeasurementStatus | None:
        """The CUDA out-of-memory on ``old``'s class, when this decision moved the measurement
        on to a larger class: keyed (the driver of the node it ran on), to publish as a record
        of its own, so that a workload of the same key walks on instead of running out too."""
        m = plan.status.measurement
        if m is None or old is None or not old.gpu_class or old.completed_at:
            return None
        oom = m.out_of_memory_classes or []
        if old.gpu_class not in oom or old.gpu_class == m.gpu_class:
            return None
        if len(old.out_of_memory_classes or []) >= len(oom):
            return None
        cls = _class_named(self.config.catalog, old.gpu_class)
        if cls is None:
            return None
        node = self._nodes.get(old.node_name or "")
        driver = node.driver_major if isinstance(node, GpuNode) else ""
        fields = candidate_keys(
            spec, cls, probe_image=self._image(spec), drivers={driver} if driver else ()
        )[0]
        measured = next((c for c in plan.status.conditions if c.type == "Measured"), None)
        return old.model_copy(
            update={
                "device": "cuda",
                "out_of_memory": True,
                "reason": "OutOfMemory",
                "message": measured.message if measured else "CUDA out of memory",
                "completed_at": now,
                "out_of_memory_classes": oom,
                "measurement_key": fields.digest(),
                "key_fields": fields,
            }
        )

    async def _publish(
        self,
        key: Key,
        plan: Plan,
        spec: GPUWorkloadSpec,
        now: datetime.datetime,
        measurement: MeasurementStatus | None = None,
    ) -> None:
        """Create the GPUMeasurement of a measurement that finished in this decision (the
        plan's, or ``measurement``); its name comes from the key: a second try or a second
        producer finds it there."""
        m = measurement or plan.status.measurement
        if m is None or m.key_fields is None or not m.measurement_key or not shareable(m):
            return
        scope = self._scope(key, m, spec)
        private = scope is RecordScope.Namespace
        name = record_name(m.measurement_key, key[0] if private else None)
        existing = self._record_named(name)
        if existing is not None and existing.spec.result.completed_at == m.completed_at:
            return  # this very measurement, published already
        est = plan.status.estimate
        verdict = next(
            (c.reason for c in plan.status.conditions if c.type == "Estimated"), "Unknown"
        )
        estimate = (
            RecordEstimate(
                per_gpu=est.per_gpu,
                gpu_count=est.gpu_count,
                parameter_count=est.parameter_count,
                verdict=verdict,
                # With --calibration=apply perGpu is calibrated; learning reads the analytic.
                calibration=est.calibration,
            )
            if est is not None
            else None
        )
        body = build_record(
            m.key_fields,
            spec,
            result=m,
            source_namespace=key[0],
            source_name=key[1],
            estimate=estimate,
            now=now,
            ttl_seconds=self.opts.measurement_record_ttl,
            scope=scope,
        )
        assert self._client is not None
        answer: Any = None
        if existing is not None:
            # A newer measurement of the key (re-validated, or taken after the old record went
            # stale): the record now holds it; its name, and its users' reusedFrom, stay.
            path = kube.object_path(GROUP, VERSION, RECORD_PLURAL, None, name)
            answer = await self._client.merge_patch(
                path, {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]}
            )
        else:
            path = kube.collection_path(GROUP, VERSION, RECORD_PLURAL, None)
            try:
                answer = await self._client.create(path, body)
            except kube.Conflict:
                answer = None  # another producer of the same key was first: the same facts
        parsed = parse_record(answer if isinstance(answer, Mapping) else body)
        if parsed is not None:
            self._records_made[name] = parsed
        self._records_gone.discard(name)
        log.info("%s/%s: published GPUMeasurement %s (scope %s)", *key, name, scope)

    def record_seen(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """The watch delivered a GPUMeasurement: wake the workloads waiting for its key; when
        it is gone, the workloads that reused or produced it decide again."""
        meta = _meta(body)
        name = str(meta.get("name") or "")
        raw_labels = meta.get("labels")
        labels: Mapping[str, Any] = raw_labels if isinstance(raw_labels, Mapping) else {}
        self._records_made.pop(name, None)
        if self._record_samples_built:  # the calibration's records (learned again when asked)
            self._record_sample(name, None if event_type == "DELETED" else body)
            self._calibration = None
        if event_type == "DELETED":
            self._records_gone.discard(name)
            for key, wl_body in self._all_workloads():
                status = wl_body.get("status")
                m = status.get("measurement") if isinstance(status, Mapping) else None
                if not isinstance(m, Mapping):
                    continue
                mk = m.get("measurementKey")
                if m.get("reusedFrom") == name or (
                    isinstance(mk, str) and name in record_names(mk, key[0])
                ):
                    self.queue.add(key)
        else:
            self._sweep_now.set()
        self._wake_waiters(str(labels.get(KEY_LABEL) or ""))

    def job_seen(self, body: Mapping[str, Any]) -> None:
        """A measurement Job changed: the workloads waiting for its key decide again."""
        labels = _meta(body).get("labels")
        if isinstance(labels, Mapping) and labels.get(KEY_LABEL):
            self._wake_waiters(str(labels[KEY_LABEL]))

    def _wake_waiters(self, label: str) -> None:
        for key in self._waiters.pop(label, set()) if label else ():
            self.queue.add(key)

    def _forget_waiter(self, key: Key) -> None:
        self._wait_until.pop(key, None)
        for label in [lb for lb, keys in self._waiters.items() if key in keys]:
            self._waiters[label].discard(key)
            if not self._waiters[label]:
                del self._waiters[label]

    async def _sweep(self) -> None:
        """Delete expired records, waking at the next expiry (at most an hour apart, and on
        every new record)."""
        while True:
            now = datetime.datetime.now(datetime.UTC)
            soonest: float = 3600.0
            for name, store in list(self._records.items()):
                for body in list(store):
                    rec = parse_record(body)
                    if rec is None or rec.metadata.get("deletionTimestamp"):
                        continue
                    # Capped by the TTL from recordedAt: a record claiming to live until the
                    # year 9991 is deleted when any other would be.
                    expires = effective_expiry(rec, self.opts.measurement_record_ttl)
                    if expires is not None and expires > now:
                        soonest = min(soonest, (expires - now).total_seconds())
                        continue
                    soonest = min(soonest, await self._expire_record(str(name)))
            self._sweep_now.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.5, soonest)):
                    await self._sweep_now.wait()

    async def _expire_record(self, name: str) -> float:
        """Delete one expired record; seconds until the sweep should look again."""
        assert self._client is not None
        self._records_expired.add(name)
        try:
            await self._client.delete(kube.object_path(GROUP, VERSION, RECORD_PLURAL, None, name))
        except kube.NotFound:
            pass
        except kube.ApiError as exc:
            log.warning("GPUMeasurement %s expired but could not be deleted: %s", name, exc)
            return 30.0
        log.info("GPUMeasurement %s expired (--measurement-record-ttl): deleted", name)
        return 3600.0

    # ----------------------------------------------------------------------- state

    def _cached(self, key: Key) -> Mapping[str, Any] | None:
        best: Mapping[str, Any] | None = None
        for body in self._workloads.get(key, ()):
            if best is None or _newer(
                _meta(body).get("resourceVersion"), _meta(best).get("resourceVersion")
            ):
                best = body
        return best

    def workload(self, key: Key) -> Mapping[str, Any] | None:
        """The newest state known of the workload: the watch's, or the operator's own last
        write while the watch has not shown it yet. None when the object is gone."""
        newest = self._newest(key)
        return newest.expand() if isinstance(newest, CompactWorkload) else newest

    def _status_view(self, key: Key, view: Callable[[Any], T]) -> T | None:
        """``view`` of the newest stored status of the workload (None when it is gone), worked
        out once per state the watch delivered (:meth:`CompactWorkload.derive`): a namespace's
        GPU-second budget reads every one of its workloads on each decision."""
        newest = self._newest(key)
        if newest is None:
            return None
        if isinstance(newest, CompactWorkload):
            return newest.derive(view)
        return view(newest.get("status"))

    def _newest(self, key: Key) -> Mapping[str, Any] | None:
        """:meth:`workload`, with the watch's state in its compact form."""
        cached = self._cached(key)
        written = self._written.get(key)
        if cached is None:
            self._written.pop(key, None)
            return None
        if written is not None:
            same = _meta(written.body).get("uid") == _meta(cached).get("uid")
            newer = _newer(
                _meta(written.body).get("resourceVersion"), _meta(cached).get("resourceVersion")
            )
            if newer is None:
                newer = _meta(written.body).get("resourceVersion") != _meta(cached).get(
                    "resourceVersion"
                ) and (time.monotonic() - written.at < WRITE_OVERLAY_SECONDS)
            if same and newer:
                return written.body
            del self._written[key]
        return cached

    # ----------------------------------------------------------------------- the decision

    async def reconcile(self, key: Key) -> float | None:
        """Decide and act for one workload; seconds until it must be decided again, or None.

        :raises kube.ApiError, BackendError: a write did not land (the queue retries).
        """
        if self._resuming is None and not self._resume_done:
            # kopf fills every index before any event handler runs, so the workloads' index
            # holds every workload there is at the first decision.
            self._resuming = {k for k, _ in self._all_workloads()}
        await self._read_ledger()
        namespace, name = key
        body = self.workload(key)
        if body is None or _meta(body).get("deletionTimestamp"):
            self._job_uids.pop(key, None)
            await self._clean_up(key, body)
            self._count_resume(key, False)
            return None
        meta = _meta(body)
        uid = str(meta.get("uid") or "")
        generation = meta.get("generation")
        raw_status = body.get("status")
        stored = raw_status if isinstance(raw_status, Mapping) else {}
        prev = self._previous(key, stored)
        real_prev = prev
        why: Stale | None = None
        now = now_rfc3339()
        seen: list[Outcome] = []
        watched: list[MeasurementStatus] = []
        wl: Workload | None = None
        try:
            parsed = parse_spec(body.get("spec"))
        except InvalidWorkload as exc:
            problems = [str(p) for p in exc.problems]
            plan = invalid_plan(problems, generation=generation, now=now, previous=prev)
            if self._say(key, "spec", "; ".join(problems)):
                log.warning(
                    "%s/%s: invalid spec (stored without the webhook?): %s",
                    namespace,
                    name,
                    "; ".join(problems),
                )
            spec: GPUWorkloadSpec | None = None
            hash_: str | None = None
        else:
            spec = parsed
            self._unsay(key, "spec")
            hash_ = spec_hash(parsed)
            present = self.present()
            assessment = assess(
                parsed,
                self.config.catalog,
                present=present,
                calibration=self._calibration_for(prev, hash_, namespace),
                capacity=self.inventory().capacity() if parsed.gpu_count > 1 else None,
            )
            weights = host = 0
            if assessment.estimate is not None:
                weights = assessment.estimate.per_gpu.weights_bytes * assessment.estimate.gpu_count
                host = assessment.estimate.host_bytes_per_node or 0
            # Re-measure when the world changed under a finished measurement (issue 15, item 5).
            old_m = prev.measurement if prev is not None else None
            if (
                prev is not None
                and old_m is not None
                and prev.phase is not Phase.Measuring
                and prev.spec_hash == hash_
                and old_m.spec_hash == hash_
                and old_m.key_fields is not None
            ):
                await self._namespace_policy(namespace)
                why = self._stale(old_m, parsed, namespace)
                if why is not None:
                    prev = remeasure_previous(prev)
            wl = Workload(name, namespace, generation, parsed, hash_, prev)
            spec_hash_ = hash_

            def namer(gpu_class: str, mem: int, retry: int) -> str:
                return job_name(
                    name, spec_hash_, gpu_class, mem, retry, namespace=namespace, uid=uid
                )

            def observe(m: MeasurementStatus) -> Outcome:
                outcome = self._observe(namespace, name, uid, m)
                seen.append(outcome)
                watched.append(m)
                return outcome

            memory = host_memory_bytes(parsed, weights, host)

            def run(w: Workload) -> Plan:
                return decide(
                    w,
                    assessment,
                    self.config,
                    present=present,
                    now=now,
                    job_name=namer,
                    memory_bytes=memory,
                    observe=observe,
                )

            plan = run(wl)
            if why is not None:
                plan = restated(plan, why, real_prev, now)
        outcome = seen[-1] if seen else None
        plan, seconds = _charged(plan, prev, outcome, watched[-1] if watched else None)
        if seconds:
            job_uid = self._job_uids.get(key) or f"{uid}/{watched[-1].job_name}"
            await self._charge_ledger(namespace, job_uid, seconds)
        elif self._ledger is not None and self._ledger.pending(namespace):
            await self._charge_ledger(namespace, "", 0)  # a write that did not land earlier
        reserved = False
        retry_quota = False
        if any(isinstance(a, StartJob) for a in plan.actions):
            await self._namespace_policy(namespace)
        if (
            wl is not None
            and hash_ is not None
            and starts_measurement(plan, prev, hash_)
            and self._sharing(namespace)
        ):
            plan = self._shared(key, wl, plan, run, real_prev, now)
        else:
            self._forget_waiter(key)
        if wl is not None and hash_ is not None and starts_measurement(plan, prev, hash_):
            plan, reserved = self._admit(key, wl, plan, stored, now)
            # Waiting on a quota refusal: try again when its namespace's pause ends.
            retry_quota = not reserved and namespace in self._quota_blocked
        else:
            self._dequeue(key)
        recorded: list[JobView] = []
        claimed: list[str] = []
        if spec is not None and self._sharing(namespace):
            trusted = self._job_namespace(namespace, spec) != namespace
            for action in plan.actions:
                if isinstance(action, StartJob):
                    claim = self._job_key(spec, action.gpu_class)
                    if claim not in self._claims:
                        self._claims[claim] = (key, trusted or self.config.runner != "Job")
                        claimed.append(claim)
        try:
            recorded = await self._jobs(key, uid, plan, body, spec, hash_, stored)
        except QuotaExceeded as exc:
            assert wl is not None
            plan = self._quota_refused(key, wl, plan, stored, exc, now)
            retry_quota = True
        finally:
            for claim in claimed:
                self._claims.pop(claim, None)
            if reserved:
                left = self._reserved.get(namespace, 0) - 1
                if left > 0:
                    self._reserved[namespace] = left
                else:
                    self._reserved.pop(namespace, None)
        finished = False
        if spec is not None:
            old_m = real_prev.measurement if real_prev is not None else None
            await self._namespace_policy(namespace)
            at = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
            sharing = self._sharing(namespace)
            plan, finished = self._keyed(plan, spec, old_m, at if sharing else None)
            if finished and sharing:
                await self._publish(key, plan, spec, at)
            oom = self._oom_moved_on(plan, spec, old_m, now) if sharing else None
            if oom is not None:
                await self._publish(key, plan, spec, at, oom)
        plan = self._for_cluster(plan)
        changed = await self._write(key, body, stored, plan)
        ended = plan.status.measurement
        if spec is not None and ended is not None and ended.completed_at and changed:
            # Whatever its outcome, the workloads waiting for this measurement decide again.
            cls = _class_named(self.config.catalog, ended.gpu_class)
            if cls is not None:
                self._wake_waiters(key_label(self._job_key(spec, cls)))
        for job in recorded:  # their outcome is in the status now: they may go
            await self._delete(key, job)
        if key not in self._resumed:
            self._resumed.add(key)
            if stored.get("phase"):
                # After a restart: which workloads this process took over; its Job actions
                # (an adoption, a deletion) are done by now. Said at INFO for a workload in
                # flight (measuring, or its status changed); for a settled one at DEBUG: a
                # line each costs more than the decision over 10,000 settled workloads
                # (issue 17), and the resume's summary line counts them.
                in_flight = changed or plan.status.phase is Phase.Measuring
                log.log(
                    logging.INFO if in_flight else logging.DEBUG,
                    "%s/%s: resumed in phase %s",
                    *key,
                    plan.status.phase,
                )
        self._count_resume(key, changed)
        self._record_metrics(key, plan.status)
        log.debug(
            "%s/%s: decided: %s, status %s (on resourceVersion %s)",
            namespace,
            name,
            plan.status.phase,
            "written" if changed else "unchanged",
            meta.get("resourceVersion"),
        )
        if changed:
            self._log_transition(key, stored, plan)
            for action in plan.actions:
                if isinstance(action, Emit):
                    self._emit(body, action)
            if outcome is not None:
                _observe_outcome(outcome, plan, prev, namespace)
        self._unsay(key, "failure")
        self._wake()
        if retry_quota and namespace in self._budget_out:
            # Out of today's GPU-seconds: decided again when the budget frees (00:00 UTC).
            frees = parse_time(self._budget_out[namespace].frees_at)
            if frees is not None:
                wait = (frees - datetime.datetime.now(datetime.UTC)).total_seconds()
                return max(1.0, wait + 1.0)
        if retry_quota:
            until = self._quota_blocked.get(namespace, 0.0)
            return max(0.1, until - time.monotonic())
        deadline = self._deadline(plan, outcome)
        wait_ends = self._wait_until.get(key)
        if wait_ends is not None:
            # A wait ends at the Job's deadline: decided again then, measuring itself.
            ends = max(0.5, (wait_ends - datetime.datetime.now(datetime.UTC)).total_seconds() + 0.5)
            deadline = ends if deadline is None else min(deadline, ends)
        due = revalidation_due(
            plan.status.measurement,
            datetime.datetime.now(datetime.UTC),
            self.opts.measurement_revalidate_after,
        )
        if due is not None and plan.status.phase is not Phase.Measuring:
            deadline = due + 0.5 if deadline is None else min(deadline, due + 0.5)
        return deadline

    def _shared(
        self,
        key: Key,
        wl: Workload,
        plan: Plan,
        run: Any,
        real_prev: GPUWorkloadStatus | None,
        now: str,
    ) -> Plan:
        """A plan that starts a new measurement, checked against the shared records: reuse a
        fresh record of the key, wait for a measurement of the key in flight, or go ahead."""
        start = next(a for a in plan.actions if isinstance(a, StartJob))
        estimate = plan.status.estimate
        found = find_shared(
            wl.spec,
            start.gpu_class,
            self.config,
            self.present(),
            probe_image=self._image(wl.spec),
            drivers=self._drivers,
            record=lambda k: self._reusable(k, key, estimate),
            in_flight=lambda k: self._in_flight(k, key),
        )
        if isinstance(found, Wait):
            self._forget_waiter(key)
            self._waiters.setdefault(key_label(found.key), set()).add(key)
            if found.until is not None:
                self._wait_until[key] = found.until
            return waiting_plan(plan, wl, self.config, wait=found, now=now)
        self._forget_waiter(key)
        if not isinstance(found, Reuse):
            return plan
        m = reused_measurement(wl.spec, wl.spec_hash, found, self.opts.measurement_record_ttl)
        reusing = Workload(
            wl.name,
            wl.namespace,
            wl.generation,
            wl.spec,
            wl.spec_hash,
            reuse_previous(wl.previous, m),
        )
        then: Plan = run(reusing)
        source = found.record.spec.result
        text = (
            f"reused GPUMeasurement {found.record.name} (measured for "
            f"{source.source_namespace}/{source.source_name} on {source.node_name or '?'} at "
            f"{source.completed_at}) instead of starting a {self.config.runner}"
        )
        before = real_prev.measurement if real_prev is not None else None
        actions = tuple(a for a in then.actions if not isinstance(a, StartJob))
        if before is None or before.reused_from != found.record.name:
            actions = (*actions, Emit("Normal", "MeasurementReused", text))
        log.info("%s/%s: %s", *key, text)
        # The namespace's GPU-second charges travel with the status (see _charged).
        status = then.status
        if status.measurement_usage != plan.status.measurement_usage:
            status = status.model_copy(update={"measurement_usage": plan.status.measurement_usage})
        return Plan(status, actions)

    def _quota_refused(
        self,
        key: Key,
        wl: Workload,
        plan: Plan,
        stored: Mapping[str, Any],
        exc: QuotaExceeded,
        now: str,
    ) -> Plan:
        """A ResourceQuota refused the measurement Job: the workload waits in the queue (in its
        place) and its namespace is offered no slot for a while; the measurement has not
        failed."""
        namespace = key[0]
        self._quota_blocked[namespace] = time.monotonic() + self.opts.quota_retry_seconds
        text = str(exc)
        self._quota_text[namespace] = text
        self.slots.enter(key, _queued_since(stored) or now)
        verdict = self.slots.admit(key, self._running(), self._limit_of, self._blocked())
        if self._say(key, "quota", text):
            log.warning("%s/%s: measurement Job refused by quota, queued: %s", *key, text)
        return self._queued(key, wl, plan, verdict, now)

    def _count_resume(self, key: Key, wrote: bool) -> None:
        """Count the resume after a (re)start: once every workload known at the first decision
        has been decided, say how long that took and how many statuses it wrote (over settled
        workloads: none, issue 17)."""
        if self._resuming is None:
            return
        self._resume_writes += wrote
        self._resuming.discard(key)
        if not self._resuming:
            self._resuming = None
            self._resume_done = True
            log.info(
                "resumed: every workload known at the start decided, %.1f s after the start, "
                "%d status writes",
                time.monotonic() - self._started,
                self._resume_writes,
            )

    def _previous(self, key: Key, status: Mapping[str, Any]) -> GPUWorkloadStatus | None:
        if not status or not status.get("phase"):
            return None
        try:
            previous = GPUWorkloadStatus.model_validate(status)
        except ValueError as exc:
            if self._say(key, "status", "unreadable"):
                log.warning(
                    "%s/%s: stored status unreadable, deciding from scratch: %s",
                    *key,
                    str(exc).splitlines()[0],
                )
            return None
        self._unsay(key, "status")
        return previous

    def _observe(self, namespace: str, name: str, uid: str, m: MeasurementStatus) -> Outcome:
        now = datetime.datetime.now(datetime.UTC)
        for job in self.backend.jobs(namespace, name):
            if job.name == m.job_name and job.owner_uid == uid and not job.deleting:
                self._job_uids[(namespace, name)] = job.uid
                return self.backend.observe(namespace, job, now)
        return Outcome(OutcomeKind.Missing, "the measurement Job does not exist")

    def _deadline(self, plan: Plan, outcome: Outcome | None) -> float | None:
        """Seconds until the observation can change by time alone: an unschedulable measurement
        pod reaching its timeout, a Job that ended with its pod's result still on its way; None
        when only an event can change it (nothing pending)."""
        if outcome is None or plan.status.phase is not Phase.Measuring:
            return None
        if outcome.wait_seconds is not None:
            return max(0.5, outcome.wait_seconds)
        if outcome.kind is not OutcomeKind.Unschedulable:
            return None
        left = self.config.unschedulable_timeout_seconds - outcome.seconds_unschedulable
        return max(0.5, left + 0.5)

    # ----------------------------------------------------------------------- Jobs

    async def _jobs(
        self,
        key: Key,
        uid: str,
        plan: Plan,
        body: Mapping[str, Any],
        spec: Any,
        hash_: str | None,
        stored: Mapping[str, Any],
    ) -> list[JobView]:
        """Delete every Job the plan does not want, then start (or adopt) the one it does.

        Returned, not deleted: the unwanted Jobs whose outcome the stored status does not hold
        yet (the Job it names for the current spec: a CUDA OOM moving on to a larger class, a
        pod unschedulable past its deadline). They are the only record of that outcome until
        the new status is written; deleted first, a kill or a failed write in between would
        leave a status naming a Job that is gone, and the Job would be created again.
        """
        namespace, name = key
        m = plan.status.measurement
        # The Job the status names is kept, running or done (its result may still be on its way
        # through the pod watch; a finished one stays for its logs until ttlSecondsAfterFinished).
        kept = m.job_name if m is not None and m.spec_hash == hash_ else None
        old = stored.get("measurement")
        old = old if isinstance(old, Mapping) else {}
        unrecorded = old.get("jobName") if old.get("specHash") == hash_ else None
        to_delete = {a.name for a in plan.actions if isinstance(a, DeleteJob)}
        later: list[JobView] = []
        now = datetime.datetime.now(datetime.UTC)
        for job in self.backend.jobs(namespace, name):
            if job.deleting or job.owner_uid is None:
                continue  # going already; or not a GPUWorkload's Job: never ours to delete
            # A Job of an earlier GPUWorkload of this name (deleted and re-created) is an
            # orphan, as the garbage collector also knows.
            orphan = job.owner_uid != uid
            # Finished by its pod's end too: the Job controller's Complete comes after the pod's
            # result, and a finished Job stays for its logs (ttlSecondsAfterFinished).
            finished = job.finished or self.backend.observe(namespace, job, now).finished
            unwanted = job.name in to_delete or (job.name != kept and not finished)
            if orphan:
                await self._delete(key, job)
            elif unwanted and job.name == unrecorded:
                later.append(job)
            elif unwanted:
                await self._delete(key, job)
        for action in plan.actions:
            if isinstance(action, StartJob):
                assert spec is not None and hash_ is not None
                await self._start(key, uid, action, spec, hash_, body)
        return later

    async def _delete(self, key: Key, job: JobView) -> None:
        try:
            await self.backend.delete(key[0], job)
        except kube.ApiError as exc:
            raise BackendError(f"deleting Job {job.name}: {exc}") from exc
        log.info("%s/%s: deleted Job %s (uid %s)", *key, job.name, job.uid)
        version = self._dra_version
        if version is not None and self._client is not None:
            # Its ResourceClaimTemplate, if it had one (owned by the workload, so the garbage
            # collector would take it with the workload; a retry on another class should not
            # leave it behind until then).
            group, ver = version.split("/", 1)
            path = kube.object_path(
                group, ver, "resourceclaimtemplates", job.namespace or key[0], job.name
            )
            try:
                await self._client.delete(path)
            except kube.NotFound:
                pass  # the Job had none (it requested an extended resource)
            except kube.ApiError as exc:
                log.warning("%s/%s: ResourceClaimTemplate %s not deleted: %s", *key, job.name, exc)

    async def _start(
        self,
        key: Key,
        uid: str,
        action: StartJob,
        spec: Any,
        hash_: str,
        body: Mapping[str, Any],
    ) -> None:
        namespace, name = key
        for job in self.backend.jobs(namespace, name):
            if job.name == action.name and job.owner_uid == uid and not job.deleting:
                # Known to exist (the watch, or our own creation whose status write failed).
                log.info("%s/%s: adopted existing Job %s", namespace, name, action.name)
                return
        where = self._job_namespace(namespace, spec)
        req = JobRequest(
            namespace=where,
            workload=name,
            workload_uid=uid,
            spec_hash=hash_,
            gpu_class=action.gpu_class,
            gpus=action.gpus,
            memory_bytes=action.memory_bytes,
            image=spec.measurement.image or self.opts.probe_image,
            name=action.name,
            image_pull_secrets=self.opts.probe_image_pull_secrets,
            priority_class_name=self.opts.measurement_priority_class,
            kueue_queue=self._kueue_queue(namespace) if where == namespace else None,
            mig_strategy=self.mig_strategy(action.gpu_class.name),
            catalog=self.config.catalog,
            claim_template=await self._claim_template(key, uid, action, spec, where),
            measurement_key=(
                self._job_key(spec, action.gpu_class) if self._sharing(namespace) else None
            ),
            workload_namespace=namespace,
        )
        try:
            _, created = await self.backend.start(job_manifest(spec, req))
        except JobConflict as exc:
            text = f"{exc}; not adopting it"
            if self._say(key, "conflict", text):
                log.error("%s/%s: %s", namespace, name, text)
                self._emit(body, Emit("Warning", "JobNameConflict", text))
            raise Requeue(CONFLICT_RETRY_SECONDS, text) from exc
        except JobTerminating as exc:
            raise Requeue(TERMINATING_RETRY_SECONDS, str(exc)) from exc
        except kube.ApiError as exc:
            raise BackendError(f"creating Job {action.name}: {exc}") from exc
        self._unsay(key, "conflict")
        runner = self.config.runner
        if runner == "Job":
            verb = ("created" if created else "adopted existing") + " Job"
        else:
            verb = ("started" if created else "found running") + f" {runner}"
        log.info(
            "%s/%s: %s %s on class %s%s",
            namespace,
            name,
            verb,
            action.name,
            action.gpu_class.name,
            f" in namespace {where} (a measurement that may be shared)"
            if where != namespace
            else "",
        )

    async def _claim_template(
        self, key: Key, uid: str, action: StartJob, spec: Any, where: str
    ) -> str | None:
        """Create (or find) the ResourceClaimTemplate of a Job whose class is claimed through
        DRA, in the Job's namespace ``where``; its name (the Job's), or None for a Job that
        requests an extended resource. In the operator's own namespace it names its workload
        in annotations, as the Job does (no owner reference across namespaces)."""
        cls = action.gpu_class
        version = self._dra_version
        if cls.name not in self._claimed or version is None or self._client is None:
            return None
        if self.config.runner != "Job":
            return None
        namespace, name = key
        products = {p for n in self._dra.values() for c, p in n.products if c == cls.name}
        owner = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        body = claim_template(
            version,
            action.name,
            where,
            owner if where == namespace else None,
            cls,
            job_gpu_count(spec, action.gpus),
            products,
            {LABEL_MANAGED_BY: MANAGED_BY},
        )
        if where != namespace:
            body["metadata"]["annotations"] = {
                ANNOTATION_WORKLOAD: name,
                ANNOTATION_WORKLOAD_NAMESPACE: namespace,
                ANNOTATION_WORKLOAD_UID: uid,
            }
        group, ver = version.split("/", 1)
        path = kube.collection_path(group, ver, "resourceclaimtemplates", where)
        try:
            await self._client.create(path, body)
        except kube.Conflict:
            # Created before (a retry, or a restarted operator): adopted when it is this
            # workload's (its name comes from the workload's uid and spec hash, as the Job's).
            try:
                existing = await self._client.get(f"{path}/{action.name}")
            except kube.ApiError as exc:
                raise BackendError(f"reading ResourceClaimTemplate {action.name}: {exc}") from exc
            if owner_uid(existing, self.opts.operator_namespace) != uid:
                raise BackendError(
                    f"ResourceClaimTemplate {where}/{action.name} exists and is not owned by "
                    f"GPUWorkload {namespace}/{name} (uid {uid}); delete it"
                ) from None
        except kube.ApiError as exc:
            raise BackendError(f"creating ResourceClaimTemplate {action.name}: {exc}") from exc
        else:
            log.info(
                "%s/%s: created ResourceClaimTemplate %s (%s, %s)",
                namespace,
                name,
                action.name,
                cls.name,
                body["spec"]["spec"]["devices"]["requests"][0],
            )
        return action.name

    # ----------------------------------------------------------------------- status

    async def _write(
        self, key: Key, body: Mapping[str, Any], stored: Mapping[str, Any], plan: Plan
    ) -> bool:
        """Write the plan's status when it differs from the stored one; True when written."""
        new = plan.status.model_dump(by_alias=True, mode="json", exclude_none=True)
        if new == stored:
            return False
        assert self._client is not None
        namespace, name = key
        patch: dict[str, Any] = {"status": merge_patch(stored, new)}
        rv = _meta(body).get("resourceVersion")
        if rv:
            patch["metadata"] = {"resourceVersion": rv}
        path = kube.object_path(GROUP, VERSION, PLURAL, namespace, name, "status")
        try:
            answer = await self._client.merge_patch(path, patch)
        except kube.NotFound:
            return False  # deleted meanwhile; its DELETED event cleans up
        except kube.Conflict as exc:
            # The object changed since the decision: decide again from the fresh object.
            fresh = await self._client.get(
                kube.object_path(GROUP, VERSION, PLURAL, namespace, name)
            )
            if isinstance(fresh, Mapping):
                self._written[key] = _Written(slim_workload(fresh), time.monotonic())
            raise Requeue(0.0, f"status write conflicted ({exc}); deciding again") from exc
        if isinstance(answer, Mapping):
            self._written[key] = _Written(slim_workload(answer), time.monotonic())
        return True

    def _log_transition(self, key: Key, stored: Mapping[str, Any], plan: Plan) -> None:
        old_phase = stored.get("phase")
        if old_phase == plan.status.phase:
            return
        ready = next((c for c in plan.status.conditions if c.type == "Ready"), None)
        log.info(
            "%s/%s: %s -> %s: %s",
            *key,
            old_phase or "(new)",
            plan.status.phase,
            ready.message if ready else "",
        )

    # ----------------------------------------------------------------------- deletion

    async def _clean_up(self, key: Key, body: Mapping[str, Any] | None) -> None:
        """The workload is gone (or going): delete its Jobs, forget what was kept for it. (A
        real API server's garbage collector also deletes them through ownerReferences; doing it
        here covers clusters and emulators without one, and a re-created namesake's view.)"""
        for job in self.backend.jobs(*key):
            if not job.deleting and job.owner_uid is not None:
                await self._delete(key, job)
        self._dequeue(key)
        self._forget_waiter(key)
        self._wake()
        if body is None:
            self._written.pop(key, None)
            self._said.pop(key, None)
            self._resumed.discard(key)
            self._forget_metrics(key)

    # ----------------------------------------------------------------------- events, logs

    def _say(self, key: Key, topic: str, text: str) -> bool:
        """True the first time ``text`` is said about ``key`` on ``topic`` in a row: the same
        warning is not repeated while nothing changes."""
        said = self._said.setdefault(key, {})
        if said.get(topic) == text:
            return False
        said[topic] = text
        return True

    def _unsay(self, key: Key, topic: str) -> None:
        said = self._said.get(key)
        if said is not None:
            said.pop(topic, None)
            if not said:
                del self._said[key]

    def _failed(self, key: Key, exc: BaseException, delay: float) -> None:
        metrics.RECONCILE_ERRORS.labels("reconcile").inc()
        text = str(exc) or type(exc).__name__
        if self._say(key, "failure", text):
            level = (
                logging.WARNING if isinstance(exc, (kube.ApiError, BackendError)) else logging.ERROR
            )
            log.log(
                level,
                "%s/%s: %s; retrying in %.1f s (and with growing delays while it fails)",
                *key,
                text,
                delay,
                exc_info=level == logging.ERROR,
            )

    def _emit(self, body: Mapping[str, Any], action: Emit) -> None:
        if self._events is None:
            return
        meta = _meta(body)
        involved = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        }
        with contextlib.suppress(asyncio.QueueFull):  # Events are best effort
            self._events.put_nowait((involved, action.type_, action.reason, action.message))

    async def _post_events(self) -> None:
        assert self._events is not None and self._client is not None
        while True:
            involved, type_, reason, message = await self._events.get()
            try:
                await self._post(involved, type_, reason, message)
            finally:
                self._events.task_done()

    async def _post(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post one Event: three tries while the API is unavailable, then dropped (Events are
        best effort; the status carries the same facts)."""
        assert self._client is not None
        for attempt in range(3):
            try:
                await self._client.post_event(involved, type_=type_, reason=reason, message=message)
                return
            except kube.Unavailable:
                await asyncio.sleep(0.5 * 2**attempt)
            except kube.ApiError as exc:
                log.debug("event %s on %s not posted: %s", reason, involved.get("name"), exc)
                return

    # ----------------------------------------------------------------------- metrics

    def _record_metrics(self, key: Key, status: GPUWorkloadStatus) -> None:
        namespace, name = key
        if status.estimate is not None:
            wire = status.estimate.per_gpu.model_dump(by_alias=True)
            # Byte fields only: perGpu also carries display-only figures (totalGiB).
            components = {}
            for component in metrics.ESTIMATE_COMPONENTS:
                value = wire.get(f"{component}Bytes")
                if isinstance(value, int):
                    components[component] = value
            metrics.WORKLOADS.estimated(namespace, name, components)
        m = status.measurement
        if m is not None and m.completed_at and m.device == "cuda":
            peaks = {
                kind: value
                for kind, value in (
                    ("allocated", m.peak_allocated_bytes),
                    ("reserved", m.peak_reserved_bytes),
                    ("device", m.peak_device_used_bytes),
                )
                if value is not None
            }
            metrics.WORKLOADS.measured(namespace, name, peaks)
        rec = status.recommendation
        metrics.WORKLOADS.headroom(
            namespace,
            name,
            None if rec is None else (rec.gpu_class, str(rec.basis), rec.headroom_fraction),
        )

    def _forget_metrics(self, key: Key) -> None:
        metrics.WORKLOADS.forget(*key)


def _class_named(catalog: Iterable[Any], name: str | None) -> Any:
    """The catalog class called ``name``, or None."""
    return next((c for c in catalog if c.name == name), None)


def _shown_position(position: int) -> tuple[bool, int]:
    """How a queue position is written: exactly up to :data:`POSITIONS_SHOWN` (False, n), else
    "over T" (True, T) for the largest step T of :data:`POSITION_STEPS` below it."""
    if position <= POSITIONS_SHOWN:
        return False, position
    return True, max(t for t in POSITION_STEPS if t < position)


def _load_policy(opts: Options) -> Policy | None:
    """The namespace policy file, for its measurement settings; None without one. An invalid
    file stops ``gpu-sizer operator`` before it starts (``options_from``), with or without the
    webhook; here (a file changed since) it only means no per-namespace measurement settings."""
    if not opts.policy_file:
        return None
    try:
        return load_policy(opts.policy_file, default_headroom=opts.default_headroom)
    except PolicyError as exc:
        log.error("namespace policy ignored for measurements: %s", exc)
        return None


def _labels_of(obj: Any) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


def _queued_since(status: Any) -> str | None:
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


def _charged(
    plan: Plan,
    prev: GPUWorkloadStatus | None,
    outcome: Outcome | None,
    watched: MeasurementStatus | None,
) -> tuple[Plan, int]:
    """``plan`` with ``status.measurementUsage`` carried over from ``prev``, and the Job that
    ``outcome`` saw end charged to it (once: see :func:`gpu_time.charge`); with the GPU-seconds
    newly charged (0 when none)."""
    before = usage = prev.measurement_usage if prev is not None else None
    if outcome is not None and outcome.finished:
        est = plan.status.estimate or (prev.estimate if prev is not None else None)
        gpus = est.gpu_count if est is not None else 1
        usage = gpu_time.charge(usage, watched, gpus, datetime.datetime.now(datetime.UTC))
    seconds = 0
    if usage is not None and usage != before:
        same_day = before is not None and before.day == usage.day
        seconds = usage.gpu_seconds - (before.gpu_seconds if same_day and before else 0)
    if usage == plan.status.measurement_usage:
        return plan, seconds
    status = plan.status.model_copy(update={"measurement_usage": usage})
    return replace(plan, status=status), seconds


def _observe_outcome(
    outcome: Outcome, plan: Plan, prev: GPUWorkloadStatus | None, namespace: str
) -> None:
    """Count a measurement that ended (the first time its ending is written), and the
    GPU-seconds it held in its namespace."""
    if not outcome.finished and outcome.kind not in (
        OutcomeKind.Unschedulable,
        OutcomeKind.Missing,
    ):
        return
    m = plan.status.measurement
    reason = (m.reason if m and m.completed_at and m.reason else None) or (
        "OutOfMemory"
        if outcome.result is not None and outcome.result.out_of_memory
        else str(outcome.kind)
    )
    if outcome.kind is OutcomeKind.Unschedulable and not (m and m.reason == "NoNodeOfClass"):
        return
    metrics.MEASUREMENT_OUTCOMES.labels(reason).inc()
    started = parse_time(prev.measurement.started_at if prev and prev.measurement else None)
    if started is not None:
        now = datetime.datetime.now(datetime.UTC)
        seconds = max(0.0, (now - started).total_seconds())
        metrics.MEASUREMENT_DURATION.labels(reason).observe(seconds)
        gpus = plan.status.estimate.gpu_count if plan.status.estimate else 1
        metrics.MEASUREMENT_GPU_SECONDS.labels(namespace).inc(gpus * seconds)
