"""The e2e suite's kubelets: what runs measurement pods where nothing else does.

:class:`Kubelet` (on kmock's emulator) plays the scheduler, the kubelet and the Job controller.
:class:`RealKubelet` (on the envtest control plane, :mod:`tests.e2e.envtest`) plays only the
kubelet: the real Job controller creates each pod and owns the Job's status (``startTime``,
``completionTime``, ``SuccessCriteriaMet``/``Complete``, ``FailureTarget``/``Failed``,
``DeadlineExceeded``), the real scheduler binds the pod (``spec.nodeName``) or says why it
cannot (``PodScheduled=False``, ``Unschedulable``), and this kubelet writes the pod's status
through ``pods/status`` once the pod is bound: running, terminated with the probe's termination
message, waiting on an image pull, OOMKilled, evicted. The tests call both the same way.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

from gpu_sizer_testbed.emulator import ApiStatus

from tests.e2e.waiting import PATIENCE, eventually

__all__ = ["Kubelet", "RealKubelet"]

NS = "ml-team"
JOBS = ("batch", "v1", "jobs")
PODS = ("", "v1", "pods")
#: The label the Job controller puts on its pods: the Job's uid.
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"


def _owned_by(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The ownerReferences the Job controller gives the pods of the Job ``meta`` describes."""
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": meta["name"],
            "uid": meta.get("uid", ""),
            "controller": True,
        }
    ]


