"""One rank of a data-parallel synthetic training run: DDP, FSDP 1/2 or DeepSpeed ZeRO. Torch.

Runs inside a process that ``torch.distributed.run`` started (``gpu_sizer.probe.rank``), with
the process group initialised. The model is built the way ``spec.training.initialization``
says, wrapped the way the strategy says, and trained for two optimizer steps
(:func:`gpu_sizer.probe.training.run_steps`); each phase is measured on this rank.

- ``ddp``: ``DistributedDataParallel`` (``gradient_as_bucket_view`` from the spec).
- ``fsdp-*`` version 1: ``FullyShardedDataParallel`` with each decoder layer (and, under LoRA,
  each adapter matrix, as PEFT's ``fsdp_auto_wrap_policy`` does) as a unit, ``sharding_strategy``
  ``FULL_SHARD``/``SHARD_GRAD_OP``/``HYBRID_SHARD``, ``MixedPrecision(param_dtype, reduce_dtype,
  buffer_dtype)`` in the compute dtype under Autocast (Hugging Face accelerate's
  ``set_mixed_precision``), ``BackwardPrefetch.BACKWARD_PRE``, ``limit_all_gathers``, and
  ``CPUOffload(offload_params=True)`` when the spec offloads. FSDP1 needs a GPU.
- ``fsdp-*`` version 2: ``fully_shard`` on each decoder layer then the root, with
  ``MixedPrecisionPolicy(param_dtype, reduce_dtype)`` under Autocast, ``reshard_after_forward``
  false for ``fsdp-shard-grad-op``, a 2-D (replicate, shard) mesh for ``fsdp-hybrid-shard`` and
  ``CPUOffloadPolicy`` when the spec offloads. Runs on the CPU over gloo too.
- ``zero1/2/3``: ``deepspeed.initialize`` with the spec's ``zero_optimization`` settings, its
  ``bf16``/``fp16`` section and ``torch.optim``'s optimizer as the client optimizer (what the
  Hugging Face Trainer passes); ZeRO-3 builds the model inside ``deepspeed.zero.Init`` under
  ``MetaDevice``. DeepSpeed runs on CUDA only.

Initialization: ``GpuPerRank`` builds the whole model on the GPU before wrapping;
``CpuPerRank`` on the CPU (the wrapper moves it unit by unit); ``RankZeroCpu`` on rank 0's CPU
with the others on the meta device (FSDP1 ``sync_module_states``; FSDP2 and DDP receive rank 0's
state by broadcast); ``MetaDevice`` on the meta device everywhere, materialised shard by shard
(FSDP1 ``param_init_fn``, FSDP2 ``to_empty``) with random values.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from gpu_sizer.api import (
    GPUWorkloadSpec,
    Initialization,
    OffloadTarget,
    ParallelStrategy,
    Precision,
)
from gpu_sizer.budget.training_load import initialization
from gpu_sizer.budget.training_precision import recipe
from gpu_sizer.budget.training_sharding import deepspeed_options, shard_degree
from gpu_sizer.probe.decoder_layer import DecoderLayer
from gpu_sizer.probe.memory import Recorder
from gpu_sizer.probe.training import (
    Stepper,
    TrainingFigures,
    accumulation_micro_batches,
    autocast_dtype,
    build_trainable,
    make_optimizer,
    param_dtype,
    randomize,
    run_steps,
)

__all__ = ["run_sharded_training"]

_ZERO_STAGE = {
    ParallelStrategy.zero1: 1,
    ParallelStrategy.zero2: 2,
    ParallelStrategy.zero3: 3,
}


def _build(
    spec: GPUWorkloadSpec, device: torch.device, rank: int, init: Initialization
) -> tuple[nn.Module, int, list[str]]:
    """The model on the device the initialization says: (model, parameters, notes)."""
    assert spec.model.architecture is not None
    where = {
        Initialization.GpuPerRank: device,
        Initialization.CpuPerRank: torch.device("cpu"),
        Initialization.RankZeroCpu: torch.device("cpu" if rank == 0 else "meta"),
        Initialization.MetaDevice: torch.device("meta"),
    }[init]
    return build_trainable(spec, spec.model.architecture, param_dtype(spec), where)


def _is_unit(module: nn.Module) -> bool:
    """An FSDP unit: a decoder layer, or a LoRA adapter matrix (marked by
    :func:`_mark_adapters`), as PEFT's ``fsdp_auto_wrap_policy`` wraps them, so that every
    FlatParameter is uniformly trainable or frozen."""
    return isinstance(module, DecoderLayer) or bool(getattr(module, "_gpu_sizer_adapter", False))


def _mark_adapters(model: nn.Module) -> None:
    """In a partly frozen model, mark the trainable linears (the adapters) as FSDP units."""
    if all(p.requires_grad for p in model.parameters()):
        return
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.weight.requires_grad:
            module._gpu_sizer_adapter = True  # type: ignore[assignment]


def _mixed(spec: GPUWorkloadSpec) -> torch.dtype | None:
    """FSDP's ``param_dtype`` under the Autocast recipe (the compute dtype), else ``None``."""
    assert spec.training is not None
    if recipe(spec.training).name.value != "Autocast":
        return None
    return autocast_dtype(spec)


