"""kopf handlers: thin adapters from watch events to the controller's work queue.

The operator watches five resources, each kept in a kopf index (kopf lists every indexed
resource before any other handler runs, so no decision is made on a half-known cluster):

- GPUWorkloads, the objects it serves;
- measurement Jobs and their pods, by the ``app.kubernetes.io/managed-by=gpu-sizer`` label (also
  a server-side selector, see :func:`gpu_sizer.controller.running.configure_settings`), indexed
  by workload and by Job uid;
- Nodes, parsed into the GPU inventory (GPU Feature Discovery labels);
- DRA ResourceSlices, where the cluster serves them: per-device inventory that replaces the
  labels of the nodes they describe;
- GPUMeasurements, the shared measurement records (cluster-scoped), indexed by name.

Every event only marks the workload it concerns in the
:class:`~gpu_sizer.controller.reconciler.Reconciler`'s queue; the decision reads the indexes.
There are no kopf change handlers, timers or finalizers: kopf writes nothing to a GPUWorkload
(a finalizer an earlier version added is removed by kopf itself, since no handler needs it), so
the operator's only writes are its status patches, Jobs (with their ResourceClaimTemplates
under DRA) and Events.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from gpu_sizer.api import GROUP, PLURAL, VERSION
from gpu_sizer.api.record import RECORD_PLURAL
from gpu_sizer.api.times import now_rfc3339
from gpu_sizer.controller import kube
from gpu_sizer.controller.kueue import KueueChecker
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.reconciler import Reconciler
from gpu_sizer.controller.workloads import CompactWorkload
from gpu_sizer.inventory.nodes import GpuNode, IgnoredNode, parse_node
from gpu_sizer.measurement.backends import (
    Backend,
    KubernetesJobBackend,
    job_uid_of_pod,
    slim,
    workload_key,
)
from gpu_sizer.measurement.job import LABEL_MANAGED_BY, MANAGED_BY
from gpu_sizer.measurement.plain import plain

__all__ = ["register"]

log = logging.getLogger("gpu_sizer.controller")
MANAGED = {LABEL_MANAGED_BY: MANAGED_BY}


def register(registry: kopf.OperatorRegistry, opts: Options, backend: Backend) -> Reconciler:
    """Register the operator's handlers on ``registry``; the controller they feed."""
    reconciler = Reconciler(opts, backend)
    kubernetes = backend if isinstance(backend, KubernetesJobBackend) else None
    checker: KueueChecker | None = None
    if opts.kueue_admission_check:

        def gpu_workload(namespace: str, name: str) -> Mapping[str, Any] | None:
            return reconciler.workload((namespace, name))

        checker = KueueChecker(opts.catalog, gpu_workload, now_rfc3339)
        _register_kueue(registry, checker)

    @kopf.on.startup(registry=registry, id="gpu-sizer-controller")
    async def start(*, settings: kopf.OperatorSettings, **indexes: Any) -> None:
        # kopf passes each index as a keyword argument named by its id.
        client = kube.Client(settings)
        if kubernetes is not None:
            kubernetes.attach(kube.JobClient(client), indexes["gpu_jobs"], indexes["gpu_pods"])
        reconciler.attach(
            client, workloads=indexes["gpu_workloads"], records=indexes["gpu_records"]
        )
        if checker is not None:
            checker.attach(client)

    @kopf.on.cleanup(registry=registry, id="gpu-sizer-controller")
    async def stop(**_: Any) -> None:
        await reconciler.stop()

    # --- GPUWorkloads

    @kopf.index(GROUP, VERSION, PLURAL, id="gpu_workloads", registry=registry)
    async def index_workload(
        *, body: kopf.Body, name: str, namespace: str | None, **_: Any
    ) -> dict[Any, Any]:
        return {(namespace, name): CompactWorkload(body)}

    @kopf.on.event(GROUP, VERSION, PLURAL, id="workload", registry=registry)
    async def workload_event(*, name: str, namespace: str | None, **_: Any) -> None:
        reconciler.queue.add((namespace or "", name))
        if checker is not None:
            await checker.gpu_workload_changed(namespace or "", name)

    # --- measurement Jobs and their pods

    # A Job (and its pods) in the operator's own namespace may belong to another namespace's
    # workload (a shareable measurement): keyed by the workload's namespace, read from the
    # annotations only there (workload_key), never from a tenant's namespace.
    trusted = opts.operator_namespace

    @kopf.index("batch", "v1", "jobs", id="gpu_jobs", labels=MANAGED, registry=registry)
    async def index_job(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        key = workload_key(body, trusted)
        return {key: slim(body)} if key else None

    @kopf.on.event("batch", "v1", "jobs", id="job", labels=MANAGED, registry=registry)
    async def job_event(*, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        if kubernetes is not None:
            kubernetes.seen(event.get("type"), body)
        reconciler.job_seen(body)
        key = workload_key(body, trusted)
        if key:
            reconciler.queue.add(key)

    @kopf.index("", "v1", "pods", id="gpu_pods", labels=MANAGED, registry=registry)
    async def index_pod(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        uid = job_uid_of_pod(body)
        return {uid: slim(body)} if uid else None

    @kopf.on.event("", "v1", "pods", id="pod", labels=MANAGED, registry=registry)
    async def pod_event(*, body: kopf.Body, **indexes: Any) -> None:
        key = workload_key(body, trusted) or _workload_of_job(
            indexes["gpu_jobs"], job_uid_of_pod(body)
        )
        if key:
            reconciler.queue.add(key)

    # --- shared measurement records (cluster-scoped GPUMeasurements: one measurement serves
    # every workload of its key, so the index follows them for reuse, waiting and expiry)

    @kopf.index(GROUP, VERSION, RECORD_PLURAL, id="gpu_records", registry=registry)
    async def index_record(*, body: kopf.Body, name: str, **_: Any) -> dict[Any, Any]:
        return {name: _slim_record(body)}

    @kopf.on.event(GROUP, VERSION, RECORD_PLURAL, id="record", registry=registry)
    async def record_event(*, event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        reconciler.record_seen(event.get("type"), _slim_record(body))

    # --- GPU nodes (indexed so that kopf lists them before any decision; the inventory itself
    # is kept by the reconciler, updated on each change)

    @kopf.index("", "v1", "nodes", id="gpu_nodes", registry=registry)
    async def index_node(*, body: kopf.Body, name: str, **_: Any) -> dict[Any, Any] | None:
        parsed = parse_node(plain(body), opts.catalog)
        if reconciler.node_seen(name, parsed):
            # Said once per change, not on every status update of the node.
            if isinstance(parsed, IgnoredNode):
                log.warning("GPU node %s ignored: %s", name, parsed.reason)
            elif isinstance(parsed, GpuNode):
                log.info(
                    "GPU node %s: %d x %s (%s)",
                    name,
                    parsed.gpu_count,
                    parsed.gpu_class,
                    parsed.product,
                )
        return None if parsed is None else {"all": parsed}

    @kopf.on.event("", "v1", "nodes", id="node", registry=registry)
    async def node_event(*, event: Mapping[str, Any], name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            reconciler.node_seen(name, None)

    # --- DRA ResourceSlices (NVIDIA's driver, gpu.nvidia.com): per-device inventory. No version
    # named: kopf serves the group's preferred version from discovery (resource.k8s.io/v1 from
    # Kubernetes 1.34, v1beta2/v1beta1 where only those are enabled); a cluster without the
    # group is logged once by kopf and nothing else changes. Indexed, as Nodes are, so that kopf
    # lists them before the first decision (an unserved resource does not hold that up).

    @kopf.index("resource.k8s.io", "resourceslices", id="dra_slices", registry=registry)
    async def index_slice(*, body: kopf.Body, name: str, **_: Any) -> dict[Any, Any] | None:
        if reconciler.slice_seen(name, plain(body)):
            node = str((body.get("spec") or {}).get("nodeName") or "")
            found = reconciler.dra_nodes().get(node)
            if found is not None:  # said once per change, for the node of this slice
                log.info(
                    "GPU node %s from DRA ResourceSlices: %s%s",
                    node,
                    ", ".join(f"{o.count} x {o.gpu_class}" for o in found.offers) or "no class",
                    f"; devices left out: {'; '.join(found.ignored)}" if found.ignored else "",
                )
        return None

    @kopf.on.event("resource.k8s.io", "resourceslices", id="dra_slice", registry=registry)
    async def slice_event(*, event: Mapping[str, Any], name: str, **_: Any) -> None:
        if event.get("type") == "DELETED":
            reconciler.slice_seen(name, None)

    return reconciler


def _register_kueue(registry: kopf.OperatorRegistry, checker: KueueChecker) -> None:
    """Kueue's AdmissionChecks, ResourceFlavors and Workloads (``--kueue-admission-check``), in
    the version discovery prefers (no version named)."""

    @kopf.on.event("kueue.x-k8s.io", "admissionchecks", id="kueue_check", registry=registry)
    async def check_event(
        *, event: Mapping[str, Any], body: kopf.Body, name: str, **_: Any
    ) -> None:
        gone = event.get("type") == "DELETED"
        await checker.check_seen(name, None if gone else plain(body))

    @kopf.on.event("kueue.x-k8s.io", "resourceflavors", id="kueue_flavor", registry=registry)
    async def flavor_event(
        *, event: Mapping[str, Any], body: kopf.Body, name: str, **_: Any
    ) -> None:
        gone = event.get("type") == "DELETED"
        await checker.flavor_seen(name, None if gone else plain(body))

    @kopf.on.event("kueue.x-k8s.io", "workloads", id="kueue_workload", registry=registry)
    async def kueue_workload_event(
        *, event: Mapping[str, Any], body: kopf.Body, name: str, namespace: str | None, **_: Any
    ) -> None:
        gone = event.get("type") == "DELETED"
        await checker.workload_seen((namespace or "", name), None if gone else plain(body))


def _workload_of_job(jobs: Mapping[Any, Any], job_uid: str | None) -> tuple[str, str] | None:
    """The workload key of the Job with uid ``job_uid`` (pods of Jobs made before the workload
    annotation was on the pod template)."""
    if not job_uid:
        return None
    for key, store in list(jobs.items()):
        for job in store:
            if (job.get("metadata") or {}).get("uid") == job_uid:
                return (str(key[0]), str(key[1]))
    return None


def _slim_record(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the controller reads of a GPUMeasurement: name, labels, deletion, the record."""
    meta = body.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "labels": plain(meta.get("labels") or {}),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": plain(body.get("spec")),
    }
