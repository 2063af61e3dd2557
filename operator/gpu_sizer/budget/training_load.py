"""The ``Load`` phase of training: initialisation and checkpoint load, before sharding. Pure.

Before the first step each rank must get its part of the model, and how it does so can need
more memory than the step (meta-llama/llama-cookbook#100: Llama-2-7B under FSDP on 24 GB GPUs
ran out of memory inside ``FSDP(model, ...)`` because every rank first held the unsharded fp32
model, 25.1 GiB). ``spec.training.initialization`` says how:

- ``GpuPerRank``: the full model (this rank's tensor-parallel part of its pipeline stage) is
  materialised on every GPU, in the recipe's parameter dtype, before the wrapper shards it. FSDP
  version 1 then flattens each unit into a FlatParameter (``flatten_tensors_into_flat_param``:
  a copy of the unit) before sharding; DeepSpeed ZeRO-1/2 clones the rank's fp32 master
  partition (``single_partition_of_fp32_groups``) while the model is whole (its flat 16-bit
  buffer is built on the GPU only when memory allows, ``flatten_on_accelerator``, so it is not
  a requirement).
- ``CpuPerRank``: every rank loads the full model into host RAM; FSDP (``device_id``) moves one
  unit at a time to the GPU (``_move_module_to_device`` moves only the parameters of the unit it
  wraps, PyTorch 2.13 ``torch/distributed/fsdp/_init_utils.py``), flattens and shards it.
- ``RankZeroCpu``: rank 0 loads the model into host RAM, the others build it on the meta device;
  FSDP's ``sync_module_states`` broadcasts unit by unit (accelerate's
  ``cpu_ram_efficient_loading``).
- ``MetaDevice``: no rank holds the full model: meta-device construction then a sharded load
  (``torch.distributed.checkpoint``, FSDP2 ``to_empty``), or DeepSpeed ``zero.Init``, which
  partitions each parameter as it is created; loading a checkpoint gathers one module at a time
  (``GatheredParameters`` in ``transformers``' ``_load_state_dict_into_zero3_model``).

Strategies that keep whole weights on every GPU (``none``, ``ddp``, ``zero1``, ``zero2``) hold
the full model whichever way it arrives. Host memory: ``CpuPerRank`` holds a full copy per
process (Hugging Face ``from_pretrained`` without a ``device_map`` materialises the model on the
CPU before it is moved), ``RankZeroCpu`` one copy on rank 0's node, ``GpuPerRank`` (loaded
straight to the GPU from memory-mapped safetensors) and ``MetaDevice`` none; a checkpoint
quantized on load (bitsandbytes) is staged in its 16-bit form.

All results are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_sizer.api import (
    Initialization,
    OffloadTarget,
    ParallelStrategy,
    Training,
    TrainingFramework,
)
from gpu_sizer.budget.training_precision import Recipe
from gpu_sizer.budget.training_sharding import (
    DEEPSPEED_HOST_BUFFER_FACTOR,
    Holdings,
    shard_degree,
)

__all__ = ["LoadPeak", "either_hf_fsdp_path", "initialization", "load_peak"]

_DEEPSPEED = frozenset({ParallelStrategy.zero1, ParallelStrategy.zero2, ParallelStrategy.zero3})
_SHARDED_WEIGHTS = frozenset(
    {
        ParallelStrategy.fsdp_full_shard,
        ParallelStrategy.fsdp_shard_grad_op,
        ParallelStrategy.fsdp_hybrid_shard,
        ParallelStrategy.zero3,
    }
)


@dataclass(frozen=True, slots=True)
class LoadPeak:
    """GPU bytes at the load peak (weights, quantization metadata, master partition) and the
    host bytes the node's processes stage."""

    weights: int
    quant: int
    master: int
    host_per_node: int

    @property
    def total(self) -> int:
        """GPU bytes of model data at the load peak."""
        return self.weights + self.quant + self.master


def either_hf_fsdp_path(training: Training) -> bool:
    """``transformers`` + FSDP with ``initialization`` Auto, where two loading paths are in use
    and gpu-sizer cannot tell which: both are counted, each on the resource it fills.

    - The ``Trainer`` given a model object: ``from_pretrained`` without a ``device_map`` loads
      it into host memory in every process, and FSDP moves it unit by unit (``CpuPerRank``).
    - TRL's trainers (``SFTTrainer``, ``DPOTrainer``, ``GRPOTrainer``...) given a model name:
      ``create_model_from_path`` (``trl/trainer/utils.py``) sets ``device_map="auto"`` unless
      the launch is ``MULTI_GPU`` or ``DEEPSPEED``; an FSDP launch is neither, and
      ``from_pretrained`` keeps ``"auto"`` under torchrun (it only logs "You've set
      device_map=`auto` while triggering a distributed run with torchrun",
      ``modeling_utils.PreTrainedModel.from_pretrained``, transformers 5.x), so every
      process spreads a whole copy over the node's GPUs: one model's worth on each GPU before
      FSDP shards it (``GpuPerRank``'s bytes).

    The ``Load`` phase is therefore the larger of the two on the GPU (the checkpoint as staged,
    whole, plus the unit FSDP flattens) and the per-process copies on the host. The path a job
    takes is set with ``spec.training.initialization``: ``RankZeroCpu``
    (``fsdp_cpu_ram_efficient_loading``), ``CpuPerRank`` (a model object) or ``MetaDevice``.
    """
    return (
        training.initialization is Initialization.Auto
        and training.framework is TrainingFramework.transformers
        and training.parallelism.strategy.value.startswith("fsdp")
    )