def _fsdp1(
    spec: GPUWorkloadSpec, model: nn.Module, device: torch.device, init: Initialization
) -> nn.Module:
    from torch.distributed.fsdp import (
        BackwardPrefetch,
        CPUOffload,
        MixedPrecision,
        ShardingStrategy,
    )
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import CustomPolicy

    assert spec.training is not None
    tr = spec.training
    strategy = {
        ParallelStrategy.fsdp_full_shard: ShardingStrategy.FULL_SHARD,
        ParallelStrategy.fsdp_shard_grad_op: ShardingStrategy.SHARD_GRAD_OP,
        ParallelStrategy.fsdp_hybrid_shard: ShardingStrategy.HYBRID_SHARD,
    }[tr.parallelism.strategy]
    mixed = _mixed(spec)
    policy = (
        MixedPrecision(param_dtype=mixed, reduce_dtype=mixed, buffer_dtype=mixed)
        if mixed is not None
        else None
    )
    offload = tr.offload is not None and tr.offload.parameters is OffloadTarget.Cpu
    _mark_adapters(model)
    meta = init in (Initialization.MetaDevice, Initialization.RankZeroCpu)
    kwargs: dict[str, Any] = {}
    if strategy is ShardingStrategy.HYBRID_SHARD:
        kwargs["device_mesh"] = _hybrid_mesh(spec, device)
    wrapped = FSDP(
        model,
        auto_wrap_policy=CustomPolicy(_is_unit),
        sharding_strategy=strategy,
        mixed_precision=policy,
        cpu_offload=CPUOffload(offload_params=offload),
        backward_prefetch=BackwardPrefetch.BACKWARD_PRE,
        limit_all_gathers=True,
        use_orig_params=True,
        device_id=device,
        sync_module_states=init is Initialization.RankZeroCpu,
        param_init_fn=functools.partial(_materialise, device=device) if meta else None,
        **kwargs,
    )
    if init is Initialization.MetaDevice:
        randomize(wrapped)
    return wrapped


def _materialise(module: nn.Module, device: torch.device) -> None:
    """FSDP1's ``param_init_fn``: allocate a meta-device module's own tensors on ``device``."""
    module.to_empty(device=device, recurse=False)


