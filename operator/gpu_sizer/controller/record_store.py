"""Shared measurement records (GPUMeasurement): what they offer, who waits for them, publishing.

A measurement's result is worth the GPU time it took, so it is published as a cluster-scoped
GPUMeasurement named by its measurement key (:mod:`gpu_sizer.api.record`); a workload of the
same key reuses it instead of measuring, or waits for a measurement of that key in flight
rather than running a second one (:func:`gpu_sizer.records.sharing.find_shared`). A record is
Cluster scope only when no tenant could have written its result; otherwise it stays its namespace's.
Records expire (``--measurement-record-ttl``) and are deleted by a sweep
(:mod:`gpu_sizer.controller.record_sweep`).

The store overlays the record watch with this process's own writes: a record it created is
known until the watch shows it, and one it deleted is gone until the watch drops it, so a
decision right after a publish does not measure again.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpu_sizer.api import GROUP, VERSION, GPUWorkloadSpec, MeasurementStatus
from gpu_sizer.api.record import (
    KEY_LABEL,
    RECORD_PLURAL,
    GPUMeasurement,
    RecordEstimate,
    RecordScope,
    build_record,
    is_fresh,
    key_label,
    parse_record,
    record_name,
    record_names,
    reusable_by,
    shareable,
)
from gpu_sizer.catalog import GPUClass
from gpu_sizer.controller import kube
from gpu_sizer.controller.events import Said
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.record_sweep import RecordSweeper
from gpu_sizer.controller.workloads import Key, WorkloadIndex
from gpu_sizer.lifecycle import Config, Plan
from gpu_sizer.lifecycle.step import class_named, record_scope
from gpu_sizer.measurement.backends import Backend, JobView
from gpu_sizer.measurement.outcome import POD_RESULT_GRACE_SECONDS, parse_time
from gpu_sizer.records.checks import implausibilities
from gpu_sizer.records.sharing import (
    UNNAMED_JOB_GRACE_SECONDS,
    Reuse,
    Stale,
    Wait,
    candidate_keys,
    find_shared,
    stale,
    wait_until,
)

__all__ = ["RecordStore"]

log = logging.getLogger("gpu_sizer.controller")


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class RecordStore:
    """The record watch's index, this process's own record writes, the measurement keys being
    started, and the workloads waiting for a key.

    :param drivers: NVIDIA driver majors of the nodes offering a class (keys carry one).
    :param wake: marks a workload for a decision (the controller's work queue).
    :param client: the API client once the operator is connected (None before).
    """

    def __init__(
        self,
        opts: Options,
        config: Config,
        backend: Backend,
        workloads: WorkloadIndex,
        drivers: Callable[[str], frozenset[str]],
        wake: Callable[[Key], None],
        client: Callable[[], kube.Client | None],
        said: Said,
    ) -> None:
        self._opts = opts
        self._config = config
        self._backend = backend
        self._workloads = workloads
        self._drivers = drivers
        self._wake_one = wake
        self._client = client
        self._said = said
        #: The watch's index by name, the records this process created (until the watch shows
        #: them) and deleted (until the watch drops them).
        self.index: Mapping[Any, Iterable[Mapping[str, Any]]] = {}
        self._made: dict[str, GPUMeasurement] = {}
        self._gone: set[str] = set()
        self.sweeper = RecordSweeper(opts.measurement_record_ttl, client, lambda: self.index)
        #: Measurement keys a decision is starting a Job for right now -> the workload, and
        #: whether its result will be trusted (a Cluster record) or its namespace's own.
        self._claims: dict[str, tuple[Key, bool]] = {}
        #: Waiting workloads -> when their wait ends (they are decided again then).
        self._wait_until: dict[Key, datetime.datetime] = {}
        #: Workloads waiting for another one's measurement, by the key's label value.
        self._waiters: dict[str, set[Key]] = {}

    def start(self, index: Mapping[Any, Iterable[Mapping[str, Any]]]) -> None:
        """Follow the record watch's ``index``; start the expiry sweep."""
        self.index = index
        self.sweeper.start()

    async def stop(self) -> None:
        """Stop the expiry sweep."""
        await self.sweeper.stop()

    def image(self, spec: GPUWorkloadSpec) -> str:
        """The image a measurement of ``spec`` runs (its own, else ``--probe-image``)."""
        return spec.measurement.image or self._opts.probe_image

    def job_key(self, spec: GPUWorkloadSpec, gpu_class: GPUClass) -> str:
        """The key a Job of ``spec`` on ``gpu_class`` is labelled with (the first driver major
        among the class's nodes; waiters try every one)."""
        keys = candidate_keys(
            spec, gpu_class, probe_image=self.image(spec), drivers=self._drivers(gpu_class.name)
        )
        return keys[0].digest()

    # ----------------------------------------------------------------------- reading

    def named(self, name: str) -> GPUMeasurement | None:
        """The record called ``name`` as this process knows it (None: none, or deleted)."""
        if name in self._gone:
            return None
        for body in self.index.get(name, ()):
            parsed = parse_record(body)
            if parsed is not None:
                return parsed
        return self._made.get(name)

    def reusable(
        self, key: str, me: Key, estimate: Any, *, say: bool = True
    ) -> GPUMeasurement | None:
        """The record of ``key`` the workload ``me`` may reuse: the cluster's, else its
        namespace's own (:func:`~gpu_sizer.api.record.reusable_by`); fresh (its expiry capped
        by the TTL), of that very key, with a shareable result, and plausible against the
        workload's own ``estimate`` and the class (:mod:`gpu_sizer.records.checks`). A record
        that fails a check is said once and passed over: the workload measures instead."""
        now = datetime.datetime.now(datetime.UTC)
        for name in record_names(key, me[0]):
            rec = self.named(name)
            if rec is None or rec.spec.key != key or not reusable_by(rec, me[0]):
                continue
            if not is_fresh(rec, now, self._opts.measurement_record_ttl):
                continue
            limit = self._opts.measurement_revalidate_after
            taken = parse_time(rec.spec.result.completed_at)
            if limit and taken is not None and (now - taken).total_seconds() >= limit:
                continue  # older than the re-validation interval: measured again, not reused
            if not shareable(rec.spec.result):
                continue
            cls = class_named(self._config.catalog, rec.spec.gpu_class)
            problems = (
                ["its class is not in the catalog"]
                if cls is None
                else implausibilities(rec, cls, estimate, now)
            )
            if problems:
                if say and self._said.say(me, f"record {name}", "; ".join(problems)):
                    log.warning(
                        "%s/%s: GPUMeasurement %s not reused, implausible: %s",
                        *me,
                        name,
                        "; ".join(problems),
                    )
                continue
            return rec
        return None

    def in_flight(self, key: str, me: Key) -> tuple[str, datetime.datetime | None] | None:
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
        for namespace, job in self._backend.labelled(KEY_LABEL, key_label(key)):
            owner = (namespace, job.workload)
            if owner == me:
                continue
            trusted = bool(self._opts.operator_namespace) and (
                job.namespace == self._opts.operator_namespace
            )
            if self._config.runner != "Job":
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
        body = self._workloads.workload(owner)
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

    def find(
        self,
        me: Key,
        spec: GPUWorkloadSpec,
        first: GPUClass,
        present: frozenset[str],
        estimate: Any,
    ) -> Reuse | Wait | None:
        """What the shared records offer ``me``, whose measurement would start on ``first``
        (:func:`gpu_sizer.records.sharing.find_shared`)."""
        return find_shared(
            spec,
            first,
            self._config,
            present,
            probe_image=self.image(spec),
            drivers=self._drivers,
            record=lambda k: self.reusable(k, me, estimate),
            in_flight=lambda k: self.in_flight(k, me),
        )

    def stale(
        self, m: MeasurementStatus, spec: GPUWorkloadSpec, namespace: str, sharing: bool
    ) -> Stale | None:
        """Why the finished measurement ``m`` is taken again
        (:func:`gpu_sizer.records.sharing.stale`), its record gone included: a record this process
        let expire is no reason."""
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
            and sharing
            and not any(n in self.sweeper.expired for n in names)
        ):
            gone = all(self.named(n) is None for n in names)
        return stale(
            m,
            spec,
            self._config,
            probe_image=self.image(spec),
            drivers=self._drivers,
            record_gone=gone,
            now=now,
            revalidate_after_seconds=self._opts.measurement_revalidate_after,
        )

    # ----------------------------------------------------------------------- claims, waiters

    def claim(self, key: str, me: Key, trusted: bool) -> bool:
        """A decision of ``me`` starts a Job of ``key`` now (until :meth:`unclaim`); False when
        another decision holds it."""
        if key in self._claims:
            return False
        self._claims[key] = (me, trusted)
        return True

    def unclaim(self, key: str) -> None:
        """The Job of ``key`` is started (the backend lists it) or not: the claim ends."""
        self._claims.pop(key, None)

    def wait_for(self, me: Key, wait: Wait) -> None:
        """``me`` waits for the measurement of ``wait.key`` (woken when its Job or record
        changes, decided again at ``wait.until`` at the latest)."""
        self.forget_waiter(me)
        self._waiters.setdefault(key_label(wait.key), set()).add(me)
        if wait.until is not None:
            self._wait_until[me] = wait.until

    def wait_ends(self, me: Key) -> datetime.datetime | None:
        """When the wait of ``me`` ends (None: it does not wait)."""
        return self._wait_until.get(me)

    def wake_waiters(self, label: str) -> None:
        """The workloads waiting for the key with label value ``label`` decide again."""
        for key in self._waiters.pop(label, set()) if label else ():
            self._wake_one(key)

    def forget_waiter(self, me: Key) -> None:
        """``me`` waits no more."""
        self._wait_until.pop(me, None)
        for label in [lb for lb, keys in self._waiters.items() if me in keys]:
            self._waiters[label].discard(me)
            if not self._waiters[label]:
                del self._waiters[label]

    # ----------------------------------------------------------------------- watch events

    def record_seen(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """The watch delivered a GPUMeasurement: wake the workloads waiting for its key; when
        it is gone, the workloads that reused or produced it decide again."""
        meta = _meta(body)
        name = str(meta.get("name") or "")
        raw_labels = meta.get("labels")
        labels: Mapping[str, Any] = raw_labels if isinstance(raw_labels, Mapping) else {}
        self._made.pop(name, None)
        if event_type == "DELETED":
            self._gone.discard(name)
            for key, wl_body in self._workloads.all():
                status = wl_body.get("status")
                m = status.get("measurement") if isinstance(status, Mapping) else None
                if not isinstance(m, Mapping):
                    continue
                mk = m.get("measurementKey")
                if m.get("reusedFrom") == name or (
                    isinstance(mk, str) and name in record_names(mk, key[0])
                ):
                    self._wake_one(key)
        else:
            self.sweeper.poke()
        self.wake_waiters(str(labels.get(KEY_LABEL) or ""))

    def job_seen(self, body: Mapping[str, Any]) -> None:
        """A measurement Job changed: the workloads waiting for its key decide again."""
        labels = _meta(body).get("labels")
        if isinstance(labels, Mapping) and labels.get(KEY_LABEL):
            self.wake_waiters(str(labels[KEY_LABEL]))

    # ----------------------------------------------------------------------- publishing

    def scope(self, key: Key, m: MeasurementStatus, spec: GPUWorkloadSpec) -> RecordScope:
        """The scope of the record of the finished measurement ``m``, from the Job that ran it
        (found again by name) as the API has it
        (:func:`gpu_sizer.lifecycle.step.record_scope`)."""
        job = next((j for j in self._backend.jobs(*key) if j.name == m.job_name), None)
        return record_scope(
            spec,
            found=job is not None,
            job_image=job.image if job is not None else None,
            job_namespace=job.namespace if job is not None else None,
            operator_namespace=self._opts.operator_namespace,
            runner=self._config.runner,
            probe_image=self._opts.probe_image,
        )

    async def publish(
        self,
        key: Key,
        plan: Plan,
        spec: GPUWorkloadSpec,
        now: datetime.datetime,
        m: MeasurementStatus,
    ) -> None:
        """Create the GPUMeasurement of the measurement ``m`` that finished in this decision
        (``plan`` gives its estimate); its name comes from the key: a second try or a second
        producer finds it there."""
        if m.key_fields is None or not m.measurement_key or not shareable(m):
            return
        scope = self.scope(key, m, spec)
        private = scope is RecordScope.Namespace
        name = record_name(m.measurement_key, key[0] if private else None)
        existing = self.named(name)
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
            ttl_seconds=self._opts.measurement_record_ttl,
            scope=scope,
        )
        client = self._client()
        assert client is not None
        answer: Any = None
        if existing is not None:
            # A newer measurement of the key (re-validated, or taken after the old record went
            # stale): the record now holds it; its name, and its users' reusedFrom, stay.
            path = kube.object_path(GROUP, VERSION, RECORD_PLURAL, None, name)
            answer = await client.merge_patch(
                path, {"metadata": {"labels": body["metadata"]["labels"]}, "spec": body["spec"]}
            )
        else:
            path = kube.collection_path(GROUP, VERSION, RECORD_PLURAL, None)
            try:
                answer = await client.create(path, body)
            except kube.Conflict:
                answer = None  # another producer of the same key was first: the same facts
        parsed = parse_record(answer if isinstance(answer, Mapping) else body)
        if parsed is not None:
            self._made[name] = parsed
        self._gone.discard(name)
        log.info("%s/%s: published GPUMeasurement %s (scope %s)", *key, name, scope)
