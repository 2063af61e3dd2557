"""The e2e suite on the session's real control plane (``KUBEBUILDER_ASSETS``, envtest).

``tests/conftest.py`` starts etcd, kube-apiserver, kube-controller-manager (Job, garbage
collector, namespace, ResourceQuota controllers) and kube-scheduler on 127.0.0.1 once per test
session; every e2e test not marked ``emulated_api`` runs there, each in namespaces of its own
(:class:`~tests.e2e.real_cluster.RealCluster`). What the control plane lacks is the kubelet (and
GPU Feature Discovery): :class:`EnvtestCluster` plays them, and nothing else.

- **Nodes** are objects. Each is registered as a kubelet registers one: ``status`` in the create
  (capacity and allocatable: the test's ``nvidia.com/gpu`` and MIG slices beside CPU, memory and
  pods large enough for every probe Job), then the ``Ready`` condition through the
  ``nodes/status`` subresource. The API server's ``TaintNodesByCondition`` admission gives every
  new Node the ``node.kubernetes.io/not-ready:NoSchedule`` taint, which the node lifecycle
  controller lifts once the node reports Ready; that controller (with its heartbeat deadlines)
  does not run here, so the harness lifts the taint itself. Nodes a test created are deleted
  after it.
- **Pods** are the Job controller's and are bound by the scheduler; their status is written
  through ``pods/status`` by :class:`~tests.e2e.kubelets.RealKubelet` when a test says how the
  probe ended. A bound pod being deleted (its Job replaced or deleted) stays ``Terminating``
  until its kubelet confirms; this one does at once (a running container stopped by SIGTERM:
  exit code 143), unless the test holds that pod to report its end itself
  (:attr:`EnvtestCluster.held_jobs`).
- **Clean-up**: after each test its pods are removed, its namespaces deleted, and the
  cluster-scoped objects it made (Nodes, ResourceSlices, CRDs, admission policies, and the
  GPUMeasurement records the operator wrote) deleted, so that the next test on this control
  plane starts from the same state.

``GPU_SIZER_E2E_BACKEND=emulator`` runs everything on the emulator although the assets are set
(to compare the two, or to bisect a difference).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpu_sizer_testbed import controlplane
from gpu_sizer_testbed.controlplane import ControlPlane

from tests.e2e.real_cluster import ApiStatus, RealCluster

__all__ = [
    "ENV_BACKEND",
    "AuditTail",
    "EnvtestCluster",
    "available",
    "emulator_reason",
]

ENV_BACKEND = "GPU_SIZER_E2E_BACKEND"
NODES = ("", "v1", "nodes")
PODS = ("", "v1", "pods")
RECORDS = ("gpusizer.dev", "v1alpha1", "gpumeasurements")
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
#: The label the Job controller puts on its pods: the Job's uid.
CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
#: What every test Node offers besides its GPUs: more than any probe Job asks for (a host-OOM
#: retry doubles a 4 GiB request; fifty Jobs may sit on one node, most of them finished).
NODE_BASE_CAPACITY = {"cpu": "256", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "10Ti"}
#: Why a test marked ``emulated_api`` runs on the emulator although a control plane is there.
EMULATED_API_REASON = "emulated_api: injects API faults or stores what a real API server refuses"


def available(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the e2e suite can run on a real control plane: ``KUBEBUILDER_ASSETS`` names a
    folder with the controller manager and the scheduler too (a Job needs its controller), and
    ``GPU_SIZER_E2E_BACKEND`` does not ask for the emulator.

    :raises controlplane.ControlPlaneError: the variable names a folder without etcd or
        kube-apiserver.
    """
    if env.get(ENV_BACKEND, "").strip() == "emulator":
        return False
    assets = controlplane.assets_from_env(env)
    return assets is not None and all(
        os.access(assets / name, os.X_OK) for name in controlplane.OPTIONAL
    )


def emulator_reason(
    markers: set[str], env: Mapping[str, str] = os.environ, *, controllers: tuple[str, ...] = ()
) -> str | None:
    """Why a test with these markers runs on the emulator (``None``: on the control plane);
    ``controllers``: kube-controller-manager controllers the test needs besides those every
    test needs (``controlplane.CONTROLLERS`` says which the control plane runs)."""
    if not available(env):
        return "no control plane (KUBEBUILDER_ASSETS with kube-controller-manager, kube-scheduler)"
    if "emulated_api" in markers:
        return EMULATED_API_REASON
    missing = [c for c in controllers if c not in controlplane.CONTROLLERS]
    if missing:
        return f"the control plane runs no {', '.join(missing)}"
    return None


