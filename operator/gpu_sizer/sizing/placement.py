"""From a recommendation to a pod: node affinity, the GPU limit, and a pod-template patch. Pure.

The recommendation names a GPU class; a pod runs on it when it (a) is scheduled on a node of the
class and (b) asks for the class's extended resource. Both are derived here, once, for the status
snippets (``status.recommendation.nodeAffinity`` / ``.resources``), ``gpu-sizer estimate -o
patch`` and the pod admission webhook, so the three never disagree.

- Whole NVIDIA GPU: node label ``nvidia.com/gpu.product`` In the class's products (GPU Feature
  Discovery), resource ``nvidia.com/gpu``. AMD: ``amd.com/gpu.product-name``, ``amd.com/gpu``
  (ROCm k8s-device-plugin and its node labeller).
- MIG slice, ``single`` strategy (the GPU Operator's default ``mig.strategy``): the product label
  is ``<product>-MIG-<profile>`` and one ``nvidia.com/gpu`` is one slice.
- MIG slice, ``mixed`` strategy: the product label is the whole GPU's, GFD adds
  ``nvidia.com/mig-<profile>.count``, and the slice is requested as ``nvidia.com/mig-<profile>``
  (NVIDIA k8s-device-plugin README, "MIG strategies").

Kubernetes shapes (core/v1 ``NodeAffinity``, ``ResourceRequirements``) are built as plain data:
this module is part of the pure core, which the import contract keeps free of the kubernetes
client; tests validate the output against the Kubernetes OpenAPI schema (kubernetes-validate).
GPUs are set as limits only: for extended resources Kubernetes defaults requests to limits and
refuses requests different from them (Kubernetes docs, "Schedule GPUs").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from gpu_sizer.api import (
    NodeAffinitySnippet,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    RecommendationStatus,
    ResourcesSnippet,
)
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
from gpu_sizer.inventory.nodes import MigStrategy

__all__ = [
    "ANNOTATION_BASIS",
    "ANNOTATION_CLASS",
    "ANNOTATION_GPUS_PER_WORKER",
    "ANNOTATION_SPEC_HASH",
    "ANNOTATION_WORKERS",
    "WORKLOAD_LABEL",
    "for_strategy",
    "gpu_resource",
    "memory_request",
    "node_affinity",
    "pod_template_patch",
    "resources",
    "snippets",
]

#: Pods opt in to recommendation-applying admission with this label: a pod the label does not
#: name is never changed, so the webhook rewrites only what its owner asked it to.
WORKLOAD_LABEL: Final = "gpusizer.dev/workload"
#: What was applied to a pod (webhook) or pod template (patch).
ANNOTATION_CLASS: Final = "gpusizer.dev/gpu-class"
ANNOTATION_BASIS: Final = "gpusizer.dev/basis"
ANNOTATION_SPEC_HASH: Final = "gpusizer.dev/spec-hash"
#: A job wider than one node: the workers the launcher starts and each one's GPUs.
ANNOTATION_WORKERS: Final = "gpusizer.dev/worker-count"
ANNOTATION_GPUS_PER_WORKER: Final = "gpusizer.dev/gpus-per-worker"

_GIB: Final = 1 << 30


def memory_request(host_bytes: int) -> str:
    """A Kubernetes memory quantity for ``host_bytes``, rounded up to whole GiB (``Gi``)."""
    return f"{-(-host_bytes // _GIB)}Gi"


def _parent(cls: GPUClass, catalog: Sequence[GPUClass]) -> GPUClass | None:
    return next((c for c in catalog if c.name == cls.parent), None)


def gpu_resource(cls: GPUClass, strategy: MigStrategy = "single") -> str:
    """The extended resource one device of ``cls`` is requested as."""
    if cls.vendor == "amd":
        return "amd.com/gpu"
    if cls.is_mig and strategy == "mixed":
        return cls.mig_resource
    return "nvidia.com/gpu"


def node_affinity(
    cls: GPUClass,
    strategy: MigStrategy = "single",
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG,
) -> NodeAffinitySnippet:
    """Required node affinity for nodes of ``cls`` (one term: the product label In its products;
    for a ``mixed``-strategy slice the whole GPU's products and the slice's count label)."""
    parent = _parent(cls, catalog) if cls.is_mig and strategy == "mixed" else None
    if parent is not None:
        expressions = [
            NodeSelectorRequirement(
                key=parent.product_label, operator="In", values=sorted(parent.products)
            ),
            NodeSelectorRequirement(
                key=f"nvidia.com/mig-{cls.mig_profile}.count", operator="Gt", values=["0"]
            ),
        ]
    else:
        expressions = [
            NodeSelectorRequirement(
                key=cls.product_label, operator="In", values=sorted(cls.products)
            )
        ]
    return NodeAffinitySnippet(
        required_during_scheduling_ignored_during_execution=NodeSelector(
            node_selector_terms=[NodeSelectorTerm(match_expressions=expressions)]
        )
    )


def resources(cls: GPUClass, gpu_count: int, strategy: MigStrategy = "single") -> ResourcesSnippet:
    """The GPU limit of one replica's container: ``gpu_count`` devices of ``cls``."""
    return ResourcesSnippet(limits={gpu_resource(cls, strategy): str(gpu_count)})


