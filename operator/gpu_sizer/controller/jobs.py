"""The measurement Job actuator: create, adopt, observe and delete a workload's Jobs.

At most one live Job per workload: every unfinished Job other than the one the status names
for the current spec is deleted, as are Jobs of a deleted (or re-created) workload of that
name. A Job is created idempotently (one of the wanted name and owner is adopted), in the
operator's own namespace when its result may be shared with other namespaces, and with a
ResourceClaimTemplate when its class is claimed through DRA. Jobs are matched to their owner
by uid, so a re-created namesake never adopts its predecessor's Job.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpu_sizer.api import API_VERSION, KIND, GPUWorkloadSpec, MeasurementStatus
from gpu_sizer.controller import kube
from gpu_sizer.controller.events import EventRecorder, Said
from gpu_sizer.controller.inventory_cache import InventoryCache
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.policy_cache import PolicyCache
from gpu_sizer.controller.record_store import RecordStore
from gpu_sizer.controller.workloads import Key
from gpu_sizer.controller.workqueue import Requeue
from gpu_sizer.inventory.dra import claim_template
from gpu_sizer.lifecycle import Config, DeleteJob, Emit, Plan, StartJob
from gpu_sizer.lifecycle.step import job_namespace
from gpu_sizer.measurement.backends import (
    Backend,
    BackendError,
    JobConflict,
    JobTerminating,
    JobView,
)
from gpu_sizer.measurement.job import (
    ANNOTATION_WORKLOAD,
    ANNOTATION_WORKLOAD_NAMESPACE,
    ANNOTATION_WORKLOAD_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    JobRequest,
    job_gpu_count,
    job_manifest,
    owner_uid,
)
from gpu_sizer.measurement.outcome import Outcome

__all__ = ["CONFLICT_RETRY_SECONDS", "TERMINATING_RETRY_SECONDS", "JobActuator"]

log = logging.getLogger("gpu_sizer.controller")

#: Retry delay while a Job of the wanted name is still being deleted.
TERMINATING_RETRY_SECONDS = 1.0
#: Retry delay after a Job name conflict with another object's Job (reported as an Event).
CONFLICT_RETRY_SECONDS = 60.0


class JobActuator:
    """Acts on a workload's measurement Jobs through the backend (Kubernetes Jobs, or local
    probe processes), and remembers the uid of the Job last observed per workload (its
    GPU-seconds are charged once per uid).

    :param client: the API client once the operator is connected (None before); it creates
        and deletes the ResourceClaimTemplates of DRA-claimed classes.
    """

    def __init__(
        self,
        opts: Options,
        config: Config,
        backend: Backend,
        client: Callable[[], kube.Client | None],
        inventory: InventoryCache,
        policy: PolicyCache,
        records: RecordStore,
        events: EventRecorder,
        said: Said,
    ) -> None:
        self._opts = opts
        self._config = config
        self._backend = backend
        self._client = client
        self._inventory = inventory
        self._policy = policy
        self._records = records
        self._events = events
        self._said = said
        #: The uid of the measurement Job last observed per workload (charged once per uid).
        self.job_uids: dict[Key, str] = {}

    def outcomes(self, key: Key, uid: str) -> tuple[Mapping[str, Outcome], dict[str, str]]:
        """Where each of the workload's own live Jobs stands, by Job name, and their uids (a
        Job of another owner uid, or being deleted, is not the workload's measurement).

        A Job is observed when the decision reads its entry (most decisions read none: a
        settled workload's Job is not looked at), and the uids fill as Jobs are observed.
        """
        jobs: dict[str, JobView] = {}
        for job in self._backend.jobs(*key):
            if job.owner_uid == uid and not job.deleting and job.name not in jobs:
                jobs[job.name] = job
        uids: dict[str, str] = {}
        return _Observed(self._backend, key[0], jobs, uids), uids

    def where(self, namespace: str, spec: GPUWorkloadSpec) -> str:
        """The namespace a new measurement Job of a workload of ``namespace`` runs in
        (:func:`gpu_sizer.lifecycle.step.job_namespace`)."""
        return job_namespace(
            namespace,
            spec,
            operator_namespace=self._opts.operator_namespace,
            runner=self._config.runner,
            sharing=self._policy.sharing(namespace),
            kueue_queue=self._policy.kueue_queue(namespace),
            probe_image=self._opts.probe_image,
        )

    async def act(
        self,
        key: Key,
        uid: str,
        plan: Plan,
        body: Mapping[str, Any],
        spec: GPUWorkloadSpec | None,
        hash_: str | None,
        stored: Mapping[str, Any],
    ) -> list[JobView]:
        """Delete every Job the plan does not want, then start (or adopt) the one it does.

        Returned, not deleted: the unwanted Jobs whose outcome the stored status does not hold
        yet (the Job it names for the current spec: a CUDA OOM moving on to a larger class, a
        pod unschedulable past its deadline). They are the only record of that outcome until
        the new status is written; deleted first, a kill or a failed write in between would
        leave a status naming a Job that is gone, and the Job would be created again.

        :raises QuotaExceeded: a ResourceQuota refused the new Job.
        :raises BackendError, Requeue: a Job could not be created or deleted.
        """
        namespace, name = key
        m: MeasurementStatus | None = plan.status.measurement
        # The Job the status names is kept, running or done (its result may still be on its way
        # through the pod watch; a finished one stays for its logs until ttlSecondsAfterFinished).
        kept = m.job_name if m is not None and m.spec_hash == hash_ else None
        old = stored.get("measurement")
        old = old if isinstance(old, Mapping) else {}
        unrecorded = old.get("jobName") if old.get("specHash") == hash_ else None
        to_delete = {a.name for a in plan.actions if isinstance(a, DeleteJob)}
        later: list[JobView] = []
        now = datetime.datetime.now(datetime.UTC)
        for job in self._backend.jobs(namespace, name):
            if job.deleting or job.owner_uid is None:
                continue  # going already; or not a GPUWorkload's Job: never ours to delete
            # A Job of an earlier GPUWorkload of this name (deleted and re-created) is an
            # orphan, as the garbage collector also knows.
            orphan = job.owner_uid != uid
            # Finished by its pod's end too: the Job controller's Complete comes after the pod's
            # result, and a finished Job stays for its logs (ttlSecondsAfterFinished).
            finished = job.finished or self._backend.observe(namespace, job, now).finished
            unwanted = job.name in to_delete or (job.name != kept and not finished)
            if orphan:
                await self.delete(key, job)
            elif unwanted and job.name == unrecorded:
                later.append(job)
            elif unwanted:
                await self.delete(key, job)
        for action in plan.actions:
            if isinstance(action, StartJob):
                assert spec is not None and hash_ is not None
                await self._start(key, uid, action, spec, hash_, body)
        return later

    async def delete(self, key: Key, job: JobView) -> None:
        """Delete ``job`` (and its pods, and its ResourceClaimTemplate if it had one).

        :raises BackendError: the API did not delete it.
        """
        try:
            await self._backend.delete(key[0], job)
        except kube.ApiError as exc:
            raise BackendError(f"deleting Job {job.name}: {exc}") from exc
        log.info("%s/%s: deleted Job %s (uid %s)", *key, job.name, job.uid)
        version = self._inventory.dra_version
        client = self._client()
        if version is not None and client is not None:
            # Its ResourceClaimTemplate, if it had one (owned by the workload, so the garbage
            # collector would take it with the workload; a retry on another class should not
            # leave it behind until then).
            group, ver = version.split("/", 1)
            path = kube.object_path(
                group, ver, "resourceclaimtemplates", job.namespace or key[0], job.name
            )
            try:
                await client.delete(path)
            except kube.NotFound:
                pass  # the Job had none (it requested an extended resource)
            except kube.ApiError as exc:
                log.warning("%s/%s: ResourceClaimTemplate %s not deleted: %s", *key, job.name, exc)

    async def delete_all(self, key: Key) -> None:
        """Delete every live Job a GPUWorkload owns under the name ``key`` (it is gone)."""
        for job in self._backend.jobs(*key):
            if not job.deleting and job.owner_uid is not None:
                await self.delete(key, job)

    async def _start(
        self,
        key: Key,
        uid: str,
        action: StartJob,
        spec: GPUWorkloadSpec,
        hash_: str,
        body: Mapping[str, Any],
    ) -> None:
        namespace, name = key
        for job in self._backend.jobs(namespace, name):
            if job.name == action.name and job.owner_uid == uid and not job.deleting:
                # Known to exist (the watch, or our own creation whose status write failed).
                log.info("%s/%s: adopted existing Job %s", namespace, name, action.name)
                return
        where = self.where(namespace, spec)
        sharing = self._policy.sharing(namespace)
        req = JobRequest(
            namespace=where,
            workload=name,
            workload_uid=uid,
            spec_hash=hash_,
            gpu_class=action.gpu_class,
            gpus=action.gpus,
            memory_bytes=action.memory_bytes,
            image=spec.measurement.image or self._opts.probe_image,
            name=action.name,
            image_pull_secrets=self._opts.probe_image_pull_secrets,
            priority_class_name=self._opts.measurement_priority_class,
            kueue_queue=self._policy.kueue_queue(namespace) if where == namespace else None,
            mig_strategy=self._inventory.mig_strategy(action.gpu_class.name),
            catalog=self._config.catalog,
            claim_template=await self._claim_template(key, uid, action, spec, where),
            measurement_key=(self._records.job_key(spec, action.gpu_class) if sharing else None),
            workload_namespace=namespace,
        )
        try:
            _, created = await self._backend.start(job_manifest(spec, req))
        except JobConflict as exc:
            text = f"{exc}; not adopting it"
            if self._said.say(key, "conflict", text):
                log.error("%s/%s: %s", namespace, name, text)
                self._events.emit(body, Emit("Warning", "JobNameConflict", text))
            raise Requeue(CONFLICT_RETRY_SECONDS, text) from exc
        except JobTerminating as exc:
            raise Requeue(TERMINATING_RETRY_SECONDS, str(exc)) from exc
        except kube.ApiError as exc:
            raise BackendError(f"creating Job {action.name}: {exc}") from exc
        self._said.unsay(key, "conflict")
        runner = self._config.runner
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
        self, key: Key, uid: str, action: StartJob, spec: GPUWorkloadSpec, where: str
    ) -> str | None:
        """Create (or find) the ResourceClaimTemplate of a Job whose class is claimed through
        DRA, in the Job's namespace ``where``; its name (the Job's), or None for a Job that
        requests an extended resource. In the operator's own namespace it names its workload
        in annotations, as the Job does (no owner reference across namespaces)."""
        cls = action.gpu_class
        version = self._inventory.dra_version
        client = self._client()
        if cls.name not in self._inventory.claimed or version is None or client is None:
            return None
        if self._config.runner != "Job":
            return None
        namespace, name = key
        products = self._inventory.products(cls.name)
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
            await client.create(path, body)
        except kube.Conflict:
            # Created before (a retry, or a restarted operator): adopted when it is this
            # workload's (its name comes from the workload's uid and spec hash, as the Job's).
            try:
                existing = await client.get(f"{path}/{action.name}")
            except kube.ApiError as exc:
                raise BackendError(f"reading ResourceClaimTemplate {action.name}: {exc}") from exc
            if owner_uid(existing, self._opts.operator_namespace) != uid:
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


class _Observed(Mapping[str, Outcome]):
    """A workload's Jobs by name, each observed (once) when its entry is first read."""

    def __init__(
        self, backend: Backend, namespace: str, jobs: dict[str, JobView], uids: dict[str, str]
    ) -> None:
        self._backend = backend
        self._namespace = namespace
        self._jobs = jobs
        self._uids = uids
        self._seen: dict[str, Outcome] = {}

    def __getitem__(self, name: str) -> Outcome:
        if name not in self._seen:
            job = self._jobs[name]
            now = datetime.datetime.now(datetime.UTC)
            self._seen[name] = self._backend.observe(self._namespace, job, now)
            self._uids[name] = job.uid
        return self._seen[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)