class AuditTail:
    """The audit log's events from where this reader left off (the log grows all session)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def events(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line being written waits for the next read
        self.offset += len(complete)
        events = []
        for line in complete.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EnvtestCluster(RealCluster):
    """A :class:`RealCluster` on the session's control plane that also plays the kubelet of the
    Nodes it registers (see the module docstring); ``async with EnvtestCluster(...) as c:``."""

    def __init__(
        self,
        plane: ControlPlane,
        logical_namespace: str,
        nodes: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(str(plane.admin_kubeconfig), logical_namespace, "local")
        self.plane = plane
        self._initial_nodes = list(nodes or [])
        #: Uids of Jobs whose pods' deletion this kubelet leaves pending: the test reports how
        #: they ended (:meth:`RealKubelet.hold`), as a kubelet reports a container it stopped.
        self.held_jobs: set[str] = set()
        #: Uids of pods this kubelet reported running (stopped by SIGTERM when deleted).
        self.running_pods: set[str] = set()
        #: What was created cluster-wide, deleted after the test, newest first.
        self._cluster_scoped: list[tuple[tuple[str, str, str], str]] = []
        #: The Nodes this test registered: this kubelet's.
        self.nodes: set[str] = set()
        self._records_before: set[str] = set()

    async def _prepare(self) -> None:
        self._records_before = {r["metadata"]["name"] for r in await self.list(RECORDS)}
        for node in self._initial_nodes:
            await self.create(NODES, node)
        self._watches.append(self._task(self._watch(PODS, None, self._kubelet_sees)))

    # ------------------------------------------------------------------ objects

    async def create(self, resource: tuple[str, str, str], obj: Mapping[str, Any]) -> Any:
        """Create as :meth:`RealCluster.create`; a Node is registered as its kubelet would
        register it; a cluster-scoped object is remembered for deletion after the test."""
        if resource == NODES:
            return await self._register(obj)
        created = await super().create(resource, obj)
        if not (created.get("metadata") or {}).get("namespace"):
            self._cluster_scoped.insert(0, (resource, created["metadata"]["name"]))
        return created

    async def _register(self, node: Mapping[str, Any]) -> Any:
        doc = copy.deepcopy(dict(node))
        doc.setdefault("apiVersion", "v1")
        doc.setdefault("kind", "Node")
        status = doc.setdefault("status", {})
        allocatable = {**NODE_BASE_CAPACITY, **(status.get("allocatable") or {})}
        status["allocatable"] = allocatable
        status["capacity"] = {**allocatable, **(status.get("capacity") or {})}
        try:
            created = await super().create(NODES, doc)
        except ApiStatus as exc:
            if exc.status != 409:
                raise
            # Left by a test this session could not clean up after (a killed run): replaced.
            await self.delete(NODES, None, doc["metadata"]["name"])
            created = await super().create(NODES, doc)
        name = created["metadata"]["name"]
        self._cluster_scoped.insert(0, (NODES, name))
        self.nodes.add(name)
        now = _now()
        await self.patch(
            NODES,
            None,
            name,
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ]
                }
            },
            subresource="status",
            strategic=True,
        )
        taints = [
            t
            for t in (created.get("spec") or {}).get("taints") or []
            if t.get("key") != NOT_READY_TAINT
        ]
        return await self.patch(NODES, None, name, {"spec": {"taints": taints or None}})

    # ------------------------------------------------------------------ the kubelet's part

    async def _kubelet_sees(self, resource: tuple[str, str, str], pod: dict[str, Any]) -> None:
        """A pod on one of this test's Nodes being deleted (in any namespace: a kubelet runs
        whatever is bound to its node): stop it and confirm the deletion."""
        meta = pod.get("metadata") or {}
        if (
            not meta.get("deletionTimestamp")
            or (pod.get("spec") or {}).get("nodeName") not in self.nodes
            or (meta.get("labels") or {}).get(CONTROLLER_UID) in self.held_jobs
        ):
            return
        with contextlib.suppress(ApiStatus):
            await self.finish_deletion(pod)

    async def finish_deletion(self, pod: Mapping[str, Any]) -> None:
        """What a kubelet does with a pod being deleted: a container it reported running is
        stopped (SIGTERM: exit code 143, phase Failed for a Job's pod), then the pod is
        removed (grace period 0, this incarnation only)."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        namespace, name = str(meta["namespace"]), str(meta["name"])
        phase = (pod.get("status") or {}).get("phase")
        if uid in self.running_pods and phase not in ("Succeeded", "Failed"):
            container = (pod.get("spec") or {}).get("containers", [{}])[0]
            now = _now()
            term = {"exitCode": 143, "reason": "Error", "startedAt": now, "finishedAt": now}
            await self.patch(
                PODS,
                namespace,
                name,
                {
                    "status": {
                        "phase": "Failed",
                        "containerStatuses": [
                            {
                                "name": container.get("name", "probe"),
                                "image": container.get("image", ""),
                                "imageID": "",
                                "ready": False,
                                "restartCount": 0,
                                "started": False,
                                "state": {"terminated": term},
                            }
                        ],
                    }
                },
                subresource="status",
                strategic=True,
            )
        await self._remove_pod(namespace, name, uid)

    async def _remove_pod(self, namespace: str, name: str, uid: str) -> None:
        path = f"/api/v1/namespaces/{self._ns_in(namespace)}/pods/{name}"
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            await self.request("DELETE", path, options)
        except ApiStatus as exc:
            if exc.status not in (404, 409):
                raise

    # ------------------------------------------------------------------ after the test

    async def _clean_up(self) -> None:
        # No kubelet confirms a pod deletion once this test is over: remove the pods of its
        # namespaces and of its Nodes (and the Job controller's tracking finalizer, which would
        # keep them until it gets to them) so that they neither keep the namespaces Terminating
        # nor take room on a Node of the same name in the next test.
        for pod in await self.list(PODS):
            meta = pod["metadata"]
            namespace = str(meta["namespace"])
            mine = (
                self.real_namespace(namespace).startswith(self.prefix)
                or pod["spec"].get("nodeName") in self.nodes
            )
            if not mine:
                continue
            with contextlib.suppress(ApiStatus):
                if meta.get("finalizers"):
                    await self.patch(
                        PODS, namespace, meta["name"], {"metadata": {"finalizers": None}}
                    )
                await self._remove_pod(namespace, meta["name"], meta["uid"])
        await super()._clean_up()
        for resource, name in self._cluster_scoped:
            await self.delete(resource, None, name)
        for record in await self.list(RECORDS):
            name = record["metadata"]["name"]
            if name not in self._records_before:
                if record["metadata"].get("finalizers"):
                    with contextlib.suppress(ApiStatus):
                        await self.patch(RECORDS, None, name, {"metadata": {"finalizers": None}})
                await self.delete(RECORDS, None, name)
