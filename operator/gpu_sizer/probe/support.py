"""What the synthetic path can measure faithfully, and why not otherwise. Pure (no torch).

A synthetic run that silently measured something else (an AWQ model as bf16, a ZeRO-3 shard as
a full replica) would hand the operator a wrong number that looks right. Every such case is
refused here with a reason that says what would be needed; the probe reports it as
``status: Unsupported`` and exits 0 so that the operator keeps the estimate as the basis.
"""

from __future__ import annotations

import importlib.util

from gpu_sizer.api import (
    KNOWN_MODEL_TYPES,
    Dtype,
    FinetuningMethod,
    GPUWorkloadSpec,
    OffloadTarget,
    Optimizer,
    ParallelStrategy,
    PrecisionRecipe,
)
from gpu_sizer.budget.training_precision import Framework, framework, recipe

__all__ = ["synthetic_unsupported_reason"]

_USE_COMMAND = "use measurement.mode: Command with the real engine to measure it"


def _importable(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def synthetic_unsupported_reason(spec: GPUWorkloadSpec, *, cuda: bool) -> str | None:
    """Why the synthetic path cannot reproduce ``spec`` faithfully, or ``None`` when it can."""
    model = spec.model
    if model.architecture is None:
        return (
            "synthetic mode needs spec.model.architecture (config.json keys): a bare "
            f"parameterCount has no shape to build; {_USE_COMMAND}"
        )
    if model.architecture.model_type not in KNOWN_MODEL_TYPES:
        return (
            f"synthetic mode builds the families whose parameter layout gpu-sizer knows; model "
            f"type {model.architecture.model_type!r} is sized from spec.model.parameterCount and "
            f"its attention geometry only, so a synthetic model would measure another model; "
            f"{_USE_COMMAND}"
        )
    if model.quantization is not None:
        q = model.quantization
        return (
            f"synthetic mode builds unquantized weights; {q.method.value} "
            f"{q.effective_bits}-bit storage (packed weights, scales, zero points) and its "
            f"kernels' workspaces cannot be reproduced without the quantized checkpoint; "
            f"{_USE_COMMAND}"
        )
    if model.dtype in (Dtype.float8_e4m3fn, Dtype.float8_e5m2):
        return (
            f"synthetic mode has no {model.dtype.value} matmul path (scaled-mm kernels, per-tensor "
            f"scales); {_USE_COMMAND}"
        )
    if spec.training is not None:
        tr = spec.training
        par = tr.parallelism
        reason = _recipe_reason(spec) or _distributed_reason(spec, cuda=cuda)
        if reason is not None:
            return reason
        if par.strategy is ParallelStrategy.none and par.pipeline_parallel_size > 1:
            return (
                f"synthetic mode does not run a pipeline schedule; pipelineParallelSize "
                f"{par.pipeline_parallel_size} keeps several micro-batches' activations in flight "
                f"per stage (1F1B); {_USE_COMMAND}"
            )
        if tr.finetuning.method is FinetuningMethod.qlora:
            return (
                "qlora trains on a bitsandbytes NF4 base, which synthetic mode does not build; "
                + _USE_COMMAND
            )
        if tr.optimizer is Optimizer.adamw_8bit:
            if not _importable("bitsandbytes"):
                return (
                    "optimizer adamw-8bit needs bitsandbytes, which is not installed in the probe "
                    "image; install it there or " + _USE_COMMAND
                )
            if not cuda:
                return "bitsandbytes' 8-bit AdamW runs on CUDA devices only"
    return None


#: Most CPU processes a distributed CPU run starts (tiny models, CI and laptops).
MAX_CPU_RANKS = 8


def _recipe_reason(spec: GPUWorkloadSpec) -> str | None:
    """Why the synthetic run cannot hold the spec's precision recipe, or ``None``."""
    assert spec.training is not None
    tr = spec.training
    r = recipe(tr)
    fw = framework(tr.parallelism.strategy)
    if r.name is PrecisionRecipe.MasterWeights and fw is Framework.PyTorch:
        return (
            "precision recipe MasterWeights (16-bit parameters with an fp32 master copy) is what "
            "DeepSpeed's and Megatron-LM's optimizers do; PyTorch-native training has no such "
            f"optimizer: use a zero1/2/3 strategy or {_USE_COMMAND}"
        )
    if fw is Framework.DeepSpeed and r.name in (
        PrecisionRecipe.Autocast,
        PrecisionRecipe.LowPrecision,
    ):
        return (
            f"precision recipe {r.name.value} under DeepSpeed (torch_autocast, "
            f"bf16_master_weights_and_grads) is not configured by the synthetic run; {_USE_COMMAND}"
        )
    if tr.gradient_dtype is not None or tr.optimizer_state_dtype is not None:
        return (
            "gradientDtype/optimizerStateDtype overrides need the framework's own options "
            f"(Megatron main_grad, DeepSpeed data_types); {_USE_COMMAND}"
        )
    return None


def _distributed_reason(spec: GPUWorkloadSpec, *, cuda: bool) -> str | None:
    """Why the data-parallel run (``gpu_sizer.probe.launch``) cannot measure the spec."""
    assert spec.training is not None
    tr = spec.training
    par = tr.parallelism
    strategy = par.strategy
    if strategy is ParallelStrategy.none:
        if par.context_parallel_size > 1:
            return (
                f"contextParallelSize {par.context_parallel_size} splits each sequence over ranks "
                f"(ring attention, Ulysses), which the synthetic run does not do; {_USE_COMMAND}"
            )
        return None
    model_parallel = {
        "tensorParallelSize": par.tensor_parallel_size,
        "pipelineParallelSize": par.pipeline_parallel_size,
        "contextParallelSize": par.context_parallel_size,
    }
    split = [f"{k} {v}" for k, v in model_parallel.items() if v > 1]
    if split:
        return (
            f"the synthetic distributed run covers data parallelism ({strategy.value}) only; "
            f"{', '.join(split)} needs Megatron-style model code; {_USE_COMMAND}"
        )
    if par.ranks_per_node < par.gpus:
        return (
            f"the replica spans {par.gpus} GPUs, more than one node's {par.ranks_per_node} "
            "(parallelism.gpusPerNode); the measurement runs on one node"
        )
    if not cuda and par.gpus > MAX_CPU_RANKS:
        return (
            f"no GPU: the CPU fallback starts at most {MAX_CPU_RANKS} processes; this replica has "
            f"{par.gpus} ranks; run it on a GPU node"
        )
    if framework(strategy) is Framework.DeepSpeed:
        if not _importable("deepspeed"):
            return (
                f"strategy {strategy.value} is DeepSpeed ZeRO, which is not installed in the probe "
                "image; install deepspeed there or " + _USE_COMMAND
            )
        if not cuda:
            return "DeepSpeed's ZeRO optimizers run on CUDA devices only"
    fsdp_version = par.fsdp.version if par.fsdp is not None else 1
    if strategy.value.startswith("fsdp") and fsdp_version == 1 and not cuda:
        return (
            "FSDP version 1 (FullyShardedDataParallel) needs a CUDA device; set "
            "parallelism.fsdp.version 2 (fully_shard) to measure on the CPU, or run on a GPU node"
        )
    off = tr.offload
    if off is not None and OffloadTarget.Nvme in (off.optimizer, off.parameters):
        return f"NVMe offload needs an NVMe path mounted in the probe container; {_USE_COMMAND}"
    if off is not None and not cuda:
        return "offload moves state from the GPU to the host: measuring it needs a GPU"
    return None
