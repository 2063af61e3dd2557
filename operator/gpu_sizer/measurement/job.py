"""The measurement Job manifest, built from a spec as plain data. Pure.

The manifest runs the probe in one pod on one node, with the GPUs the spec asks for; tests check it
against the official kubernetes client models (``kubernetes.client.V1Job``) and
``kubernetes-validate``. Field meanings: Kubernetes API reference, "Job v1 batch" and "Pod v1 core";
the restricted security context is the Pod Security Standards "restricted" profile.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.api import API_VERSION, KIND, GPUWorkloadSpec, MeasurementMode, spec_to_wire
from gpu_sizer.api.record import KEY_LABEL, key_label
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
from gpu_sizer.inventory.nodes import MigStrategy
from gpu_sizer.measurement.node_scope import node_scope
from gpu_sizer.sizing.placement import gpu_resource, node_affinity

__all__ = [
    "ANNOTATION_WORKLOAD",
    "ANNOTATION_WORKLOAD_NAMESPACE",
    "ANNOTATION_WORKLOAD_UID",
    "LABEL_GPU_CLASS",
    "LABEL_KUEUE_QUEUE",
    "LABEL_MANAGED_BY",
    "LABEL_SPEC_HASH",
    "LABEL_WORKLOAD",
    "MANAGED_BY",
    "JobRequest",
    "adoptable",
    "host_memory_bytes",
    "job_gpu_count",
    "job_manifest",
    "job_name",
    "job_owner",
    "owner_uid",
]

GIB: Final = 1 << 30
MANAGED_BY: Final = "gpu-sizer"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_WORKLOAD: Final = "gpusizer.dev/workload"
LABEL_SPEC_HASH: Final = "gpusizer.dev/spec-hash"
LABEL_GPU_CLASS: Final = "gpusizer.dev/gpu-class"
#: The full GPUWorkload name, on the Job and its pods (labels are cut to 63 characters; names
#: may be longer): how the operator maps a Job or pod event to its workload.
ANNOTATION_WORKLOAD: Final = "gpusizer.dev/workload-name"
#: A Job the operator runs in its own namespace for a workload of another namespace cannot be
#: owned by it (Kubernetes refuses owner references across namespaces: the garbage collector
#: treats such an owner as absent and deletes the dependent), so the Job names its workload
#: here. Read only on Jobs in the operator's own namespace (:func:`job_owner`): in any other
#: namespace they are a tenant's to write.
ANNOTATION_WORKLOAD_NAMESPACE: Final = "gpusizer.dev/workload-namespace"
ANNOTATION_WORKLOAD_UID: Final = "gpusizer.dev/workload-uid"
#: Kueue's label naming the LocalQueue a Job is submitted to (Kueue docs, "Run a Kubernetes
#: Job": ``kueue.x-k8s.io/queue-name``; kueue ``pkg/controller/constants``, QueueLabel).
LABEL_KUEUE_QUEUE: Final = "kueue.x-k8s.io/queue-name"
CONTAINER: Final = "probe"
#: The pod's resource claim (and the template's request) name for its GPUs under DRA.
CLAIM: Final = "gpu"
#: Kept for 10 minutes after it finishes so that people can read the pod's logs.
TTL_SECONDS_AFTER_FINISHED: Final = 600
#: Extra seconds past the probe's own deadline before Kubernetes kills the Job, so that the
#: probe can write its Timeout result first.
DEADLINE_GRACE_SECONDS: Final = 30
#: Host memory the probe needs besides the model: Python, PyTorch and CUDA libraries.
BASE_HOST_MEMORY_BYTES: Final = 4 * GIB
#: Upper bound of the memory request, so that a mis-sized spec cannot ask for a whole node.
MAX_HOST_MEMORY_BYTES: Final = 512 * GIB
GPU_TOLERATIONS: Final = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
)


def _slug(text: str, limit: int) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", text.lower())[:limit]
    return slug.strip("-") or "w"


def job_name(
    workload: str,
    spec_hash: str,
    gpu_class: str,
    memory_bytes: int,
    retry: int = 0,
    *,
    namespace: str = "",
    uid: str = "",
) -> str:
    """Deterministic Job name (a DNS-1123 label, at most 63 characters).

    The readable part is the workload name cut to 42 characters; the digest covers what makes
    the Job unique: the namespace, the *full* workload name and its uid (so two workloads whose
    names share the first 42 characters never share a Job), and the spec hash, class, memory
    request and retry (so a retry on another class or with more memory gets a new name). A
    restarted operator computes the same name (the uid does not change while the object lives)
    and adopts its Job. The uid is included on purpose: a workload deleted and re-created under
    the same name is a new object, and must not adopt the old object's Job, which the garbage
    collector is about to delete.
    """
    key = f"{namespace}/{workload}/{uid}/{spec_hash}/{gpu_class}/{memory_bytes}/{retry}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    return f"gpusizer-{_slug(workload, 42)}-{digest}"


def job_owner(
    job: Mapping[str, Any], trusted_namespace: str | None = None
) -> tuple[str, str, str] | None:
    """``(namespace, name, uid)`` of the GPUWorkload a measurement Job (or its pod) belongs to:
    its controlling GPUWorkload ownerReference (the same namespace, as owner references are);
    for an object in ``trusted_namespace`` (the operator's own, where no tenant writes), the
    workload annotations. None when neither says (not a GPUWorkload's Job)."""
    meta = job.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == KIND and ref.get("controller"):
            return namespace, str(ref.get("name") or ""), str(ref.get("uid") or "")
    annotations = meta.get("annotations") or {}
    if trusted_namespace and namespace == trusted_namespace:
        owner_ns = annotations.get(ANNOTATION_WORKLOAD_NAMESPACE)
        name = annotations.get(ANNOTATION_WORKLOAD)
        uid = annotations.get(ANNOTATION_WORKLOAD_UID)
        if owner_ns and name and uid:
            return str(owner_ns), str(name), str(uid)
    return None


def owner_uid(job: Mapping[str, Any], trusted_namespace: str | None = None) -> str | None:
    """The uid of the GPUWorkload that controls ``job`` (:func:`job_owner`)."""
    owner = job_owner(job, trusted_namespace)
    return owner[2] if owner is not None else None


def _controller(obj: Mapping[str, Any]) -> str:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')} {ref.get('name')!r} (uid {ref.get('uid')!r})"
    return "no owner"


def adoptable(
    existing: Mapping[str, Any], wanted: Mapping[str, Any], trusted_namespace: str | None = None
) -> str | None:
    """Why the ``existing`` Job may not be adopted for the ``wanted`` manifest (None: it may).

    Adoption is for our own Job found again after a restart: same controlling owner (uid),
    same managed-by label, same spec hash. Anything else is a name collision and is reported,
    never adopted (adopting another workload's Job would report its numbers as ours, and its
    deletion would take our Job with it).
    """
    have_meta = existing.get("metadata") or {}
    want_meta = wanted.get("metadata") or {}
    have_labels = have_meta.get("labels") or {}
    want_labels = want_meta.get("labels") or {}
    name = want_meta.get("name")
    have, want = owner_uid(existing, trusted_namespace), owner_uid(wanted, trusted_namespace)
    if have is None or have != want:
        return (
            f"Job {name} already exists and is controlled by {_controller(existing)}, not by "
            f"this GPUWorkload (uid {want!r})"
        )
    for label in (LABEL_MANAGED_BY, LABEL_SPEC_HASH):
        if have_labels.get(label) != want_labels.get(label):
            return (
                f"Job {name} already exists with label {label}={have_labels.get(label)!r}, "
                f"expected {want_labels.get(label)!r}"
            )
    return None


def host_memory_bytes(
    spec: GPUWorkloadSpec, weights_bytes_per_replica: int, host_bytes_per_node: int = 0
) -> int:
    """Host RAM (bytes) for the probe container's memory request and limit.

    Synthetic mode creates every parameter directly on the GPU (``gpu_sizer.probe.model``: factory
    calls with ``device=``, no CPU copy), so the container needs the runtime only: Python,
    PyTorch, the CUDA libraries and the CUDA context's host side, 4 GiB per process. Training
    with a data-parallel strategy runs one process per GPU of the node
    (``gpu_sizer.probe.launch``), and holds in host memory what the workload does there
    (``status.estimate.hostBytesPerNode``: offloaded optimizer state and parameters, the model
    staged for loading). Command mode runs the workload's own engine, which may stage a full copy
    of the replica's weights in host memory while loading (Hugging Face ``from_pretrained``
    without ``low_cpu_mem_usage``; safetensors pages count against the container's memory
    cgroup), so it gets 4 GiB plus the replica's weights, or the training workload's host bytes
    when larger. Rounded up to a GiB and capped at 512 GiB. A container OOM-killed anyway is
    retried once with twice the memory.

    :param host_bytes_per_node: ``status.estimate.hostBytesPerNode`` (training, and pipelines
        whose offloaded or CPU-placed components the probe builds on the CPU; 0 otherwise).
    """
    processes = job_gpu_count(spec, 1) if _distributed(spec) else 1
    total = BASE_HOST_MEMORY_BYTES * processes + max(0, host_bytes_per_node)
    if spec.measurement.mode is MeasurementMode.Command:
        total = BASE_HOST_MEMORY_BYTES + max(weights_bytes_per_replica, host_bytes_per_node, 0)
    rounded = -(-total // GIB) * GIB
    return int(min(rounded, MAX_HOST_MEMORY_BYTES))


def _distributed(spec: GPUWorkloadSpec) -> bool:
    """Training whose measurement runs one process per GPU (a data-parallel strategy)."""
    return spec.training is not None and spec.training.parallelism.strategy.value != "none"


def job_gpu_count(spec: GPUWorkloadSpec, gpus: int) -> int:
    """GPUs the measurement Job requests: ``gpus`` (the replica's), except that training is
    measured on one node, so at most ``parallelism.gpusPerNode`` (default 8): a job wider than
    a node runs one node's ranks (:mod:`gpu_sizer.measurement.node_scope`), and one whose model
    replica alone exceeds a node is reported by the probe as ``Unsupported``."""
    if spec.training is None:
        return gpus
    par = spec.training.parallelism
    return max(1, min(max(gpus, par.gpus), par.ranks_per_node))


@dataclass(frozen=True)
class JobRequest:
    """Everything the manifest depends on besides the spec."""

    namespace: str
    workload: str
    workload_uid: str
    spec_hash: str
    gpu_class: GPUClass
    gpus: int
    memory_bytes: int
    image: str
    name: str
    #: Secrets (in the workload's namespace) for pulling ``image``: ``imagePullSecrets``.
    image_pull_secrets: tuple[str, ...] = ()
    #: ``priorityClassName`` of the measurement pod (``--measurement-priority-class``).
    priority_class_name: str | None = None
    #: Kueue LocalQueue (namespace policy ``localQueue``): the Job carries
    #: ``kueue.x-k8s.io/queue-name`` and is created with ``suspend: true``; Kueue unsuspends it
    #: when it admits the workload under its quotas.
    kueue_queue: str | None = None
    #: How the cluster's nodes offer a MIG class (:meth:`gpu_sizer.inventory.nodes.Inventory.
    #: mig_strategy`): ``mixed`` requests ``nvidia.com/mig-<profile>`` on nodes of the whole
    #: GPU's product, ``single`` one ``nvidia.com/gpu`` on the ``-MIG-<profile>`` product.
    mig_strategy: MigStrategy = "single"
    #: The catalog the class comes from (a MIG class's parent products, for ``mixed``).
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG
    #: A ResourceClaimTemplate (:func:`gpu_sizer.inventory.dra.claim_template`) in the namespace:
    #: the pod claims its GPUs through it (DRA) instead of requesting an extended resource, and has
    #: no product node affinity (the scheduler places the pod where the claim can be allocated).
    claim_template: str | None = None
    #: Measurement key of what the Job measures (:mod:`gpu_sizer.api.record`): labelled
    #: ``gpusizer.dev/measurement-key`` (its first 40 hex), so that a workload of the same key in
    #: another namespace waits for this Job instead of measuring twice, also after a restart.
    measurement_key: str | None = None
    #: The workload's namespace when the Job runs elsewhere (``namespace`` is then the
    #: operator's own, for a measurement that may be shared): the Job names its workload in
    #: annotations instead of an owner reference (:data:`ANNOTATION_WORKLOAD_NAMESPACE`).
    workload_namespace: str | None = None


def job_manifest(spec: GPUWorkloadSpec, req: JobRequest) -> dict[str, Any]:
    """The ``batch/v1`` Job that runs ``python -m gpu_sizer.probe`` on a node of the class.

    The spec travels in env ``GPU_SIZER_SPEC`` (camelCase JSON); the result comes back in the
    container's termination message (``/dev/termination-log``, falling back to the log tail).
    Data-parallel training requests the node's GPUs (:func:`job_gpu_count`); the probe then runs
    ``torch.distributed.run`` with one process per GPU (``gpu_sizer.probe.launch``).
    """
    timeout = spec.measurement.timeout_seconds
    labels = {
        "app.kubernetes.io/name": "gpu-sizer-probe",
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_WORKLOAD: _slug(req.workload, 63),
        LABEL_SPEC_HASH: req.spec_hash,
        LABEL_GPU_CLASS: req.gpu_class.name,
    }
    if req.measurement_key:
        labels[KEY_LABEL] = key_label(req.measurement_key)
    # A job wider than one node is measured as the part one node shows (node_scope).
    scope = node_scope(spec)
    probed = scope.spec if scope is not None else spec
    spec_json = json.dumps(spec_to_wire(probed), separators=(",", ":"), sort_keys=True)
    command = [
        "python",
        "-m",
        "gpu_sizer.probe",
        "--termination-log",
        "/dev/termination-log",
        "--deadline-seconds",
        str(timeout),
        "--gpu-class",
        req.gpu_class.name,
    ]
    memory = str(req.memory_bytes)
    gpus = str(job_gpu_count(spec, req.gpus))
    resource = gpu_resource(req.gpu_class, req.mig_strategy)
    affinity = node_affinity(req.gpu_class, req.mig_strategy, req.catalog)
    # The device plugins' taints are keyed by the vendor's GPU resource, MIG slices included.
    taint_key = "amd.com/gpu" if req.gpu_class.vendor == "amd" else "nvidia.com/gpu"
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": req.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "env": [
            {"name": "GPU_SIZER_SPEC", "value": spec_json},
            {"name": "GPU_SIZER_GPU_CLASS", "value": req.gpu_class.name},
            {"name": "HOME", "value": "/tmp"},
        ],
        "resources": {
            "requests": {"cpu": "1", "memory": memory, resource: gpus},
            "limits": {"memory": memory, resource: gpus},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if req.claim_template:
        for part in ("requests", "limits"):
            container["resources"][part].pop(resource)
        container["resources"]["claims"] = [{"name": CLAIM}]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "affinity": {"nodeAffinity": affinity.model_dump(by_alias=True, mode="json")},
        "tolerations": [dict(t, key=taint_key) for t in GPU_TOLERATIONS],
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    if req.claim_template:
        del pod_spec["affinity"]
        pod_spec["resourceClaims"] = [
            {"name": CLAIM, "resourceClaimTemplateName": req.claim_template}
        ]
    if req.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": n} for n in req.image_pull_secrets]
    if req.priority_class_name:
        pod_spec["priorityClassName"] = req.priority_class_name
    job_labels = dict(labels)
    if req.kueue_queue:
        job_labels[LABEL_KUEUE_QUEUE] = req.kueue_queue
    annotations = {ANNOTATION_WORKLOAD: req.workload}
    elsewhere = req.workload_namespace is not None and req.workload_namespace != req.namespace
    if elsewhere:
        annotations[ANNOTATION_WORKLOAD_NAMESPACE] = str(req.workload_namespace)
        annotations[ANNOTATION_WORKLOAD_UID] = req.workload_uid
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": timeout + DEADLINE_GRACE_SECONDS,
        "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
        "template": {
            "metadata": {"labels": labels, "annotations": dict(annotations)},
            "spec": pod_spec,
        },
    }
    if req.kueue_queue:
        # Kueue admits suspended Jobs. activeDeadlineSeconds counts from admission: resuming
        # a Job resets its status.startTime (Kubernetes docs, "Jobs", Suspending a Job).
        job_spec["suspend"] = True
    metadata: dict[str, Any] = {
        "name": req.name,
        "namespace": req.namespace,
        "labels": job_labels,
        "annotations": annotations,
    }
    if not elsewhere:
        metadata["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "name": req.workload,
                "uid": req.workload_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}
