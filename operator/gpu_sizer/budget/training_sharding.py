"""Model states on one GPU under DDP, FSDP and DeepSpeed ZeRO, as those implement it. Pure.

The ZeRO paper (Rajbhandari et al. 2020, section 5.1, Figure 1) partitions the four model states
over N data-parallel ranks: stage 1 (P_os) the optimizer state and master weights, stage 2
(P_os+g) the gradients too, stage 3 (P_os+g+p) the parameters too. :func:`partitioned` is that
rule. The frameworks allocate more than the rule, and when: the figures below follow PyTorch
2.13 and DeepSpeed 0.19.5 (unchanged in these respects since 0.16), at two instants of a step,
whose larger is the step's peak:

- **backward**: the weights in use (sharded plus gathered units), gradients being produced,
  optimizer state and master weights (they exist from the first step on), communication buffers;
  the caller adds activations.
- **optimizer step**: sharded weights, the gradients the optimizer reads (including DeepSpeed's
  fp32 copy), optimizer state, master weights and the step's temporaries
  (:func:`~gpu_sizer.budget.training_precision.optimizer_step_workspace_bytes`).

Per strategy:

- ``none``: nothing is sharded.
- ``ddp`` (``torch/nn/parallel/distributed.py``, ``torch/csrc/distributed/c10d/reducer.cpp``):
  the reducer allocates its gradient buckets (``bucket_cap_mb`` 25 MiB each, the first 1 MiB) at
  construction and keeps them; unless ``gradient_as_bucket_view`` the buckets are a second copy
  of every gradient (PyTorch DDP docs: "the saved memory size will be equal to the total
  gradients size"). Hugging Face accelerate and Lightning leave ``gradient_as_bucket_view``
  false. The buckets are ``communicationBufferBytes``.
- ``fsdp-*`` version 1 (``FullyShardedDataParallel``, ``torch/distributed/fsdp/_flat_param.py``,
  ``_runtime_utils.py``): each unit (one decoder layer under Hugging Face's
  ``transformer_auto_wrap_policy``; the root keeps embeddings, lm_head and the final norm) is one
  FlatParameter sharded over N ranks. During forward and backward a unit is all-gathered into its
  unsharded FlatParameter (in ``MixedPrecision.param_dtype``), the next one is prefetched
  (``BackwardPrefetch.BACKWARD_PRE``; ``limit_all_gathers`` allows two in flight), and the root's
  stays gathered (the root is not resharded after forward, ``_post_forward_reshard``);
  ``fsdp-shard-grad-op`` does not reshard after forward, so every unit stays gathered from its
  forward to its backward. A unit's unsharded gradient exists until its reduce-scatter, the
  root's until the end of backward; the reduce-scatter writes a new gradient shard. Sharded
  gradients have the FlatParameter's dtype (``_cast_grad_to_param_dtype``). With PEFT's
  ``fsdp_auto_wrap_policy`` the LoRA adapters are units of their own, so only trainable
  parameters have gradients. ``fsdp-hybrid-shard`` is ``HYBRID_SHARD``: the same within a shard
  group (``shardGroupSize``, default the node's GPUs), replicated across groups.
- ``fsdp-*`` version 2 (``fully_shard``, ``torch/distributed/fsdp/_fully_shard``): per-parameter
  DTensor shards; the same gathered set (root ``reshard_after_forward=False``, implicit forward
  and explicit backward prefetch of one group), plus the all-gather output buffer that
  ``foreach_all_gather_copy_out`` copies out of (kept until the next all-gather,
  ``AllGatherState``) and the reduce-scatter input buffers (``foreach_reduce``: one being filled
  and ``reduce_scatter_max_input_buffers`` = 1 kept, ``ReduceScatterState``).
- ``zero1``/``zero2`` (``deepspeed/runtime/zero/stage_1_and_2.py``,
  ``DeepSpeedZeroOptimizer``): the model's 16-bit parameters stay whole in one flat buffer;
  each rank keeps an fp32 master partition (``single_partition_of_fp32_groups``) and its
  optimizer state. Gradients go through the reduce bucket (``setup_buckets``:
  ``reduce_bucket_size`` elements of the model dtype, two with ``overlap_comm``, which DeepSpeed
  enables only for stage 3) and the rank's partition is kept in ``grads_in_partition``. Stage 1
  keeps every 16-bit gradient until the step; stage 2 frees the others' as they are reduced. At
  the step (``step``) the partition is copied to fp32 (``flat_grad_partition.to(...)``, 4P/N)
  for the optimizer: 2P + 18P/N of model states for stage 2 with mixed-precision Adam
  (deepspeedai/DeepSpeed#5102 and the review of deepspeedai/DeepSpeed#5099,
  ``estimate_zero2_model_states_mem_needs``).
- ``zero3`` (``deepspeed/runtime/zero/stage3.py``, ``partitioned_param_coordinator.py``):
  parameters partitioned, except those of at most ``stage3_param_persistence_threshold``
  elements (norms, biases), which stay whole. Modules are gathered before use; what stays
  gathered is bounded by ``stage3_max_live_parameters`` (a module is always gathered whole, and
  ``stage3_prefetch_bucket_size`` elements are fetched ahead). Gradients are reduce-scattered
  through one ``reduce_bucket_size`` buffer into ``grad_partitions_flat_buffer`` (P/N in the
  gradient accumulation dtype); at the step each optimizer sub-group (``sub_group_size``)
  gets an fp32 gradient copy (``_prepare_fp32_grad_for_sub_group``).

Offload (``spec.training.offload``): DeepSpeed ``offload_optimizer`` keeps the fp32 master
partition, its fp32 gradient and the optimizer state in host memory and runs the step on the
CPU (DeepSpeedCPUAdam updates in place); ``offload_param`` adds the 16-bit parameter partition.
Host bytes follow DeepSpeed's own estimators (``estimate_zero2_model_states_mem_needs``:
16 bytes per parameter with Adam; ``estimate_zero3_model_states_mem_needs``: 16, or 18 with
parameter offload), times their ``additional_buffer_factor`` of 1.5 for pinned buffers, per
rank's partition and summed over the node's ranks. ZeRO-1 still holds every 16-bit gradient on
the GPU until the reduction, ZeRO-2 streams its partition's gradients out through a buffer of
the largest parameter (``temp_grad_buffer_for_gpu_offload``); ZeRO-3 moves
``grad_partitions_flat_buffer`` to host memory. NVMe
(ZeRO-Infinity) keeps them on disk behind pinned host buffers (``offload_config.py``: parameters
``buffer_count`` 5 x ``buffer_size`` 1e8 elements plus up to ``max_in_cpu`` 1e9 elements;
optimizer ``buffer_count`` 4 sub-group-sized fp32 buffers). FSDP's ``CPUOffload`` /
``CPUOffloadPolicy`` keep the sharded parameters, sharded gradients and optimizer state in host
memory and step on the CPU; the GPU holds gathered units only.

All results are bytes on one GPU (or, for ``host``, in one process's host memory).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_sizer.api import (
    DEEPSPEED_DEFAULTS,
    DeepSpeedOptions,
    Offload,
    OffloadTarget,
    ParallelStrategy,
    PrecisionRecipe,
    Training,
)
from gpu_sizer.budget.runtime import allocator_reserve_bytes
from gpu_sizer.budget.training_precision import Recipe, optimizer_step_workspace_bytes

__all__ = [
    "DEEPSPEED_HOST_BUFFER_FACTOR",
    "Holdings",
    "PhaseBytes",
    "ShardedStates",
    "deepspeed_options",
    "partitioned",
    "shard_degree",
    "sharded_states",
]

_FSDP = frozenset(
    {
        ParallelStrategy.fsdp_full_shard,
        ParallelStrategy.fsdp_shard_grad_op,
        ParallelStrategy.fsdp_hybrid_shard,
    }
)
#: DeepSpeed's ``additional_buffer_factor`` (``estimate_zero2_model_states_mem_needs`` in
#: ``stage_1_and_2.py``, ``estimate_zero3_model_states_mem_needs`` in ``stage3.py``): the host
#: memory of offloaded states is 1.5 x what they hold, for the pinned staging buffers and the
#: temporaries of the CPU optimizer step.
DEEPSPEED_HOST_BUFFER_FACTOR = 1.5
#: NVMe swap buffers (DeepSpeedZeroOffloadParamConfig / OptimizerConfig defaults).
_NVME_PARAM_BUFFERS = 5 * 100_000_000
_NVME_PARAM_MAX_IN_CPU = 1_000_000_000
_NVME_OPTIMIZER_BUFFERS = 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class Holdings:
    """What one GPU's part of a replica holds before data-parallel sharding.

    The part is one tensor-parallel rank of one pipeline stage. ``weight_bytes`` counts every
    weight as stored (a frozen LoRA base in its dtype or quantized payload, trainable parameters
    in the recipe's parameter dtype); ``optimizer_bytes`` is the optimizer state of all
    trainable parameters. A unit is one decoder layer; the root is what lies outside the layers
    (embeddings, lm_head, final norm). ``largest_module`` is the largest single module's
    parameters (ZeRO-3 gathers module by module); ``persistent`` the parameters in tensors small
    enough for ZeRO-3 to keep whole (norms, biases); ``largest_trainable_module`` the largest
    module that receives gradients (a LoRA adapter matrix, or ``largest_module``). Counts are
    parameters, sizes bytes.
    """

    params: int
    trainable: int
    weight_bytes: int
    quant_overhead: int
    optimizer_bytes: int
    layers: int
    unit_params: int
    unit_trainable: int
    unit_bytes: int
    root_params: int
    root_trainable: int
    root_bytes: int
    largest_module: int
    persistent: int
    largest_trainable_module: int = 0

    @property
    def bytes_per_param(self) -> float:
        """Average stored bytes per parameter."""
        return self.weight_bytes / max(1, self.params)


@dataclass(frozen=True, slots=True)
class PhaseBytes:
    """Per-GPU bytes by component at one instant of a phase.

    ``activations`` holds activations and temporary workspaces (here: the optimizer step's
    temporaries; :mod:`gpu_sizer.budget.training` adds the backward instant's activations).
    """

    weights: int
    quant: int
    gradients: int
    optimizer: int
    master: int
    communication: int
    activations: int = 0

    @property
    def total(self) -> int:
        """Sum of the components, in bytes."""
        return (
            self.weights
            + self.quant
            + self.gradients
            + self.optimizer
            + self.master
            + self.communication
            + self.activations
        )

    @property
    def transient(self) -> int:
        """Bytes of short-lived tensors (activations, workspaces, gradients, communication
        buffers), on which the caching allocator keeps a reserve."""
        return self.activations + self.gradients + self.communication

    @property
    def reserved(self) -> int:
        """``total`` plus the caching allocator's reserve on the transient tensors."""
        return self.total + allocator_reserve_bytes(self.transient)


@dataclass(frozen=True, slots=True)
class ShardedStates:
    """Model states at the backward and optimizer-step instants, and host bytes per rank."""

    backward: PhaseBytes
    step: PhaseBytes
    host: int


def shard_degree(training: Training) -> int:
    """Ranks one copy of the model states is sharded over: data x context parallel, or the
    shard group of ``fsdp-hybrid-shard`` (default the node's GPUs)."""
    par = training.parallelism
    n = par.data_shards
    if par.strategy is ParallelStrategy.fsdp_hybrid_shard:
        group = par.fsdp.shard_group_size if par.fsdp and par.fsdp.shard_group_size else None
        return min(n, group or par.ranks_per_node)
    return n


def deepspeed_options(training: Training) -> DeepSpeedOptions:
    """The spec's DeepSpeed settings, DeepSpeed's defaults where unset."""
    return training.parallelism.deepspeed or DeepSpeedOptions()


def partitioned(
    weights: int, grads: int, optimizer: int, master: int, stage: int, n: int
) -> tuple[int, int, int, int]:
    """The ZeRO paper's partitioning (section 5.1) of the four model states over ``n`` ranks.

    ``stage`` 0 keeps all; 1 (P_os) divides optimizer state and master weights; 2 (P_os+g) also
    gradients; 3 (P_os+g+p) also weights. Returns (weights, gradients, optimizer, master) bytes.
    """
    if stage >= 1:
        optimizer, master = _cdiv(optimizer, n), _cdiv(master, n)
    if stage >= 2:
        grads = _cdiv(grads, n)
    if stage >= 3:
        weights = _cdiv(weights, n)
    return weights, grads, optimizer, master


def _gather_bytes(r: Recipe) -> int:
    """Bytes per trainable element as FSDP gathers it: ``MixedPrecision.param_dtype`` (the
    compute dtype) under Autocast, the parameters' own dtype otherwise."""
    return r.compute if r.name is PrecisionRecipe.Autocast else r.param


def _gathered(r: Recipe, trainable: int, stored: int) -> int:
    """Bytes of weights stored as ``stored`` bytes (``trainable`` of them trainable) once
    gathered for compute; frozen weights are gathered as stored."""
    return max(0, stored - trainable * (r.param - _gather_bytes(r)))


def sharded_states(training: Training, r: Recipe, h: Holdings) -> ShardedStates:
    """Per-GPU model states of ``h`` under the spec's strategy, recipe and offload.

    :param training: strategy, data/context parallel sizes, DDP/FSDP/DeepSpeed options, offload
        and optimizer (for the step's temporaries).
    """
    strategy = training.parallelism.strategy
    n = shard_degree(training)
    t = h.trainable
    workspace = optimizer_step_workspace_bytes(training.optimizer, r.state, t)
    if strategy in _FSDP:
        result = _fsdp(training, r, h, n)
    elif strategy in (ParallelStrategy.zero1, ParallelStrategy.zero2):
        result = _zero12(training, r, h, n, stage=1 if strategy is ParallelStrategy.zero1 else 2)
    elif strategy is ParallelStrategy.zero3:
        result = _zero3(training, r, h, n)
    else:
        ddp = training.parallelism.ddp
        view = ddp is not None and ddp.gradient_as_bucket_view
        buckets = t * r.grad if strategy is ParallelStrategy.ddp and not view else 0
        both = PhaseBytes(
            h.weight_bytes, h.quant_overhead, t * r.grad, h.optimizer_bytes, t * r.master, buckets
        )
        return ShardedStates(both, replace(both, activations=workspace), 0)
    return result


def _fsdp(training: Training, r: Recipe, h: Holdings, n: int) -> ShardedStates:
    par = training.parallelism
    version = par.fsdp.version if par.fsdp is not None else 1
    t = h.trainable
    weights = _cdiv(h.weight_bytes, n)
    quant = _cdiv(h.quant_overhead, n)
    grads = _cdiv(t * r.grad, n)
    opt = _cdiv(h.optimizer_bytes, n)
    master = _cdiv(t * r.master, n)
    workspace = optimizer_step_workspace_bytes(training.optimizer, r.state, _cdiv(t, n))
    gather_bytes = _gather_bytes(r)
    root = _gathered(r, h.root_trainable, h.root_bytes)
    unit = _gathered(r, h.unit_trainable, h.unit_bytes)
    whole = _gathered(r, t, h.weight_bytes)
    if par.strategy is ParallelStrategy.fsdp_shard_grad_op:
        gathered = whole
    else:
        gathered = min(root + 2 * unit, whole)
    unsharded_grads = (h.root_trainable + h.unit_trainable) * gather_bytes
    unit_grad = h.unit_trainable * gather_bytes
    comm = unit + 2 * unit_grad if version == 2 else _cdiv(unit_grad, n)
    host = 0
    off = training.offload
    if off is not None and off.parameters is OffloadTarget.Cpu:
        host = weights + grads + opt + master
        weights = grads = opt = master = workspace = 0
    backward = PhaseBytes(weights + gathered, quant, grads + unsharded_grads, opt, master, comm)
    step = PhaseBytes(weights, quant, grads, opt, master, 0, workspace)
    return ShardedStates(backward, step, host)


def _bucket(training: Training, grad_bytes: int, stage: int) -> int:
    ds = deepspeed_options(training)
    overlap = ds.overlap_comm if ds.overlap_comm is not None else stage == 3
    buffers = 2 if overlap and stage < 3 else 1
    return buffers * ds.reduce_bucket_size * grad_bytes


def _zero12(training: Training, r: Recipe, h: Holdings, n: int, stage: int) -> ShardedStates:
    t = h.trainable
    part = _cdiv(t, n)
    opt = _cdiv(h.optimizer_bytes, n)
    master = part * r.master
    fp32_grad = part * r.master  # the partition's gradient in master_weights_and_grads_dtype
    workspace = optimizer_step_workspace_bytes(training.optimizer, r.state, part)
    bucket = _bucket(training, r.grad, stage)
    grads_backward = t * r.grad if stage == 1 else part * r.grad
    host = 0
    off = training.offload
    if off is not None and off.optimizer is not OffloadTarget.None_:
        host = _optimizer_host(off, master + opt + part * 4, part)
        if stage == 2:
            grads_backward = h.largest_trainable_module * r.grad
        master = opt = fp32_grad = workspace = 0
        step_grads = 0
    else:
        step_grads = part * r.grad + fp32_grad
    backward = PhaseBytes(h.weight_bytes, h.quant_overhead, grads_backward, opt, master, bucket)
    step = PhaseBytes(h.weight_bytes, h.quant_overhead, step_grads, opt, master, 0, workspace)
    return ShardedStates(backward, step, host)


def _optimizer_host(off: Offload, cpu_bytes: int, part: int) -> int:
    """Host bytes of one rank's offloaded optimizer: ``cpu_bytes`` (fp32 master partition,
    optimizer state, fp32 gradient partition) with DeepSpeed's buffer allowance, or the pinned
    swap buffers of NVMe offload."""
    if off.optimizer is OffloadTarget.Nvme:
        sub = min(part, DEEPSPEED_DEFAULTS["subGroupSize"])
        return _NVME_OPTIMIZER_BUFFERS * sub * 4
    return int(cpu_bytes * DEEPSPEED_HOST_BUFFER_FACTOR)


def _zero3(training: Training, r: Recipe, h: Holdings, n: int) -> ShardedStates:
    ds = deepspeed_options(training)
    t = h.trainable
    part = _cdiv(t, n)
    persistent_params = h.persistent
    persistent = int(persistent_params * h.bytes_per_param)
    partition = _cdiv(max(0, h.weight_bytes - persistent), n)
    quant = _cdiv(h.quant_overhead, n)
    live = min(
        max(0, h.params - persistent_params),
        max(ds.stage3_max_live_parameters, h.largest_module + ds.stage3_prefetch_bucket_size),
    )
    gathered = int(live * h.bytes_per_param)
    module_grad = min(h.largest_trainable_module, t) * r.grad
    grad_partition = part * r.grad
    sub = min(part, ds.sub_group_size)
    fp32_grad = sub * r.master
    master = part * r.master
    opt = _cdiv(h.optimizer_bytes, n)
    workspace = optimizer_step_workspace_bytes(training.optimizer, r.state, sub)
    bucket = _bucket(training, r.grad, 3)
    host = 0
    off = training.offload
    if off is not None and off.optimizer is not OffloadTarget.None_:
        host += _optimizer_host(off, master + opt + part * 4, part)
        master = opt = fp32_grad = workspace = grad_partition = 0
    if off is not None and off.parameters is not OffloadTarget.None_:
        if off.parameters is OffloadTarget.Nvme:
            elements = _NVME_PARAM_BUFFERS + min(_NVME_PARAM_MAX_IN_CPU, _cdiv(h.params, n))
            host += int(elements * h.bytes_per_param)
        else:
            host += int(partition * DEEPSPEED_HOST_BUFFER_FACTOR)
        partition = 0
    backward = PhaseBytes(
        partition + persistent + gathered, quant, grad_partition + module_grad, opt, master, bucket
    )
    step = PhaseBytes(
        partition + persistent, quant, grad_partition + fp32_grad, opt, master, 0, workspace
    )
    return ShardedStates(backward, step, host)