class Kubelet:
    """On the emulator: plays the scheduler, kubelet and Job controller for measurement Jobs
    (it creates each pod itself, bound to a node of its choice and with its status in the
    create, and writes the Job's condition)."""

    #: The node a pod goes to when the test names none.
    NODE = "a100-1"

    def __init__(self, cluster: Any) -> None:
        self.c = cluster

    def hold(self, job: dict[str, Any]) -> None:
        """Keep the pods of ``job`` until the test reports how they ended, even once the Job is
        deleted (on the emulator there are no pods but those the test reports)."""

    async def jobs(self, namespace: str = NS) -> list[dict[str, Any]]:
        return await self.c.list(JOBS, namespace, {"app.kubernetes.io/managed-by": "gpu-sizer"})

    async def wait_job(
        self, namespace: str = NS, *, not_named: set[str] | None = None, timeout: float = PATIENCE
    ) -> dict[str, Any]:
        async def find() -> dict[str, Any] | None:
            for job in await self.jobs(namespace):
                if not not_named or job["metadata"]["name"] not in not_named:
                    return job
            return None

        return await eventually(find, timeout, "a measurement Job")

    async def _pod(
        self, job: dict[str, Any], status: dict[str, Any], node: str | None
    ) -> dict[str, Any]:
        meta = job["metadata"]
        tmpl = job["spec"]["template"]
        name = f"{meta['name']}-x{int(time.monotonic() * 1000) % 100000}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {
                    **tmpl["metadata"]["labels"],
                    "batch.kubernetes.io/job-name": meta["name"],
                    "batch.kubernetes.io/controller-uid": meta.get("uid", ""),
                },
                "annotations": dict(tmpl["metadata"].get("annotations") or {}),
                "ownerReferences": _owned_by(meta),
            },
            "spec": {**tmpl["spec"], **({"nodeName": node} if node else {})},
            "status": status,
        }
        return await self.c.create(PODS, pod)

    async def succeed(
        self,
        job: dict[str, Any],
        message: str,
        node: str | None = None,
        exit_code: int = 0,
        job_status: bool = True,
    ) -> None:
        """The pod ran and terminated with ``message`` in its termination message; with
        ``job_status`` False the Job is gone and only its pod reports, late."""
        term = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "message": message,
        }
        await self._pod(
            job,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": [{"name": "probe", "state": {"terminated": term}}],
            },
            node or self.NODE,
        )
        if not job_status:  # the Job is gone; only its pod reports late
            return
        cond = "Complete" if exit_code == 0 else "Failed"
        await self.job_condition(
            job, cond, "Completed" if exit_code == 0 else "BackoffLimitExceeded"
        )

    async def job_condition(
        self, job: dict[str, Any], type_: str, reason: str, message: str = ""
    ) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        try:
            await self.c.patch(
                JOBS,
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                {"status": {"conditions": [condition]}},
                subresource="status",
            )
        except ApiStatus as exc:
            # The operator may act on the pod's final state before the Job controller writes
            # the Job's condition, and delete the Job (an OOM moved to a larger class, an
            # evicted pod retried): the Job controller then finds it gone, as here.
            if exc.status != 404:
                raise

    async def running(self, job: dict[str, Any], node: str | None = None) -> None:
        await self._pod(
            job,
            {
                "phase": "Running",
                "containerStatuses": [{"name": "probe", "state": {"running": {}}}],
            },
            node or self.NODE,
        )

    async def unschedulable(self, job: dict[str, Any], since: str) -> None:
        await self._pod(
            job,
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 node(s) didn't match "
                        "Pod's node affinity/selector.",
                        "lastTransitionTime": since,
                    }
                ],
            },
            None,
        )

    async def unbound(self, job: dict[str, Any], scheduler: str) -> None:
        """The pod waits for ``scheduler``, which never binds it nor says why (no
        ``PodScheduled`` condition): here, a pod created unbound with that ``schedulerName``."""
        meta = job["metadata"]
        tmpl = job["spec"]["template"]
        await self.c.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{meta['name']}-unbound",
                    "namespace": meta["namespace"],
                    "labels": {**tmpl["metadata"]["labels"], CONTROLLER_UID: meta.get("uid", "")},
                    "annotations": dict(tmpl["metadata"].get("annotations") or {}),
                    "ownerReferences": _owned_by(meta),
                },
                "spec": {**tmpl["spec"], "schedulerName": scheduler},
                "status": {"phase": "Pending"},
            },
        )

    async def image_pull_failure(self, job: dict[str, Any]) -> None:
        await self._pod(
            job,
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "probe",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": 'Back-off pulling image "nope:1"',
                            }
                        },
                    }
                ],
            },
            self.NODE,
        )

    async def oom_killed(self, job: dict[str, Any]) -> None:
        term = {"exitCode": 137, "reason": "OOMKilled"}
        await self._pod(
            job,
            {
                "phase": "Failed",
                "containerStatuses": [{"name": "probe", "state": {"terminated": term}}],
            },
            self.NODE,
        )
        await self.job_condition(job, "Failed", "BackoffLimitExceeded")

    async def evicted(self, job: dict[str, Any]) -> None:
        await self._pod(
            job,
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory.",
            },
            self.NODE,
        )
        await self.job_condition(job, "Failed", "BackoffLimitExceeded")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _terminal(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


class RealKubelet(Kubelet):
    """On the envtest control plane: the kubelet of its Nodes, and only that (module docstring).

    Each report waits for the Job controller's pod and for the scheduler to bind it, then
    writes the pod's status; a report of a pod's end then waits for the Job controller to end
    the Job (or for the Job to be gone: the operator may act on the pod first and delete it),
    so that a test goes on where it would after the emulator's report. ``node``, where a test
    names one, is checked against the scheduler's choice instead of chosen.
    """

    def hold(self, job: dict[str, Any]) -> None:
        """The pods of ``job`` stay Terminating when deleted until the test reports how they
        ended (a late result of a replaced Job, a container stopped by SIGTERM)."""
        self.c.held_jobs.add(job["metadata"]["uid"])  # the control plane's (EnvtestCluster)

    async def pod(self, job: dict[str, Any], *, bound: bool = True) -> dict[str, Any]:
        """The newest pod the Job controller made for ``job`` (matched by the Job's uid), once
        the scheduler has bound it when ``bound``."""
        meta = job["metadata"]

        async def find() -> dict[str, Any] | None:
            pods = await self.c.list(PODS, meta["namespace"], {CONTROLLER_UID: meta["uid"]})
            if not pods:
                return None
            pod: dict[str, Any] = max(
                pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])
            )
            return pod if pod["spec"].get("nodeName") or not bound else None

        what = f"the pod of Job {meta['name']}" + (", bound by the scheduler" if bound else "")
        return await eventually(find, PATIENCE, what)

    async def _bound(self, job: dict[str, Any], node: str | None) -> dict[str, Any]:
        pod = await self.pod(job)
        if node is not None:
            assert pod["spec"]["nodeName"] == node, (
                f"the scheduler bound {pod['metadata']['name']} to {pod['spec']['nodeName']}, "
                f"not to {node}"
            )
        return pod

    @staticmethod
    def _container(pod: dict[str, Any], state: dict[str, Any], ready: bool) -> dict[str, Any]:
        ctr = pod["spec"]["containers"][0]
        return {
            "name": ctr["name"],
            "image": ctr.get("image", ""),
            "imageID": "",
            "ready": ready,
            "restartCount": 0,
            "started": "running" in state,
            "state": state,
        }

    async def _write(
        self,
        pod: dict[str, Any],
        phase: str,
        state: dict[str, Any],
        *,
        ready: bool = False,
        conditions: tuple[dict[str, Any], ...] = (),
        **extra: Any,
    ) -> None:
        """Write the pod's status as its kubelet: phase, the probe container's state, the
        pod's conditions (strategic merge: the scheduler's ``PodScheduled`` stays)."""
        assert hasattr(self.c, "held_jobs"), (
            "a real cluster's kubelet owns pod status: mark the test emulated_kubelet"
        )
        now = _now()
        why = {} if ready else {"reason": "PodCompleted" if phase != "Pending" else "Waiting"}
        status = {
            "phase": phase,
            "startTime": (pod.get("status") or {}).get("startTime") or now,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                *(
                    {"type": t, "status": str(ready), "lastTransitionTime": now, **why}
                    for t in ("Ready", "ContainersReady")
                ),
                *conditions,
            ],
            "containerStatuses": [self._container(pod, state, ready)],
            **extra,
        }
        meta = pod["metadata"]
        await self.c.patch(
            PODS,
            meta["namespace"],
            meta["name"],
            {"status": status},
            subresource="status",
            strategic=True,
        )

    async def _ended(self, job: dict[str, Any], pod: dict[str, Any], job_status: bool) -> None:
        """After a pod's end: a pod already being deleted goes (the kubelet confirms), and the
        Job controller ends the Job."""
        meta = pod["metadata"]
        current = await self.c.get(PODS, meta["namespace"], meta["name"])
        if current is not None and current["metadata"].get("deletionTimestamp"):
            await self.c.finish_deletion(current)
        self.c.held_jobs.discard(job["metadata"]["uid"])
        if job_status:
            await self._job_settled(job, lambda c: c["type"] in ("Complete", "Failed"))

    async def _job_settled(self, job: dict[str, Any], done: Any, timeout: float = PATIENCE) -> None:
        meta = job["metadata"]

        async def settled() -> bool:
            current = await self.c.get(JOBS, meta["namespace"], meta["name"])
            if current is None or current["metadata"]["uid"] != meta["uid"]:
                return True  # deleted by the operator (or replaced): nothing more to end
            conditions = (current.get("status") or {}).get("conditions") or []
            return any(c.get("status") == "True" and done(c) for c in conditions)

        await eventually(settled, timeout, f"the Job controller to end Job {meta['name']}")

    async def succeed(
        self,
        job: dict[str, Any],
        message: str,
        node: str | None = None,
        exit_code: int = 0,
        job_status: bool = True,
    ) -> None:
        pod = await self._bound(job, node)
        if not _terminal(pod):  # a second report of the same end changes nothing
            now = _now()
            term: dict[str, Any] = {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": now,
                "finishedAt": now,
            }
            if message:
                term["message"] = message
            phase = "Succeeded" if exit_code == 0 else "Failed"
            await self._write(pod, phase, {"terminated": term})
        await self._ended(job, pod, job_status)

    async def job_condition(
        self, job: dict[str, Any], type_: str, reason: str, message: str = ""
    ) -> None:
        """The real Job controller writes the Job's conditions: wait for this one (a
        ``DeadlineExceeded`` comes ``activeDeadlineSeconds`` after the Job's start)."""
        deadline = float((job.get("spec") or {}).get("activeDeadlineSeconds") or 0)
        await self._job_settled(
            job,
            lambda c: c.get("type") == type_ and c.get("reason") == reason,
            timeout=deadline + PATIENCE,
        )

    async def running(self, job: dict[str, Any], node: str | None = None) -> None:
        pod = await self._bound(job, node)
        now = _now()
        self.c.running_pods.add(pod["metadata"]["uid"])
        await self._write(pod, "Running", {"running": {"startedAt": now}}, ready=True)

    async def unschedulable(self, job: dict[str, Any], since: str) -> None:
        """The real scheduler says so once the test made the pod unschedulable (a class no
        node has, full nodes): wait for its ``PodScheduled=False, Unschedulable``. ``since`` is
        the emulator's; the scheduler's condition carries its own time."""
        meta = job["metadata"]

        async def judged() -> dict[str, Any] | None:
            pods = await self.c.list(PODS, meta["namespace"], {CONTROLLER_UID: meta["uid"]})
            for pod in pods:
                for c in (pod.get("status") or {}).get("conditions") or []:
                    if (c.get("type"), c.get("status"), c.get("reason")) == (
                        "PodScheduled",
                        "False",
                        "Unschedulable",
                    ):
                        return pod
            return None

        await eventually(judged, PATIENCE, f"the scheduler to find no node for {meta['name']}")

    async def unbound(self, job: dict[str, Any], scheduler: str) -> None:
        """The Job controller's pod, left unbound by ``scheduler`` (which the test made its
        ``schedulerName`` and which does not run): the default scheduler ignores it, so it has
        no ``PodScheduled`` condition."""
        pod = await self.pod(job, bound=False)
        assert pod["spec"].get("schedulerName") == scheduler, pod["spec"].get("schedulerName")
        assert not pod["spec"].get("nodeName")
        assert not (pod.get("status") or {}).get("conditions"), pod.get("status")

    async def image_pull_failure(self, job: dict[str, Any]) -> None:
        pod = await self._bound(job, None)
        image = pod["spec"]["containers"][0].get("image", "")
        waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
        await self._write(pod, "Pending", {"waiting": waiting})

    async def oom_killed(self, job: dict[str, Any]) -> None:
        pod = await self._bound(job, None)
        now = _now()
        term = {"exitCode": 137, "reason": "OOMKilled", "startedAt": now, "finishedAt": now}
        await self._write(pod, "Failed", {"terminated": term})
        await self._ended(job, pod, True)

    async def evicted(self, job: dict[str, Any]) -> None:
        """The kubelet's eviction under memory pressure: phase Failed, reason Evicted, a
        ``DisruptionTarget`` condition, and the container it killed (exit code 137)."""
        pod = await self._bound(job, None)
        now = _now()
        term = {"exitCode": 137, "reason": "Error", "startedAt": now, "finishedAt": now}
        disruption = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": "The node was low on resource: memory.",
            "lastTransitionTime": now,
        }
        await self._write(
            pod,
            "Failed",
            {"terminated": term},
            conditions=(disruption,),
            reason="Evicted",
            message="The node was low on resource: memory.",
        )
        await self._ended(job, pod, True)
