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
    Optimizer,
    ParallelStrategy,
)

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
        if par.strategy not in (ParallelStrategy.none, ParallelStrategy.ddp):
            return (
                f"synthetic mode runs one rank; strategy {par.strategy.value} shards parameters, "
                f"gradients or optimizer state over {par.data_parallel_size} data-parallel ranks, "
                f"which needs every rank of torch.distributed; {_USE_COMMAND}"
            )
        if par.strategy is ParallelStrategy.ddp and par.tensor_parallel_size > 1:
            return (
                "synthetic mode does not combine ddp with tensor parallelism (2-D process "
                f"groups); {_USE_COMMAND}"
            )
        if par.pipeline_parallel_size > 1:
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