def initialization(training: Training, *, bitsandbytes: bool = False) -> Initialization:
    """The spec's initialization, ``Auto`` resolved to the framework's default loading path.

    - a bitsandbytes base under ``transformers``/``accelerate``: ``GpuPerRank``. bitsandbytes
      quantizes on the GPU, and ``Bnb4BitHfQuantizer.update_device_map`` (``Bnb8Bit`` alike)
      sets ``device_map = {"": torch.cuda.current_device()}`` when none is given, so every rank
      holds the whole quantized model before FSDP or DeepSpeed shards it (accelerate's
      ``fsdp_cpu_ram_efficient_loading`` is ``RankZeroCpu``);
    - ``zero3`` under ``transformers``: ``MetaDevice`` (``from_pretrained`` runs inside
      ``deepspeed.zero.Init`` when the Trainer's DeepSpeed config is ZeRO-3);
    - ``custom``: ``GpuPerRank``, the worst case, as an upper bound (a note says so);
    - otherwise ``CpuPerRank`` (under ``transformers`` + FSDP :func:`load_peak` also counts
      TRL's ``device_map="auto"`` path, :func:`either_hf_fsdp_path`): ``from_pretrained``
      materialises the model in host memory and the Trainer leaves it there for the wrapper
      (``place_model_on_device`` is false under FSDP and DeepSpeed); FSDP1 with ``device_id``
      moves one unit at a time (``_move_module_to_device`` skips nested FSDP instances),
      FSDP2's ``fully_shard`` and ZeRO-1/2 likewise take it from host memory; torchtune's
      recipes build on the meta device and every rank reads the full state dict into host
      memory (``load_from_full_model_state_dict``); a custom accelerate or DeepSpeed loop
      without ``zero.Init`` builds on the CPU.
    """
    init = training.initialization
    if init is not Initialization.Auto:
        return init
    fw = training.framework
    hf = fw in (TrainingFramework.transformers, TrainingFramework.accelerate)
    if fw is TrainingFramework.custom or (hf and bitsandbytes):
        return Initialization.GpuPerRank
    if fw is TrainingFramework.transformers and (
        training.parallelism.strategy is ParallelStrategy.zero3
    ):
        return Initialization.MetaDevice
    return Initialization.CpuPerRank


def load_peak(
    training: Training, r: Recipe, h: Holdings, staged_bytes: int, *, bitsandbytes: bool = False
) -> LoadPeak:
    """The ``Load`` phase's per-GPU model bytes and host bytes per node.

    :param staged_bytes: bytes of this rank's part of the checkpoint as staged in host memory.
    :param bitsandbytes: the base is quantized by bitsandbytes on load.
    """
    par = training.parallelism
    strategy = par.strategy
    n = shard_degree(training)
    init = initialization(training, bitsandbytes=bitsandbytes)
    fsdp = strategy.value.startswith("fsdp")
    master = 0
    off = training.offload
    offloaded = off is not None and off.optimizer is not OffloadTarget.None_
    if strategy in (ParallelStrategy.zero1, ParallelStrategy.zero2) and not offloaded:
        # With offload_optimizer the fp32 partition is created in host memory instead.
        master = -(-h.trainable // n) * r.master
    # Sharding one unit at a time: the shards made so far, the unit materialised and (FSDP1)
    # its FlatParameter copy, or (ZeRO-3) the module being gathered.
    unit = 2 * h.unit_bytes if fsdp else int(h.largest_module * h.bytes_per_param)
    weights = -(-h.weight_bytes // n) + unit
    quant = -(-h.quant_overhead // n)
    if strategy not in _SHARDED_WEIGHTS:
        weights, quant = h.weight_bytes, h.quant_overhead
    elif init is Initialization.GpuPerRank:
        weights = max(weights, h.weight_bytes + (h.unit_bytes if fsdp else 0))
        quant = h.quant_overhead
    both = either_hf_fsdp_path(training) and not bitsandbytes
    if both:
        # TRL's device_map="auto" path: every process's whole copy spread over the node's GPUs,
        # then FSDP flattens one unit at a time.
        weights = max(weights, staged_bytes + h.unit_bytes)
    if init is Initialization.CpuPerRank or both:
        host = par.ranks_per_node * staged_bytes
    elif init is Initialization.RankZeroCpu:
        host = staged_bytes
    else:
        host = 0
    if strategy in _DEEPSPEED:
        # DeepSpeed's estimators size the host side of loading with the same 1.5 allowance
        # (``estimate_zero2_model_states_mem_needs``: params x 4 x GPUs per node x 1.5).
        host = int(host * DEEPSPEED_HOST_BUFFER_FACTOR)
    return LoadPeak(weights, quant, master, host)