def snippets(
    cls: GPUClass,
    gpu_count: int,
    strategy: MigStrategy = "single",
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG,
) -> dict[str, Any]:
    """``node_affinity`` and ``resources`` keyword arguments for a :class:`RecommendationStatus`."""
    return {
        "node_affinity": node_affinity(cls, strategy, catalog),
        "resources": resources(cls, gpu_count, strategy),
    }


def for_strategy(
    rec: RecommendationStatus,
    strategy: MigStrategy,
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG,
) -> RecommendationStatus:
    """``rec`` with its ``nodeAffinity`` / ``resources`` snippets for the MIG ``strategy`` of the
    cluster's nodes of its class (``mixed``: ``nvidia.com/mig-<profile>`` and the whole GPU's
    product label). A whole-GPU class, a class not in ``catalog``, or ``single`` returns ``rec``
    as it is: the snippets the core writes are the ``single`` ones."""
    cls = next((c for c in catalog if c.name == rec.gpu_class), None)
    if cls is None or not cls.is_mig or strategy != "mixed":
        return rec
    return rec.model_copy(update=snippets(cls, rec.gpu_count, strategy, catalog))


def pod_template_patch(
    rec: RecommendationStatus,
    *,
    container: str,
    spec_hash: str | None = None,
    args: list[str] | None = None,
) -> dict[str, Any]:
    """A strategic-merge patch of a workload's ``spec.template`` that applies ``rec``.

    ``args``: the container's whole argument list for an engine that pre-allocates (the model
    flag and ``rec.engineCommandArgs``); a strategic merge replaces a list of strings, so it is
    given only when the container runs the engine.

    For ``kubectl patch deployment|statefulset|job NAME --type strategic --patch-file FILE``:
    containers merge by ``name`` (so ``container`` must name the one that uses the GPU), the GPU
    limit is added to that container's limits, and ``nodeAffinity`` is replaced as a whole
    (``nodeSelectorTerms`` has no merge key). The template is annotated with what was applied; for a
    job of several workers it is one worker's template (its GPUs per worker) and the annotations
    name the worker count the launcher starts.

    Training: ``rec.hostMemoryBytesPerWorker`` (the host memory the loading path and offload
    hold on one worker's node) becomes the container's ``requests.memory``, rounded up to GiB,
    so the scheduler puts each worker on a node with that much allocatable memory. No memory
    limit is set: a limit OOM-kills the container when it is crossed, and the figure counts
    only what gpu-sizer models (staged checkpoint copies, offloaded states and DeepSpeed's
    buffers), not the processes' own resident memory, CUDA's host-side allocations or data
    loader workers; a limit at the request would kill a worker that otherwise runs. A template
    whose existing memory limit is below the request is refused by the API server (a request
    must not exceed its limit).
    """
    if rec.node_affinity is None or rec.resources is None:
        raise ValueError(
            f"recommendation for {rec.gpu_class} has no nodeAffinity/resources snippets"
        )
    annotations = {ANNOTATION_CLASS: rec.gpu_class, ANNOTATION_BASIS: rec.basis.value}
    if spec_hash:
        annotations[ANNOTATION_SPEC_HASH] = spec_hash
    if (rec.worker_count or 1) > 1:
        # A job wider than a node: the template is one worker's; the launcher starts the rest.
        annotations[ANNOTATION_WORKERS] = str(rec.worker_count)
        annotations[ANNOTATION_GPUS_PER_WORKER] = str(rec.gpus_per_worker)
    resources: dict[str, Any] = rec.resources.model_dump(by_alias=True, mode="json")
    if rec.host_memory_bytes_per_worker:
        resources["requests"] = {"memory": memory_request(rec.host_memory_bytes_per_worker)}
    main: dict[str, Any] = {"name": container, "resources": resources}
    if args:
        main["args"] = list(args)
    return {
        "spec": {
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {
                    "affinity": {
                        "nodeAffinity": rec.node_affinity.model_dump(by_alias=True, mode="json")
                    },
                    "containers": [main],
                },
            }
        }
    }
