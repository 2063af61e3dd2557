"""Measuring a job wider than one node: what one node shows, and what is derived. Pure.

A measurement Job runs on one node: the probe starts its ranks with ``torchrun --standalone
--nnodes=1`` in one pod (:mod:`gpu_sizer.probe.launch`), and a measurement should not hold several
nodes' GPUs. A data-parallel job of W workers x G GPUs cannot be run whole there, so the Job runs
the part one node can show: the node's G ranks with the job's micro-batch, sequence length,
precision, optimizer, tensor, pipeline and context parallelism, and the data-parallel size reduced
to what fills the node.
Per rank this is the job's own step except for what sharding divides: ZeRO/FSDP shard the model
states over G ranks instead of the job's N, so each rank holds more of them (a DDP replica
holds the same). The measured peak is therefore an upper bound of the job's per-GPU peak, and
the job's figure is derived from it by subtracting what the memory model puts on sharding over
G rather than N (the same estimate, run for both data-parallel sizes). The status keeps both:
``measurement.measuredRanks`` and ``jobRanks``, the measured peak, ``derivedPeakBytes`` and a
sentence saying which is which.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_sizer.api import GPUWorkloadSpec
from gpu_sizer.budget import estimate

__all__ = ["NodeScope", "derive", "node_scope"]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class NodeScope:
    """The one-node part of a multi-node job: the spec the probe runs, its ranks and the job's."""

    spec: GPUWorkloadSpec
    measured_ranks: int
    job_ranks: int


def node_scope(spec: GPUWorkloadSpec) -> NodeScope | None:
    """The one-node spec of a training job wider than a node, or ``None`` when the job fits on
    one node (or when one node cannot hold even one model replica: tensor x pipeline x context
    parallel above its GPUs, which the probe reports as Unsupported)."""
    tr = spec.training
    if tr is None:
        return None
    par = tr.parallelism
    per_node = par.gpus_per_node or 8
    if par.gpus <= per_node:
        return None
    model_parallel = par.tensor_parallel_size * par.pipeline_parallel_size
    model_parallel *= par.context_parallel_size
    dp = per_node // model_parallel
    if dp < 1:
        return None
    changed = par.model_copy(update={"data_parallel_size": dp, "gpus_per_node": per_node})
    one_node = spec.model_copy(update={"training": tr.model_copy(update={"parallelism": changed})})
    return NodeScope(one_node, one_node.gpu_count, spec.gpu_count)


def derive(spec: GPUWorkloadSpec, scope: NodeScope, measured_peak: int) -> tuple[int, str]:
    """The job's per-GPU peak derived from the one-node ``measured_peak`` (bytes), and the
    sentence that says what was measured and what was derived."""
    job = estimate(spec).per_gpu.total_bytes
    node = estimate(scope.spec).per_gpu.total_bytes
    delta = max(0, node - job)
    derived = max(0, measured_peak - delta)
    strategy = spec.training.parallelism.strategy.value if spec.training else "training"
    text = (
        f"measured one node's {scope.measured_ranks} ranks of the {scope.job_ranks}-rank "
        f"{strategy} job (same micro-batch and model parallelism, model states sharded "
        f"{scope.measured_ranks // _model_parallel(spec)} ways instead of "
        f"{scope.job_ranks // _model_parallel(spec)}): peak {measured_peak / GIB:.1f} GiB per GPU; "
        f"derived for the job: {derived / GIB:.1f} GiB per GPU, the measured peak less the "
        f"{delta / GIB:.1f} GiB the estimate puts on the smaller sharding"
    )
    return derived, text


def _model_parallel(spec: GPUWorkloadSpec) -> int:
    assert spec.training is not None
    par = spec.training.parallelism
    return par.tensor_parallel_size * par.pipeline_parallel_size * par.context_parallel_size