def _hybrid_mesh(spec: GPUWorkloadSpec, device: torch.device) -> Any:
    from torch.distributed.device_mesh import init_device_mesh

    assert spec.training is not None
    shard = shard_degree(spec.training)
    world = dist.get_world_size()
    return init_device_mesh(
        device.type, (world // shard, shard), mesh_dim_names=("replicate", "shard")
    )


def _fsdp2(
    spec: GPUWorkloadSpec, model: nn.Module, device: torch.device, init: Initialization, rank: int
) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    assert spec.training is not None
    tr = spec.training
    strategy = tr.parallelism.strategy
    if strategy is ParallelStrategy.fsdp_hybrid_shard:
        mesh = _hybrid_mesh(spec, device)
    else:
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    mixed = _mixed(spec)
    policy = MixedPrecisionPolicy(param_dtype=mixed, reduce_dtype=mixed)
    offload = tr.offload is not None and tr.offload.parameters is OffloadTarget.Cpu
    offload_policy: OffloadPolicy = CPUOffloadPolicy() if offload else OffloadPolicy()
    reshard = strategy is not ParallelStrategy.fsdp_shard_grad_op
    full_state: dict[str, Any] | None = None
    if init is Initialization.RankZeroCpu and rank == 0:
        full_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    _mark_adapters(model)
    units = [m for m in model.modules() if _is_unit(m)]
    for unit in reversed(units):
        fully_shard(
            unit,
            mesh=mesh,
            reshard_after_forward=reshard,
            mp_policy=policy,
            offload_policy=offload_policy,
        )
    fully_shard(model, mesh=mesh, mp_policy=policy, offload_policy=offload_policy)
    if init in (Initialization.MetaDevice, Initialization.RankZeroCpu):
        model.to_empty(device="cpu" if offload else device)
        randomize(model)
    if init is Initialization.RankZeroCpu:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        set_model_state_dict(
            model,
            full_state or {},
            options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True),
        )
        del full_state
    return model


def _ddp(
    spec: GPUWorkloadSpec, model: nn.Module, device: torch.device, init: Initialization
) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    assert spec.training is not None
    ddp = spec.training.parallelism.ddp
    if init in (Initialization.MetaDevice, Initialization.RankZeroCpu) and _on_meta(model):
        model.to_empty(device=device)
        randomize(model)
    else:
        model.to(device)
    device_ids = [device.index or 0] if device.type == "cuda" else None
    wrapped: nn.Module = DistributedDataParallel(
        model,
        device_ids=device_ids,
        gradient_as_bucket_view=ddp is not None and ddp.gradient_as_bucket_view,
    )
    return wrapped


