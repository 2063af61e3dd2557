"""Reconcile one GPUWorkload: read what is known, decide purely, act on Jobs, write the status once.

Level-triggered, as Kubernetes controllers are: every event about a workload (its own object,
its measurement Job, the Job's pods, a GPU node joining) only marks the workload in the
:class:`~gpu_sizer.controller.workqueue.WorkQueue`; :meth:`Reconciler.reconcile` then reads the
latest state into a :class:`~gpu_sizer.lifecycle.step.Snapshot`, runs the pure decision
(:mod:`gpu_sizer.lifecycle.step` over the core's :func:`gpu_sizer.lifecycle.decide`) and
applies it. Nothing polls: a measurement is followed through its Job's and pods' watch events,
and the only timer is the unschedulable deadline of a pod that waits for a node.

What a decision rests on, so that it is right after a restart, a lost write or a slow watch:

- **Confirmed state.** The watch lags behind the operator's own writes. The workload's status
  is taken from the operator's last status write until the watch has caught up with it
  (:class:`~gpu_sizer.controller.workloads.WorkloadIndex`), and Jobs from the backend's overlay
  of its own creations and deletions
  (:class:`~gpu_sizer.measurement.backends.KubernetesJobBackend`); pods are matched to their Job
  by uid. Status writes carry the ``resourceVersion`` the decision was made on; a 409 means the
  object changed meanwhile, so the decision is made again from the fresh object, never re-sent.
- **Writes land.** A failed write (5xx, 429, timeout, conflict) fails the reconcile, and the
  queue retries the workload with growing backoff until the write lands or the object is gone.
- **Nothing written for nothing.** A status equal to the stored one is not written; the
  decision keeps transition times of unchanged conditions, so resuming over settled workloads
  costs a spec hash and a comparison each, and no API call.
- **At most one live Job** (:class:`~gpu_sizer.controller.jobs.JobActuator`).

The state lives in small collaborators, one module each: the workload index, the inventory
cache, the namespace policy cache, the measurement slots, the shared record store, the
calibration cache, the Job actuator, the status writer and the event recorder. The Reconciler
wires them and runs the decision.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpu_sizer import metrics
from gpu_sizer.api.record import key_label
from gpu_sizer.controller import kube
from gpu_sizer.controller.calibration_cache import CalibrationCache
from gpu_sizer.controller.events import EventRecorder, Said
from gpu_sizer.controller.inventory_cache import InventoryCache, InventoryChange
from gpu_sizer.controller.jobs import JobActuator
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.policy_cache import PolicyCache
from gpu_sizer.controller.record_store import RecordStore
from gpu_sizer.controller.resume import ResumeLog
from gpu_sizer.controller.slots import Slots
from gpu_sizer.controller.snapshot import SnapshotReader
from gpu_sizer.controller.status_writer import (
    StatusWriter,
    log_transition,
    observe_outcome,
)
from gpu_sizer.controller.workloads import (
    CompactWorkload,
    Key,
    WorkloadIndex,
    merge_patch,
    slim_workload,
)
from gpu_sizer.controller.workqueue import WorkQueue
from gpu_sizer.inventory.dra import DraNode
from gpu_sizer.inventory.nodes import GpuNode, IgnoredNode, Inventory, MigStrategy
from gpu_sizer.lifecycle import Config, Emit, Plan, StartJob
from gpu_sizer.lifecycle.step import class_named, finish, next_decision, queued
from gpu_sizer.lifecycle.step import decide as decide_plan
from gpu_sizer.measurement.backends import Backend, BackendError, JobView, QuotaExceeded
from gpu_sizer.measurement.outcome import Outcome
from gpu_sizer.policy.namespace import EffectivePolicy
from gpu_sizer.records.calibration import Calibration

__all__ = ["CompactWorkload", "Key", "Reconciler", "merge_patch", "slim_workload"]

log = logging.getLogger("gpu_sizer.controller")


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
        self.said = Said()
        self.events = EventRecorder(self._api)
        self.workloads = WorkloadIndex()
        self.nodes = InventoryCache(opts.catalog)
        self.policy = PolicyCache(opts, self._api, self.said)
        self.slots = Slots(opts, backend, self.policy, self.workloads, self.queue.add, self._api)
        self.records = RecordStore(
            opts,
            self.config,
            backend,
            self.workloads,
            self.nodes.drivers,
            self.queue.add,
            self._api,
            self.said,
        )
        self.calibrations = CalibrationCache(
            opts.calibration, lambda: self.records.index, self.said
        )
        self.jobs = JobActuator(
            opts,
            self.config,
            backend,
            self._api,
            self.nodes,
            self.policy,
            self.records,
            self.events,
            self.said,
        )
        self.status = StatusWriter(self._api, self.workloads)
        self.snapshots = SnapshotReader(
            opts,
            self.config,
            self.said,
            self.nodes,
            self.policy,
            self.records,
            self.calibrations,
            self.jobs,
        )
        self.resume = ResumeLog()
        backend.notify = self.notify

    def _api(self) -> kube.Client | None:
        return self._client

    # The watch indexes, as the collaborators read them (tests fill them directly).
    @property
    def _workloads(self) -> Mapping[Any, Iterable[Mapping[str, Any]]]:
        return self.workloads.index

    @_workloads.setter
    def _workloads(self, index: Mapping[Any, Iterable[Mapping[str, Any]]]) -> None:
        self.workloads.index = index

    @property
    def _records(self) -> Mapping[Any, Iterable[Mapping[str, Any]]]:
        return self.records.index

    @_records.setter
    def _records(self, index: Mapping[Any, Iterable[Mapping[str, Any]]]) -> None:
        self.records.index = index

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
        self.workloads.index = workloads
        if records is not None:
            self.records.start(records)
        self.resume.started = time.monotonic()
        self.events.start()
        self.queue.start()

    async def stop(self) -> None:
        """Stop the workers and timers, post the Events still queued (for at most 2 s), stop
        the poster (operator shutdown)."""
        await self.queue.stop(grace=2.0)
        self.slots.stop()
        await self.records.stop()
        await self.events.stop()

    def notify(self, namespace: str, name: str) -> None:
        """Something about the workload changed (its Job, its pod): reconcile it."""
        self.queue.add((namespace, name))

    # ----------------------------------------------------------------------- watch events

    def node_seen(self, name: str, parsed: GpuNode | IgnoredNode | None) -> bool:
        """Node ``name`` is now ``parsed`` (None: gone, or no GPUs). True when that changed
        the node's entry; the workloads it concerns are decided again."""
        return self._inventory_changed(self.nodes.node_seen(name, parsed))

    def slice_seen(self, name: str, body: Mapping[str, Any] | None) -> bool:
        """ResourceSlice ``name`` is now ``body`` (None: deleted). True when that changed what
        the slices offer; the workloads it concerns are decided again."""
        return self._inventory_changed(self.nodes.slice_seen(name, body))

    def _inventory_changed(self, change: InventoryChange | None) -> bool:
        """Decide again the workloads measured on a class whose nodes report another NVIDIA
        driver major (their measurements are checked against it), and, when the present
        classes changed, those waiting for a node of their class."""
        if change is None:
            return False
        for key, body in self.workloads.all():
            status = body.get("status")
            m = status.get("measurement") if isinstance(status, Mapping) else None
            if not isinstance(m, Mapping):
                continue
            if m.get("gpuClass") in change.drivers or (
                change.present and m.get("reason") == "NoNodeOfClass"
            ):
                self.queue.add(key)
        return True

    def record_seen(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """The watch delivered a GPUMeasurement: calibration follows it; the workloads waiting
        for its key, or (when it is gone) that reused or produced it, decide again."""
        name = str((body.get("metadata") or {}).get("name") or "")
        self.calibrations.record_seen(name, None if event_type == "DELETED" else body)
        self.records.record_seen(event_type, body)

    def job_seen(self, body: Mapping[str, Any]) -> None:
        """A measurement Job changed: the workloads waiting for its key decide again."""
        self.records.job_seen(body)

    # ----------------------------------------------------------------------- reading

    def workload(self, key: Key) -> Mapping[str, Any] | None:
        """The newest state known of the workload (see :meth:`WorkloadIndex.workload`)."""
        return self.workloads.workload(key)

    def calibration(self) -> Calibration | None:
        """The factors learned from the shared records (:class:`CalibrationCache`)."""
        return self.calibrations.calibration()

    def inventory(self) -> Inventory:
        """The GPU nodes known, and the nodes ignored with their reasons."""
        return self.nodes.inventory()

    def present(self) -> frozenset[str]:
        """The GPU classes with at least one node in the cluster."""
        return self.nodes.present()

    def dra_nodes(self) -> Mapping[str, DraNode]:
        """What the ResourceSlices seen offer, per node."""
        return self.nodes.dra_nodes()

    def mig_strategy(self, gpu_class: str) -> MigStrategy:
        """How the cluster's nodes offer ``gpu_class`` (MIG ``mixed`` or ``single``)."""
        return self.nodes.mig_strategy(gpu_class)

    async def _namespace_policy(self, namespace: str) -> EffectivePolicy | None:
        return await self.policy.read(namespace)

    def _limit_of(self, namespace: str) -> int | None:
        return self.policy.limit_of(namespace)

    def _kueue_queue(self, namespace: str) -> str | None:
        return self.policy.kueue_queue(namespace)

    def _in_flight(self, key: str, me: Key) -> tuple[str, datetime.datetime | None] | None:
        return self.records.in_flight(key, me)

    # ----------------------------------------------------------------------- the decision

    async def reconcile(self, key: Key) -> float | None:
        """Decide and act for one workload; seconds until it must be decided again, or None.

        :raises kube.ApiError, BackendError: a write did not land (the queue retries).
        """
        self.resume.begin(lambda: (k for k, _ in self.workloads.all()))
        await self.slots.read_ledger()
        namespace = key[0]
        body = self.workload(key)
        raw_meta = body.get("metadata") if body is not None else None
        meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
        if body is None or meta.get("deletionTimestamp"):
            self.jobs.job_uids.pop(key, None)
            await self._clean_up(key, body)
            self.resume.counted(key, False)
            return None
        uid = str(meta.get("uid") or "")
        raw_status = body.get("status")
        stored = raw_status if isinstance(raw_status, Mapping) else {}
        snap, uids = await self.snapshots.read(key, body, stored)
        decision = decide_plan(snap)
        if decision.look_up is not None:
            assert snap.spec is not None
            found = self.records.find(
                key,
                snap.spec,
                decision.look_up.gpu_class,
                snap.present,
                decision.plan.status.estimate,
            )
            decision = decide_plan(replace(snap, looked_up=True, shared=found))
        plan, outcome = decision.plan, decision.outcome
        if decision.observed is not None and decision.observed.job_name in uids:
            self.jobs.job_uids[key] = uids[decision.observed.job_name]
        if decision.charged_seconds:
            assert decision.observed is not None
            job_uid = self.jobs.job_uids.get(key) or f"{uid}/{decision.observed.job_name}"
            await self.slots.charge_ledger(namespace, job_uid, decision.charged_seconds)
        elif self.slots.ledger_pending(namespace):
            await self.slots.charge_ledger(namespace, "", 0)  # a write that did not land earlier
        if decision.wait is not None:
            self.records.wait_for(key, decision.wait)
        else:
            self.records.forget_waiter(key)
        if decision.reused is not None:
            log.info("%s/%s: %s", *key, decision.reused)
        wl = snap.workload()
        reserved = retry_quota = False
        if wl is not None and decision.starts:
            wanted = [a.name for a in plan.actions if isinstance(a, StartJob)]
            wait, reserved = self.slots.admit(key, wanted, stored, snap.now)
            if wait is not None:
                plan = queued(plan, wl, self.config, wait, snap.now)
            # Waiting on a quota refusal: try again when its namespace's pause ends.
            retry_quota = not reserved and self.slots.quota_paused(namespace)
        else:
            self.slots.dequeue(key)
        claimed: list[str] = []
        if snap.spec is not None and snap.sharing:
            trusted = self.jobs.where(namespace, snap.spec) != namespace
            for action in plan.actions:
                if isinstance(action, StartJob):
                    claim = self.records.job_key(snap.spec, action.gpu_class)
                    if self.records.claim(claim, key, trusted or self.config.runner != "Job"):
                        claimed.append(claim)
        recorded: list[JobView] = []
        try:
            recorded = await self.jobs.act(key, uid, plan, body, snap.spec, snap.spec_hash, stored)
        except QuotaExceeded as exc:
            assert wl is not None
            text = str(exc)
            wait = self.slots.quota_refused(key, text, stored, snap.now)
            if self.said.say(key, "quota", text):
                log.warning("%s/%s: measurement Job refused by quota, queued: %s", *key, text)
            plan = queued(plan, wl, self.config, wait, snap.now)
            retry_quota = True
        finally:
            for claim in claimed:
                self.records.unclaim(claim)
            if reserved:
                self.slots.release(namespace)
        if snap.spec is not None:
            await self.policy.read(namespace)
        at = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        done = finish(
            plan,
            snap.spec,
            snap.previous.measurement if snap.previous is not None else None,
            config=self.config,
            probe_image=self.opts.probe_image,
            node_driver=self.nodes.node_driver,
            sharing=self.policy.sharing(namespace),
            publish_at=at,
            record_ttl_seconds=self.opts.measurement_record_ttl,
            now=snap.now,
            mixed=self.nodes.mixed,
        )
        for m in done.publish:
            assert snap.spec is not None
            await self.records.publish(key, done.plan, snap.spec, at, m)
        plan = done.plan
        changed = await self.status.write(key, body, stored, plan)
        ended = plan.status.measurement
        if snap.spec is not None and ended is not None and ended.completed_at and changed:
            # Whatever its outcome, the workloads waiting for this measurement decide again.
            cls = class_named(self.config.catalog, ended.gpu_class)
            if cls is not None:
                self.records.wake_waiters(key_label(self.records.job_key(snap.spec, cls)))
        for job in recorded:  # their outcome is in the status now: they may go
            await self.jobs.delete(key, job)
        self.resume.decided(key, stored, plan, changed, meta)
        if changed:
            log_transition(key, stored, plan)
            for action in plan.actions:
                if isinstance(action, Emit):
                    self.events.emit(body, action)
            if outcome is not None:
                observe_outcome(outcome, plan, snap.deciding, namespace)
        self.said.unsay(key, "failure")
        self.slots.wake()
        return self._next_decision(key, plan, outcome, retry_quota)

    def _next_decision(
        self, key: Key, plan: Plan, outcome: Outcome | None, retry_quota: bool
    ) -> float | None:
        """Seconds until the workload must be decided again by time alone (None: only an
        event can change its decision)."""
        namespace = key[0]
        if retry_quota:
            frees = self.slots.budget_frees_in(namespace)
            if frees is not None:
                # Out of today's GPU-seconds: decided again when the budget frees (00:00 UTC).
                return max(1.0, frees + 1.0)
            return self.slots.quota_pause_left(namespace)
        return next_decision(
            plan,
            outcome,
            unschedulable_timeout_seconds=self.config.unschedulable_timeout_seconds,
            wait_ends=self.records.wait_ends(key),
            revalidate_after_seconds=self.opts.measurement_revalidate_after,
            now=datetime.datetime.now(datetime.UTC),
        )

    async def _clean_up(self, key: Key, body: Mapping[str, Any] | None) -> None:
        """The workload is gone (or going): delete its Jobs, forget what was kept for it. (A
        real API server's garbage collector also deletes them through ownerReferences; doing it
        here covers clusters and emulators without one, and a re-created namesake's view.)"""
        await self.jobs.delete_all(key)
        self.slots.dequeue(key)
        self.records.forget_waiter(key)
        self.slots.wake()
        if body is None:
            self.workloads.forget(key)
            self.said.forget(key)
            self.resume.forget(key)
            metrics.WORKLOADS.forget(*key)

    def _failed(self, key: Key, exc: BaseException, delay: float) -> None:
        metrics.RECONCILE_ERRORS.labels("reconcile").inc()
        text = str(exc) or type(exc).__name__
        if self.said.say(key, "failure", text):
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
