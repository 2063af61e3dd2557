"""A job wider than one node: workers, GPUs per worker, launchers, bounds. Pure.

A data-parallel job of N GPUs (FSDP, DDP, ZeRO, with tensor/pipeline/context parallelism) runs
as W worker pods of G GPUs each, one per node, W x G = N: ``torchrun --nnodes=W
--nproc-per-node=G`` in every pod (PyTorch docs, "torchrun (Elastic Launch)": every node runs
the same number of processes), a Kubeflow ``PyTorchJob`` with ``Master`` 1 and ``Worker`` W - 1
replicas and ``nprocPerNode`` G (Training Operator docs, "PyTorchJob"), a ``JobSet`` whose
replicated Job is Indexed with parallelism and completions W (JobSet docs, "PyTorch example"),
or a ``LeaderWorkerSet`` of ``size`` W (LWS docs, "multi-node inference"). G is the largest
divisor of N that one node holds, so that every worker is alike.

GPUs per node come from, in order: ``spec.training.parallelism.gpusPerNode``; the cluster's
nodes of the class (the most GPUs any node of it has, GFD ``nvidia.com/gpu.count``); the
class's catalog figure (8 for HGX/DGX baseboards and the cloud instances of these GPUs).

Bounds. A job is placed on a class only when the cluster can hold it: no more GPUs than the
cluster's nodes of the class have together (when the inventory knows the class), else than
:data:`MAX_JOB_GPUS`; tensor parallelism within one node (Megatron-LM and PyTorch's tensor
parallel keep a tensor-parallel group on NVLink: its all-reduces sit on every layer's critical
path); a serving or generation pod (the engine's whole process group) within one node, since
spanning nodes is not modelled. Each refusal says which bound was hit.

The figures assume the class's interconnect within a node and, between nodes, a fabric that
carries NCCL (InfiniBand, RoCE or EFA): gpu-sizer sizes memory, not the network, and a job
across nodes on a plain TCP network runs, but slowly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.api import GPUWorkloadSpec, LaunchStatus
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
from gpu_sizer.inventory.nodes import ClassCapacity
from gpu_sizer.sizing.placement import snippets

__all__ = [
    "MAX_JOB_GPUS",
    "ClassCapacity",
    "Split",
    "bound_problem",
    "gpus_per_node",
    "launch",
    "recommendation_fields",
    "split",
]

#: Largest job sized without an inventory: 16,384 GPUs, the largest training job with a public
#: account (Llama 3 405B on 16,384 H100s, "The Llama 3 Herd of Models", section 3.3.1).
MAX_JOB_GPUS: Final = 16_384


@dataclass(frozen=True, slots=True)
class Split:
    """``workers`` pods of ``gpus_per_worker`` GPUs each; ``per_node`` the node's GPUs and
    ``source`` where that figure came from."""

    workers: int
    gpus_per_worker: int
    per_node: int
    source: str


def gpus_per_node(
    spec: GPUWorkloadSpec, cls: GPUClass, capacity: Mapping[str, ClassCapacity] | None
) -> tuple[int, str]:
    """GPUs one node of ``cls`` has, and where the figure came from (see the module doc)."""
    tr = spec.training
    if tr is not None and tr.parallelism.gpus_per_node is not None:
        return tr.parallelism.gpus_per_node, "spec.training.parallelism.gpusPerNode"
    if capacity is not None and cls.name in capacity:
        return capacity[cls.name].gpus_per_node, f"the cluster's {cls.name} nodes"
    return cls.gpus_per_node, f"the catalog's {cls.name} nodes"


def split(total: int, per_node: int, source: str = "") -> Split:
    """``total`` GPUs as alike workers of at most ``per_node`` GPUs: the largest divisor of
    ``total`` not above ``per_node``."""
    g = max(d for d in range(1, min(total, per_node) + 1) if total % d == 0)
    return Split(total // g, g, per_node, source)


def bound_problem(
    spec: GPUWorkloadSpec,
    cls: GPUClass,
    capacity: Mapping[str, ClassCapacity] | None,
) -> str | None:
    """Why the cluster cannot hold ``spec`` on ``cls`` (the bound hit), or ``None``."""
    total = spec.gpu_count
    if total == 1 and (capacity is None or cls.name not in capacity):
        return None  # one GPU fits every node, and no bound below applies to it
    per_node, source = gpus_per_node(spec, cls, capacity)
    known = capacity is not None and cls.name in capacity
    if known:
        assert capacity is not None
        have = capacity[cls.name]
        if total > have.gpus:
            return (
                f"the job spans {total:,} GPUs; the cluster has {have.gpus:,} {cls.name} GPUs "
                f"({have.nodes} nodes)"
            )
    elif total > MAX_JOB_GPUS:
        return (
            f"the job spans {total:,} GPUs, more than the {MAX_JOB_GPUS:,} gpu-sizer sizes "
            "without an inventory (the largest public training job)"
        )
    tr = spec.training
    if tr is None and total > per_node:
        # Serving and generation run as one pod (the engine's process group, or one pipeline):
        # a pod larger than a node is never scheduled. Engines that span nodes (vLLM or SGLang
        # over Ray or a LeaderWorkerSet) are not modelled, so no friendlier split is offered.
        if spec.generation is not None:
            return (
                f"one pod of {total} GPUs (ulyssesDegree x ringDegree, x2 with cfgParallel) "
                f"does not fit the {per_node} GPUs of one node ({source}); a pipeline across "
                f"nodes is not modelled: keep that product within {per_node}"
            )
        return (
            f"one pod of {total} GPUs (tensor x pipeline x data parallel) does not fit the "
            f"{per_node} GPUs of one node ({source}); serving across nodes is not modelled: "
            f"keep the parallel sizes' product within {per_node}"
        )
    if tr is not None and tr.parallelism.tensor_parallel_size > per_node:
        return (
            f"tensorParallelSize {tr.parallelism.tensor_parallel_size} exceeds the {per_node} "
            f"GPUs of one node ({source}): a tensor-parallel group stays on one node's NVLink"
        )
    return None


def launch(cls: GPUClass, s: Split) -> LaunchStatus:
    """The split as torchrun, PyTorchJob, JobSet and LeaderWorkerSet express it."""
    replicas = {"Master": 1}
    if s.workers > 1:
        replicas["Worker"] = s.workers - 1
    between = (
        "none (one node)"
        if s.workers == 1
        else "a fabric NCCL runs on (InfiniBand, RoCE or EFA; a TCP network runs, slowly)"
    )
    return LaunchStatus(
        torchrun_args=[f"--nnodes={s.workers}", f"--nproc-per-node={s.gpus_per_worker}"],
        pytorch_job_replicas=replicas,
        job_set_parallelism=s.workers,
        leader_worker_set_size=s.workers,
        interconnect=f"within a node: {cls.interconnect}; between nodes: {between}",
    )


def _host_per_worker(spec: GPUWorkloadSpec, gpus_per_worker: int, host_per_node: int) -> int:
    """Host bytes one worker needs: the estimate's per-node figure, re-estimated when the
    estimate assumed another number of ranks per node (it stages or offloads per rank)."""
    tr = spec.training
    if tr is None or tr.parallelism.ranks_per_node == gpus_per_worker:
        return host_per_node
    par = tr.parallelism.model_copy(update={"gpus_per_node": gpus_per_worker})
    changed = spec.model_copy(update={"training": tr.model_copy(update={"parallelism": par})})
    return estimate(changed).host_bytes_per_node or 0


def recommendation_fields(
    spec: GPUWorkloadSpec,
    cls: GPUClass,
    host_per_node: int | None,
    capacity: Mapping[str, ClassCapacity] | None = None,
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG,
) -> dict[str, Any]:
    """Keyword arguments of a :class:`~gpu_sizer.api.RecommendationStatus` for ``spec`` on
    ``cls``: node affinity, one worker's GPU limit, the worker split, host memory per worker
    (training, and a pipeline whose components are offloaded or on the CPU) and, for a job
    of several GPUs, how launchers express it."""
    total = spec.gpu_count
    per_node, source = gpus_per_node(spec, cls, capacity)
    s = split(total, per_node, source)
    fields = snippets(cls, s.gpus_per_worker, catalog=catalog)
    fields["worker_count"] = s.workers
    fields["gpus_per_worker"] = s.gpus_per_worker
    if spec.training is not None:
        fields["host_memory_bytes_per_worker"] = _host_per_worker(
            spec, s.gpus_per_worker, host_per_node or 0
        )
    elif spec.generation is not None and host_per_node:
        fields["host_memory_bytes_per_worker"] = host_per_node  # offloaded pipeline weights
    if total > 1 and (spec.training is not None or s.workers > 1):
        fields["launch"] = launch(cls, s)
    return fields