def _on_meta(model: nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


class _EngineStepper:
    """Backward and step through a DeepSpeed engine (it scales, reduces and steps)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss)

    def step(self) -> None:
        self.engine.step()


def deepspeed_config(spec: GPUWorkloadSpec) -> dict[str, Any]:
    """The DeepSpeed configuration of the spec: ZeRO stage and buckets, precision, offload."""
    assert spec.training is not None
    tr = spec.training
    ds = deepspeed_options(tr)
    zero: dict[str, Any] = {
        "stage": _ZERO_STAGE[tr.parallelism.strategy],
        "reduce_bucket_size": ds.reduce_bucket_size,
        "allgather_bucket_size": ds.allgather_bucket_size,
        "stage3_prefetch_bucket_size": ds.stage3_prefetch_bucket_size,
        "stage3_max_live_parameters": ds.stage3_max_live_parameters,
        "stage3_max_reuse_distance": ds.stage3_max_reuse_distance,
        "stage3_param_persistence_threshold": ds.stage3_param_persistence_threshold,
        "sub_group_size": ds.sub_group_size,
    }
    if ds.overlap_comm is not None:
        zero["overlap_comm"] = ds.overlap_comm
    off = tr.offload
    if off is not None and off.optimizer is OffloadTarget.Cpu:
        zero["offload_optimizer"] = {"device": "cpu"}
    if off is not None and off.parameters is OffloadTarget.Cpu:
        zero["offload_param"] = {"device": "cpu"}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": tr.micro_batch_size,
        "gradient_accumulation_steps": min(tr.gradient_accumulation_steps, 2),
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
    }
    if tr.precision is Precision.fp16_mixed:
        config["fp16"] = {"enabled": True}
    elif tr.precision in (Precision.bf16_mixed, Precision.bf16_true):
        config["bf16"] = {"enabled": True}
    return config


def _deepspeed(
    spec: GPUWorkloadSpec, device: torch.device, init: Initialization
) -> tuple[nn.Module, Any, int, int, list[str]]:
    deepspeed: Any = importlib.import_module("deepspeed")
    assert spec.training is not None and spec.model.architecture is not None
    config = deepspeed_config(spec)
    stage3 = spec.training.parallelism.strategy is ParallelStrategy.zero3
    if stage3 and init is Initialization.MetaDevice:
        with deepspeed.zero.Init(config_dict_or_path=config):
            model, total, notes = build_trainable(
                spec, spec.model.architecture, param_dtype(spec), device
            )
    else:
        model, total, notes = _build(spec, device, dist.get_rank(), init)
        if _on_meta(model):
            model.to_empty(device=device)
            randomize(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainable_count = _trainable_count(model)
    optimizer = make_optimizer(spec.training.optimizer, trainable)
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, model_parameters=trainable, config=config
    )
    notes.append(f"DeepSpeed {deepspeed.__version__}: {config['zero_optimization']}")
    return engine, _EngineStepper(engine), total, trainable_count, notes


def run_sharded_training(
    spec: GPUWorkloadSpec, device: torch.device, recorder: Recorder, rank: int
) -> TrainingFigures:
    """Build, wrap and train the spec's model on this rank (module docstring).

    :raises gpu_sizer.probe.memory.OutOfMemory: an allocation failed (phase and size inside).
    :raises gpu_sizer.probe.memory.DeadlineExceeded: the deadline passed between steps.
    """
    assert spec.training is not None and spec.model.architecture is not None
    tr = spec.training
    strategy = tr.parallelism.strategy
    init = initialization(tr)
    notes = [f"{strategy.value} over {dist.get_world_size()} ranks; initialization {init.value}"]
    micro = accumulation_micro_batches(spec, notes)
    torch.manual_seed(rank)
    stepper: Any
    with recorder.phase("load"):
        if strategy in _ZERO_STAGE:
            model, stepper, total, trainable_count, more = _deepspeed(spec, device, init)
            notes.extend(more)
        else:
            model, total, more = _build(spec, device, rank, init)
            trainable_count = _trainable_count(model)
            notes.extend(more)
            if strategy is ParallelStrategy.ddp:
                model = _ddp(spec, model, device, init)
            elif tr.parallelism.fsdp is not None and tr.parallelism.fsdp.version == 2:
                model = _fsdp2(spec, model, device, init, rank)
            else:
                model = _fsdp1(spec, model, device, init)
    trainable = [p for p in model.parameters() if p.requires_grad]
    weights = sum(_local_bytes(p) for p in model.parameters())
    if strategy not in _ZERO_STAGE:
        scaler: Any = None
        if tr.precision is Precision.fp16_mixed:
            if strategy is ParallelStrategy.ddp:
                scaler = torch.amp.GradScaler(device.type)
            else:
                from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

                scaler = ShardedGradScaler(device.type)
        stepper = Stepper(make_optimizer(tr.optimizer, trainable), scaler)
    # accelerate runs the forward under autocast with DDP and FSDP alike (FSDP's gathered units
    # are already 16-bit, so it casts nothing there); DeepSpeed's bf16/fp16 modes hold a 16-bit
    # model and use no autocast.
    autocast = None if strategy in _ZERO_STAGE else autocast_dtype(spec)
    run_steps(
        model,
        stepper,
        recorder,
        tr.micro_batch_size,
        tr.sequence_length,
        micro,
        spec.model.architecture.vocab_size,
        device,
        autocast,
    )
    return TrainingFigures(
        parameter_count=total,
        trainable_parameter_count=trainable_count,
        weights_bytes=weights,
        notes=notes,
    )


def _local(p: torch.Tensor) -> torch.Tensor:
    to_local = getattr(p, "to_local", None)
    return to_local() if callable(to_local) else p


def _local_bytes(p: torch.Tensor) -> int:
    t = _local(p)
    return int(t.numel() * t.element_size())


def _trainable_count(model: nn.Module) -> int:
    """Trainable parameters of the unwrapped model (ZeRO-3 partitioned ones by ``ds_numel``)."""
    return sum(
        int(getattr(p, "ds_numel", p.numel())) for p in model.parameters() if p.requires_grad
    )
