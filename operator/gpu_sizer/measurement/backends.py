"""Where measurement Jobs run: Kubernetes Jobs, or a local process. Same results either way.

A backend starts a Job from its manifest (:func:`gpu_sizer.measurement.job.job_manifest`), deletes
it, lists the Jobs it knows for a workload (:class:`JobView`), and says how one stands (an
:class:`~gpu_sizer.measurement.outcome.Outcome`). Starting is idempotent: a Job that already
exists under the deterministic name is adopted, never duplicated. Backends tell the controller
when something changed for a workload (``notify(namespace, workload_name)``), so nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from gpu_sizer.measurement.identity import made_by_job, template_container
from gpu_sizer.measurement.job import ANNOTATION_WORKLOAD, adoptable, job_owner, owner_uid
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind, classify
from gpu_sizer.measurement.plain import plain
from gpu_sizer.measurement.result import ImplausibleResult, InvalidResult, parse_result

__all__ = [
    "Backend",
    "BackendError",
    "JobApi",
    "JobConflict",
    "JobTerminating",
    "JobView",
    "KubernetesJobBackend",
    "LocalProcessBackend",
    "QuotaExceeded",
    "job_uid_of_pod",
    "workload_key",
    "workload_of",
]

log = logging.getLogger("gpu_sizer.controller")


class BackendError(RuntimeError):
    """The API or the process could not be reached; the caller retries later."""


class JobConflict(BackendError):
    """A Job of the wanted name exists but is not ours (another owner, spec hash or manager).

    Never adopted: the caller reports it (the message names the Job and its owner).
    """


class QuotaExceeded(BackendError):
    """The API server refused the Job with 403 ``exceeded quota`` (a ResourceQuota of the
    namespace, e.g. on ``requests.nvidia.com/gpu``): the measurement waits, it has not failed."""


class JobTerminating(BackendError):
    """A Job of the wanted name is still being deleted (ours, from an earlier decision): the new
    one can be created only once it is gone. Retry shortly."""


@dataclass(frozen=True)
class JobView:
    """One measurement Job as the controller reasons about it.

    ``uid`` tells incarnations of one name apart (a spec changed A -> B -> A reuses A's Job
    name); ``owner_uid`` is the uid of the GPUWorkload that controls it; ``finished`` once it
    has a ``Complete`` or ``Failed`` condition (or its process ended); ``deleting`` once a
    deletion was requested (by anyone). ``namespace`` is where the Job is, ``workload_namespace``
    where its workload is (the operator's own namespace runs shareable measurements of other
    namespaces' workloads); ``started`` the Job's ``status.startTime`` (else its creation),
    ``deadline_seconds`` its ``activeDeadlineSeconds``, ``image`` its probe container's image.
    """

    name: str
    uid: str
    owner_uid: str | None
    workload: str = ""
    finished: bool = False
    deleting: bool = False
    namespace: str = ""
    workload_namespace: str = ""
    started: str | None = None
    deadline_seconds: int | None = None
    image: str | None = None


Notify = Callable[[str, str], None]


class Backend(Protocol):
    """What the controller needs from a place that runs measurement Jobs."""

    #: Called with (namespace, workload name) when a Job of that workload changed.
    notify: Notify | None

    def jobs(self, namespace: str, workload: str) -> list[JobView]:
        """Every Job of the workload *named* ``workload`` that still exists (any owner uid: a
        deleted and re-created workload's old Jobs included)."""

    def observe(self, namespace: str, job: JobView, now: datetime) -> Outcome:
        """Where ``job`` stands (its own pods only, matched by the Job's uid)."""

    def live_jobs(self) -> dict[str, int]:
        """Measurement Jobs that hold a measurement slot, per namespace: not finished, not being
        deleted, owned by a GPUWorkload."""

    def labelled(self, label: str, value: str) -> list[tuple[str, JobView]]:
        """(namespace, Job) of every measurement Job not being deleted, in any namespace, whose
        label ``label`` is ``value`` (a measurement key's Jobs), finished ones included."""

    async def start(self, manifest: Mapping[str, Any]) -> tuple[JobView, bool]:
        """Start the Job; the Job and ``True`` when created, ``False`` when adopted.

        :raises QuotaExceeded: a ResourceQuota of the namespace refused the Job.
        :raises JobConflict: the name is taken by a Job that is not ours.
        :raises JobTerminating: the name is taken by a Job being deleted.
        :raises BackendError: the API or process could not be reached.
        """

    async def delete(self, namespace: str, job: JobView) -> None:
        """Delete that incarnation of the Job (and its pods); a missing Job is fine."""


def workload_of(obj: Mapping[str, Any]) -> str | None:
    """The GPUWorkload name a Job or pod belongs to: the ``gpusizer.dev/workload-name``
    annotation (Jobs, and pods of Jobs created since it is on the template), else the
    controlling GPUWorkload owner reference's name."""
    meta = obj.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(ANNOTATION_WORKLOAD)
    if name:
        return str(name)
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "GPUWorkload" and ref.get("controller"):
            return str(ref.get("name") or "") or None
    return None


def workload_key(
    obj: Mapping[str, Any], trusted_namespace: str | None = None
) -> tuple[str, str] | None:
    """``(namespace, name)`` of the GPUWorkload a Job (or its pod) belongs to: the workload's
    own namespace, also for a Job the operator runs in ``trusted_namespace`` (its own) for
    another namespace's workload; None when it names no workload."""
    owner = job_owner(obj, trusted_namespace)
    name = workload_of(obj)
    if owner is not None:
        return owner[0], name or owner[1]
    if not name:
        return None
    return str((obj.get("metadata") or {}).get("namespace") or ""), name


def job_uid_of_pod(pod: Mapping[str, Any]) -> str | None:
    """The uid of the Job that owns ``pod``: its controlling ``Job`` owner reference, else the
    Job controller's ``batch.kubernetes.io/controller-uid`` (or legacy ``controller-uid``)
    label. Never the Job's name: names come back (a spec changed A -> B -> A), uids do not."""
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("uid"):
            return str(ref["uid"])
    labels = meta.get("labels") or {}
    uid = labels.get("batch.kubernetes.io/controller-uid") or labels.get("controller-uid")
    return str(uid) if uid else None


def _finished(job: Mapping[str, Any]) -> bool:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return True
    return False


def _view(
    job: Mapping[str, Any], *, deleting: bool = False, trusted_namespace: str | None = None
) -> JobView:
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    key = workload_key(job, trusted_namespace)
    deadline = spec.get("activeDeadlineSeconds")
    container = template_container(job)
    return JobView(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        owner_uid=owner_uid(job, trusted_namespace),
        workload=key[1] if key else (workload_of(job) or ""),
        finished=_finished(job),
        deleting=deleting or bool(meta.get("deletionTimestamp")),
        namespace=str(meta.get("namespace") or ""),
        workload_namespace=key[0] if key else str(meta.get("namespace") or ""),
        started=status.get("startTime") or meta.get("creationTimestamp"),
        deadline_seconds=deadline if isinstance(deadline, int) else None,
        image=str(container.get("image")) if container and container.get("image") else None,
    )


class JobApi(Protocol):
    """The API calls the Kubernetes backend makes (``gpu_sizer.controller.kube.Client``)."""

    async def create_job(self, namespace: str, manifest: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST the Job; its stored form. :raises BackendError: (409 as :class:`JobExists`)."""

    async def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """GET the Job; ``None`` when absent."""

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        """DELETE that incarnation (uid precondition); absent or replaced is fine."""


class JobExists(BackendError):
    """409 on create: a Job of that name exists."""


#: How long a Job the operator deleted (or created) is taken as gone (or present) without the
#: watch confirming it. The watch normally confirms within a second; this bounds the memory of
#: a confirmation lost to a watch that was re-listed (kopf does not report objects deleted
#: while its watch was down).
EXPECTATION_SECONDS = 300.0
#: The longest a count of unfinished Jobs is reused without being told of a change (a bound on
#: any change that reaches the watch's index without an event through ``seen``).
LIVE_JOBS_SECONDS = 1.0


class KubernetesJobBackend:
    """``batch/v1`` Jobs: created and deleted through the operator's API client, known from the
    operator's watch of Jobs and pods.

    The watch is the truth, but it lags: a Job the operator just created may not be in it yet,
    and one it just deleted may still be. Decisions made on that lagging view recreated Jobs the
    operator had deleted itself. So the backend keeps its own confirmed
    writes (the created Job as the API returned it, the uid it deleted) and overlays them on the
    watch until the watch shows them, or :data:`EXPECTATION_SECONDS` pass. Pods are matched to
    their Job by the Job's uid, never by name (item 3).

    ``jobs_index`` maps ``(namespace, workload name)`` to the Jobs seen (slim bodies, see
    :func:`slim`), ``pods_index`` a Job uid to its pods: kopf indexes, or any such mapping.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        trusted_namespace: str | None = None,
    ) -> None:
        self.notify: Notify | None = None
        #: The operator's own namespace: its Jobs may belong to other namespaces' workloads.
        self.trusted_namespace = trusted_namespace
        #: Pods ignored because the Job controller did not make them (uid -> why), logged once.
        self._forged: dict[str, str] = {}
        self._api: JobApi | None = None
        self._jobs: Mapping[Any, Iterable[Mapping[str, Any]]] = {}
        self._pods: Mapping[Any, Iterable[Mapping[str, Any]]] = {}
        self._clock = clock
        #: uid -> ((namespace, workload), Job as created), until the watch shows that uid.
        self._created: dict[str, tuple[tuple[str, str], Mapping[str, Any], float]] = {}
        #: uid -> when deleted, until the watch shows that uid gone.
        self._deleted: dict[str, float] = {}
        #: :meth:`live_jobs` as last counted, and when (None: something changed since).
        self._live: tuple[dict[str, int], float] | None = None

    def attach(
        self,
        api: JobApi,
        jobs_index: Mapping[Any, Iterable[Mapping[str, Any]]],
        pods_index: Mapping[Any, Iterable[Mapping[str, Any]]],
    ) -> None:
        """Connect the API client and the watch's indexes (in the running operator)."""
        self._api = api
        self._jobs = jobs_index
        self._pods = pods_index
        self._live = None

    def seen(self, event_type: str | None, job: Mapping[str, Any]) -> None:
        """The watch delivered ``job`` (``event_type`` ``DELETED`` when it is gone): drop what
        the overlay no longer needs to say."""
        uid = str((job.get("metadata") or {}).get("uid") or "")
        self._created.pop(uid, None)
        if event_type == "DELETED":
            self._deleted.pop(uid, None)
        self._live = None

    def _expire(self) -> None:
        limit = self._clock() - EXPECTATION_SECONDS
        expired = [u for u, (_, _, t) in self._created.items() if t < limit]
        for uid in expired:
            del self._created[uid]
        gone = [u for u, t in self._deleted.items() if t < limit]
        for uid in gone:
            del self._deleted[uid]
        if expired or gone:
            self._live = None

    def _bodies(self, namespace: str, workload: str) -> dict[str, Mapping[str, Any]]:
        self._expire()
        found: dict[str, Mapping[str, Any]] = {}
        for job in self._jobs.get((namespace, workload), ()):
            found[str((job.get("metadata") or {}).get("uid") or "")] = job
        for uid, (key, job, _) in self._created.items():
            if key == (namespace, workload):
                found.setdefault(uid, job)
        return found

    def _view(self, job: Mapping[str, Any]) -> JobView:
        return _view(job, trusted_namespace=self.trusted_namespace)

    def jobs(self, namespace: str, workload: str) -> list[JobView]:
        return [
            self._view(job)
            for uid, job in self._bodies(namespace, workload).items()
            if uid not in self._deleted
        ]

    def live_jobs(self) -> dict[str, int]:
        """Unfinished Jobs per namespace. Counted again only after a change this backend was
        told of (a watch event through :meth:`seen`, a creation, a deletion, an expectation
        expired) or :data:`LIVE_JOBS_SECONDS` after the last count: the controller asks on every
        decision, and a count walks every Job known (each finished Job stays until its TTL)."""
        self._expire()
        now = self._clock()
        if self._live is not None and now - self._live[1] < LIVE_JOBS_SECONDS:
            return dict(self._live[0])
        bodies: dict[str, Mapping[str, Any]] = {}
        for store in list(self._jobs.values()):
            for job in store:
                bodies[str((job.get("metadata") or {}).get("uid") or "")] = job
        for uid, (_, job, _) in self._created.items():
            bodies.setdefault(uid, job)
        views = [self._view(b) for uid, b in bodies.items() if uid not in self._deleted]
        live = _count_live((v.workload_namespace, v) for v in views)
        self._live = (live, now)
        return dict(live)

    def labelled(self, label: str, value: str) -> list[tuple[str, JobView]]:
        self._expire()
        bodies: dict[str, Mapping[str, Any]] = {}
        for store in list(self._jobs.values()):
            for job in store:
                bodies[str((job.get("metadata") or {}).get("uid") or "")] = job
        for uid, (_, job, _) in self._created.items():
            bodies.setdefault(uid, job)
        out: list[tuple[str, JobView]] = []
        for uid, body in bodies.items():
            meta = body.get("metadata") or {}
            if uid in self._deleted or (meta.get("labels") or {}).get(label) != value:
                continue
            view = self._view(body)
            if view.owner_uid is not None and not view.deleting:
                out.append((view.workload_namespace, view))
        return out

    def observe(self, namespace: str, job: JobView, now: datetime) -> Outcome:
        """Where ``job`` stands, from the Job and the pods the Job controller made for it
        (:func:`gpu_sizer.measurement.identity.made_by_job`): a pod that only names the Job as
        its owner is ignored, and said once in the log."""
        body = None
        if job.uid not in self._deleted:
            body = self._bodies(namespace, job.workload).get(job.uid)
        pods = []
        for pod in self._pods.get(job.uid, ()):
            if job_uid_of_pod(pod) != job.uid:
                continue
            why = made_by_job(pod, body) if body is not None else None
            if why is None:
                pods.append(pod)
                continue
            pod_meta = pod.get("metadata") or {}
            pod_uid = str(pod_meta.get("uid") or "")
            if self._forged.get(pod_uid) != why:
                self._forged[pod_uid] = why
                log.warning(
                    "pod %s/%s names measurement Job %s as its owner but is not the Job "
                    "controller's pod of it (%s): its result is ignored",
                    pod_meta.get("namespace"),
                    pod_meta.get("name"),
                    job.name,
                    why,
                )
        return classify(body, pods, now)

    async def start(self, manifest: Mapping[str, Any]) -> tuple[JobView, bool]:
        assert self._api is not None, "attach() first"
        meta = manifest["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        key = workload_key(manifest, self.trusted_namespace) or (namespace, "")
        try:
            created = await self._api.create_job(namespace, manifest)
        except JobExists:
            existing = await self._api.read_job(namespace, name)
            if existing is None:
                raise JobTerminating(
                    f"Job {name} was deleted while being created; retrying"
                ) from None
            view = self._view(existing)
            if view.deleting or view.uid in self._deleted:
                raise JobTerminating(
                    f"Job {name} (uid {view.uid}) is still being deleted; "
                    "creating it again once it is gone"
                ) from None
            why = adoptable(existing, manifest, self.trusted_namespace)
            if why is not None:
                raise JobConflict(why) from None
            self._created[view.uid] = (key, slim(existing), self._clock())
            self._live = None
            return view, False
        view = self._view(created)
        self._created[view.uid] = (key, slim(created), self._clock())
        self._live = None
        return view, True

    async def delete(self, namespace: str, job: JobView) -> None:
        assert self._api is not None, "attach() first"
        await self._api.delete_job(job.namespace or namespace, job.name, job.uid)
        self._created.pop(job.uid, None)
        self._deleted[job.uid] = self._clock()
        self._live = None


def _count_live(jobs: Iterable[tuple[str, JobView]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for namespace, view in jobs:
        if view.owner_uid is not None and not view.finished and not view.deleting:
            out[namespace] = out.get(namespace, 0) + 1
    return out


def _containers(pod_spec: Any) -> list[dict[str, Any]]:
    """Name, image, command and args of each container (what identifies a probe run)."""
    if not isinstance(pod_spec, Mapping):
        return []
    return [
        {k: plain(c.get(k)) for k in ("name", "image", "command", "args") if c.get(k) is not None}
        for c in pod_spec.get("containers") or ()
        if isinstance(c, Mapping)
    ]


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the outcome classifier and the controller read of a Job or pod (keeps the watch
    caches small): identity, owners, labels and annotations, node and scheduler, deadline,
    status, and the probe container's image and command (a pod's own, a Job's template's) to
    tell the Job controller's pods from pods that merely name the Job as their owner."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod_spec = template.get("spec") if isinstance(template, Mapping) else spec
    containers = _containers(pod_spec)
    out = {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "creationTimestamp": meta.get("creationTimestamp"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "labels": plain(meta.get("labels") or {}),
            "annotations": plain(meta.get("annotations") or {}),
            "ownerReferences": plain(list(meta.get("ownerReferences") or [])),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "schedulerName": spec.get("schedulerName"),
            "activeDeadlineSeconds": spec.get("activeDeadlineSeconds"),
            "suspend": spec.get("suspend"),
        },
        "status": plain(body.get("status") or {}),
    }
    if isinstance(template, Mapping):
        out["spec"]["template"] = {"spec": {"containers": containers}}
    else:
        out["spec"]["containers"] = containers
    return out


@dataclass
class _Run:
    task: asyncio.Task[Outcome]
    manifest: Mapping[str, Any]
    uid: str = ""
    started: float = field(default_factory=time.monotonic)
    #: True once the run holds a concurrency slot and its process was started.
    running: bool = False


class LocalProcessBackend:
    """Runs the probe as a local process (a workstation with a GPU, or the embedded demo).

    ``probe_command`` replaces ``python -m gpu_sizer.probe`` (tests point it at a fake probe).
    The spec travels the same way as in the Job (env ``GPU_SIZER_SPEC``); the result is read
    from the process's stdout with the same parser, whatever the exit status (as the Kubernetes
    path reads the termination message); only a run without a result document is ``Failed``.
    ``activeDeadlineSeconds`` is enforced as the kubelet does: SIGTERM, then SIGKILL after
    ``grace_seconds`` (``terminationGracePeriodSeconds``, 30 by default), so that the probe can
    still write its ``Timeout`` result, which is then read like any other.
    """

    def __init__(
        self,
        probe_command: Sequence[str] | None = None,
        *,
        deadline_cap_seconds: float | None = None,
        grace_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        max_concurrency: int = 1,
        stop_grace_seconds: float = 3.0,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self._command = list(probe_command or [sys.executable, "-m", "gpu_sizer.probe"])
        self._runs: dict[tuple[str, str], _Run] = {}
        self._max = max_concurrency
        self._slots: asyncio.Semaphore | None = None  # made in the running loop
        self._stop_grace = stop_grace_seconds
        self._procs: set[asyncio.subprocess.Process] = set()
        self._cap = deadline_cap_seconds
        self._grace = grace_seconds
        self._node = f"local/{socket.gethostname()}"
        self._clock = clock
        self._serial = itertools.count(1)
        self.notify: Notify | None = None

    def jobs(self, namespace: str, workload: str) -> list[JobView]:
        return [
            self._view(run)
            for (ns, _), run in self._runs.items()
            if ns == namespace and workload_of(run.manifest) == workload
        ]

    @staticmethod
    def _view(run: _Run) -> JobView:
        meta = run.manifest["metadata"]
        container = template_container(run.manifest)
        return JobView(
            name=str(meta["name"]),
            uid=run.uid,
            owner_uid=owner_uid(run.manifest),
            workload=workload_of(run.manifest) or "",
            finished=run.task.done(),
            namespace=str(meta["namespace"]),
            workload_namespace=str(meta["namespace"]),
            deadline_seconds=run.manifest["spec"].get("activeDeadlineSeconds"),
            image=str(container.get("image")) if container else None,
        )

    def live_jobs(self) -> dict[str, int]:
        return _count_live((ns, self._view(run)) for (ns, _), run in self._runs.items())

    def labelled(self, label: str, value: str) -> list[tuple[str, JobView]]:
        out: list[tuple[str, JobView]] = []
        for (ns, _), run in self._runs.items():
            labels = (run.manifest.get("metadata") or {}).get("labels") or {}
            view = self._view(run)
            if labels.get(label) == value:
                out.append((ns, view))
        return out

    def _changed(self, manifest: Mapping[str, Any]) -> None:
        meta = manifest["metadata"]
        workload = workload_of(manifest)
        if self.notify is not None and workload:
            self.notify(str(meta["namespace"]), workload)

    async def start(self, manifest: Mapping[str, Any]) -> tuple[JobView, bool]:
        meta = manifest["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        if key in self._runs:
            why = adoptable(self._runs[key].manifest, manifest)
            if why is not None:
                raise JobConflict(why)
            return self._view(self._runs[key]), False
        container = manifest["spec"]["template"]["spec"]["containers"][0]
        argv = list(container["command"])
        args = argv[3:] if argv[:3] == ["python", "-m", "gpu_sizer.probe"] else argv
        # The Job writes the result to /dev/termination-log; locally stdout carries it.
        if "--termination-log" in args:
            i = args.index("--termination-log")
            del args[i : i + 2]
        env = dict(os.environ)
        env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
        if "HOME" in os.environ:  # the Job's HOME=/tmp is for a read-only root filesystem
            env["HOME"] = os.environ["HOME"]
        deadline = float(manifest["spec"].get("activeDeadlineSeconds") or 900)
        if self._cap is not None:
            deadline = min(deadline, self._cap)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._max)
        task = asyncio.create_task(self._queued(key, [*self._command, *args], env, deadline))
        run = _Run(task, manifest, uid=f"local-{next(self._serial)}")
        self._runs[key] = run
        task.add_done_callback(lambda _: self._changed(manifest))
        return self._view(run), True

    async def _queued(
        self, key: tuple[str, str], argv: list[str], env: dict[str, str], deadline: float
    ) -> Outcome:
        """Wait for a slot: probes sharing one GPU would spoil each other's peaks."""
        assert self._slots is not None
        async with self._slots:
            run = self._runs.get(key)
            if run is not None:
                run.running = True
                self._changed(run.manifest)
            return await self._run(argv, env, deadline)

    async def _run(self, argv: list[str], env: dict[str, str], deadline: float) -> Outcome:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        self._procs.add(proc)
        try:
            return await self._talk(proc, deadline)
        finally:
            self._procs.discard(proc)

    async def _talk(self, proc: asyncio.subprocess.Process, deadline: float) -> Outcome:
        # Not wait_for: cancelling communicate() would drop what it had read so far.
        talk = asyncio.ensure_future(proc.communicate())
        stopped = False
        try:
            done, _ = await asyncio.wait({talk}, timeout=deadline)
            if not done:
                stopped = True
                proc.terminate()
                done, _ = await asyncio.wait({talk}, timeout=self._grace)
                if not done:
                    proc.kill()
            out, err = await talk
        except asyncio.CancelledError:
            if proc.returncode is None:
                proc.kill()
            talk.cancel()
            await proc.wait()
            raise
        text = out.decode(errors="replace").strip()
        if stopped:
            try:
                result = parse_result(_last_json(text))
            except InvalidResult:
                return Outcome(
                    OutcomeKind.DeadlineExceeded,
                    f"the local probe ran past its deadline of {deadline:g} s and was stopped "
                    "without a result",
                    node_name=self._node,
                )
            return Outcome(
                OutcomeKind.Succeeded, result.status, result=result, node_name=self._node
            )
        # As with the termination message in a Job, a result document decides whatever the exit
        # status: Command mode passes the command's own status through (124 at the deadline).
        try:
            result = parse_result(_last_json(text))
        except ImplausibleResult as exc:
            return Outcome(OutcomeKind.Failed, str(exc), node_name=self._node)
        except InvalidResult as exc:
            if proc.returncode == 0:
                return Outcome(
                    OutcomeKind.Failed, f"probe exited 0 but {exc}", node_name=self._node
                )
        else:
            return Outcome(
                OutcomeKind.Succeeded, result.status, result=result, node_name=self._node
            )
        tail = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1][:300]
        return Outcome(
            OutcomeKind.Failed,
            f"local probe exited with code {proc.returncode}: {tail}",
            node_name=self._node,
        )

    async def delete(self, namespace: str, job: JobView) -> None:
        run = self._runs.get((namespace, job.name))
        if run is None or (job.uid and run.uid != job.uid):
            return
        del self._runs[(namespace, job.name)]
        if not run.task.done():
            run.task.cancel()

    def observe(self, namespace: str, job: JobView, now: datetime) -> Outcome:
        del now
        run = self._runs.get((namespace, job.name))
        if run is None or (job.uid and run.uid != job.uid):
            return Outcome(OutcomeKind.Missing, "no local probe process for this Job")
        if not run.task.done() and not run.running:
            ahead = sum(1 for r in self._runs.values() if not r.task.done() and r.running)
            return Outcome(
                OutcomeKind.Pending,
                f"queued: {ahead} local probe(s) running, at most {self._max} at once "
                "(--local-max-concurrency); measurements sharing one GPU would spoil each "
                "other's peaks",
                queued=True,
            )
        if not run.task.done():
            return Outcome(OutcomeKind.Running, "local probe running", node_name=self._node)
        if run.task.cancelled():
            return Outcome(OutcomeKind.Missing, "the local probe process was cancelled")
        exc = run.task.exception()
        if exc is not None:
            return Outcome(OutcomeKind.Failed, f"local probe could not run: {exc}")
        return run.task.result()

    async def close(self) -> None:
        """Stop every probe promptly (operator shutdown): SIGTERM, then SIGKILL after
        ``stop_grace_seconds``; queued runs never start. Returns once the processes are gone."""
        self.notify = None
        procs = [p for p in self._procs if p.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        if procs:
            waits = [asyncio.ensure_future(p.wait()) for p in procs]
            _, pending = await asyncio.wait(waits, timeout=self._stop_grace)
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            if pending:
                await asyncio.wait(pending, timeout=self._stop_grace)
        tasks = [run.task for run in self._runs.values()]
        for task in tasks:
            task.cancel()
        self._runs.clear()
        if tasks:
            await asyncio.wait(tasks, timeout=self._stop_grace)


def _last_json(text: str) -> str:
    """The probe prints one JSON document; tolerate log lines before it."""
    text = text.strip()
    if text.startswith("{"):
        try:
            json.loads(text)
            return text
        except json.JSONDecodeError:
            pass
    for line in reversed(text.splitlines()):
        if line.strip().startswith("{"):
            return line.strip()
    return text
