"""Synthetic training: forward, backward and optimizer steps with the spec's settings. Torch.

Two optimizer steps, each over ``min(gradientAccumulationSteps, 2)`` micro-batches of
``microBatchSize x sequenceLength`` tokens: the first step allocates the optimizer state lazily,
so only the second shows the steady-state peak (gradients, optimizer state and activations all
resident); accumulating more micro-batches adds no memory (gradients accumulate in place).

Precision follows PyTorch Lightning's meaning of the names: ``fp32`` trains float32 parameters;
``bf16-mixed`` / ``fp16-mixed`` keep float32 parameters (the master weights) and run the forward
under ``torch.autocast`` (fp16 with a ``GradScaler``); ``bf16-true`` keeps bfloat16 parameters.
LoRA freezes the base in the model dtype and trains float32 adapters (peft's default
``autocast_adapter_dtype``), with peft's ``LoraModel`` when peft is installed, else the minimal
adapter below (same tensors: ``lora_A [r, in]``, ``lora_B [out, r]``, Hu et al. 2021, section
4.1). The loss upcasts the logits to float32 as ``transformers``' causal-LM loss does.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gpu_sizer.api import (
    FinetuningMethod,
    GPUWorkloadSpec,
    Optimizer,
    ParallelStrategy,
    Precision,
)
from gpu_sizer.probe.memory import Recorder
from gpu_sizer.probe.model import (
    SyntheticDecoder,
    build_model,
    parameter_count,
    rank_architecture,
)

__all__ = ["Lion", "LoraLinear", "TrainingFigures", "add_lora", "make_optimizer", "run_training"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: transformers' names of the fused/renamed projections in families whose synthetic model keeps
#: separate q/k/v and gate/up modules.
_ALIASES = {
    "query_key_value": ("q_proj", "k_proj", "v_proj"),
    "dense": ("o_proj",),
    "out_proj": ("o_proj",),
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
    "dense_h_to_4h": ("up_proj",),
    "dense_4h_to_h": ("down_proj",),
    "fc1": ("up_proj",),
    "fc2": ("down_proj",),
}
_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class TrainingFigures:
    """What the training run built."""

    parameter_count: int
    trainable_parameter_count: int
    weights_bytes: int
    notes: list[str]


class LoraLinear(nn.Module):
    """``base(x) + B(A(x)) * alpha / r`` with a frozen base and float32 adapters."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        device = base.weight.device
        self.lora_A = nn.Linear(base.in_features, rank, bias=False, device=device)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False, device=device)
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / rank

    def forward(self, x: Tensor) -> Tensor:
        adapter = self.lora_B(self.lora_A(x.to(self.lora_A.weight.dtype)))
        result: Tensor = self.base(x) + (adapter * self.scaling).to(x.dtype)
        return result


def _targets(names: Iterable[str]) -> tuple[set[str], list[str]]:
    wanted: set[str] = set()
    unknown: list[str] = []
    for name in names:
        if name == "all-linear":
            wanted.update(_LINEARS)
        elif name in _LINEARS:
            wanted.add(name)
        elif name in _ALIASES:
            wanted.update(_ALIASES[name])
        else:
            unknown.append(name)
    return wanted, unknown


def add_lora(
    model: SyntheticDecoder, rank: int, target_modules: list[str]
) -> tuple[nn.Module, list[str]]:
    """Freeze ``model`` and attach rank-``rank`` adapters to ``target_modules``; returns the
    model to train and notes (which implementation, targets ignored)."""
    wanted, unknown = _targets(target_modules)
    notes = [f"LoRA targets not in the synthetic model, ignored: {unknown}"] if unknown else []
    for p in model.parameters():
        p.requires_grad_(False)
    if importlib.util.find_spec("peft") is not None:
        peft: Any = importlib.import_module("peft")
        config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=sorted(wanted))
        notes.append(f"LoRA adapters from peft {peft.__version__}")
        wrapped: nn.Module = peft.get_peft_model(model, config)
        return wrapped, notes
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in wanted and isinstance(child, nn.Linear):
                setattr(module, name, LoraLinear(child, rank, 2 * rank))
    notes.append("peft not installed: LoRA adapters from the probe's minimal implementation")
    return model, notes


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2):
    one momentum buffer per parameter, sign updates. torch.optim has no Lion."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)


def make_optimizer(kind: Optimizer, params: Sequence[Tensor]) -> torch.optim.Optimizer:
    """The optimizer the spec names (torch.optim's defaults, so foreach kernels on CUDA)."""
    if kind is Optimizer.adamw:
        return torch.optim.AdamW(params, lr=1e-5)
    if kind is Optimizer.sgd:
        return torch.optim.SGD(params, lr=1e-5)
    if kind is Optimizer.sgd_momentum:
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9)
    if kind is Optimizer.adafactor:
        return torch.optim.Adafactor(params, lr=1e-5)
    if kind is Optimizer.lion:
        return Lion(params)
    # adamw-8bit: support.py refused the spec when bitsandbytes is not importable.
    bnb: Any = importlib.import_module("bitsandbytes")
    optimizer: torch.optim.Optimizer = bnb.optim.AdamW8bit(params, lr=1e-5)
    return optimizer


def _wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    """``DistributedDataParallel`` at world size 1 on an in-process store: every DDP rank holds
    the same replica and gradient buckets (PyTorch DDP docs, ``bucket_cap_mb``,
    ``gradient_as_bucket_view``), so one rank's memory does not depend on the world size."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        store = dist.HashStore()  # type: ignore[attr-defined]  # in-process; not re-exported
        dist.init_process_group(backend, store=store, rank=0, world_size=1)
    device_ids = [device.index or 0] if device.type == "cuda" else None
    wrapped: nn.Module = DistributedDataParallel(model, device_ids=device_ids)
    return wrapped


def _steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    recorder: Recorder,
    micro_batch: int,
    sequence: int,
    micro: int,
    vocab: int,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
) -> None:
    """Two optimizer steps of ``micro`` micro-batches each, a phase per forward, backward and
    optimizer step."""
    for step in (1, 2):
        for m in range(1, micro + 1):
            recorder.check_deadline()
            tokens = torch.randint(0, vocab, (micro_batch, sequence + 1), device=device)
            with recorder.phase(f"step{step}.forward{m}"):
                with torch.autocast(
                    device.type, dtype=autocast_dtype or torch.float32, enabled=bool(autocast_dtype)
                ):
                    logits = model(tokens[:, :-1])
                loss = F.cross_entropy(
                    logits.float().view(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)
                )
                loss = loss / micro
                del logits
            with recorder.phase(f"step{step}.backward{m}"):
                (scaler.scale(loss) if scaler is not None else loss).backward()
                del loss
        with recorder.phase(f"step{step}.optimizer"):
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def run_training(
    spec: GPUWorkloadSpec, device: torch.device, recorder: Recorder
) -> TrainingFigures:
    """Run two optimizer steps of the synthetic training workload, a phase per step part.

    :raises gpu_sizer.probe.memory.OutOfMemory: an allocation failed (phase and size inside).
    :raises gpu_sizer.probe.memory.DeadlineExceeded: the deadline passed between steps.
    """
    assert spec.training is not None and spec.model.architecture is not None
    tr = spec.training
    tp = tr.parallelism.tensor_parallel_size
    arch = rank_architecture(spec.model.architecture, tp)
    lora = tr.finetuning.method is FinetuningMethod.lora
    notes: list[str] = []
    if tr.precision is Precision.bf16_true:
        param_dtype = torch.bfloat16
    elif lora and tr.precision is not Precision.fp32:
        param_dtype = _DTYPES[spec.model.dtype.value]
    else:
        param_dtype = torch.float32
    autocast_dtype = {
        Precision.bf16_mixed: torch.bfloat16,
        Precision.fp16_mixed: torch.float16,
    }.get(tr.precision)
    if tp > 1:
        notes.append(
            f"tensorParallelSize {tp}: rank 0's shard (Megatron-style, no sequence parallelism) "
            "trained on one GPU; NCCL buffers and the all-reduces are not included"
        )
    micro = min(tr.gradient_accumulation_steps, 2)
    if tr.gradient_accumulation_steps > 2:
        notes.append(
            f"{micro} of {tr.gradient_accumulation_steps} accumulation micro-batches run per "
            "step: gradients accumulate in place, so more add no memory"
        )
    torch.manual_seed(0)

    with recorder.phase("load"):
        decoder = build_model(arch, param_dtype, device)
        decoder.checkpointing = tr.activation_checkpointing
        total = parameter_count(decoder)
        model: nn.Module = decoder
        if lora:
            model, lora_notes = add_lora(
                decoder, tr.finetuning.lora_rank, tr.finetuning.lora_target_modules
            )
            notes.extend(lora_notes)
        model.train()
        ddp = tr.parallelism.strategy is ParallelStrategy.ddp
        if ddp:
            model = _wrap_ddp(model, device)
            notes.append(
                f"ddp over {tr.parallelism.data_parallel_size} ranks: rank 0 measured with "
                "DistributedDataParallel at world size 1 (its gradient buckets are real; NCCL's "
                "own buffers are not included)"
            )
    trainable = [p for p in model.parameters() if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    optimizer = make_optimizer(tr.optimizer, trainable)
    scaler: Any = None
    if tr.precision is Precision.fp16_mixed:
        scaler = torch.amp.GradScaler(device.type)

    try:
        _steps(
            model,
            optimizer,
            scaler,
            recorder,
            tr.micro_batch_size,
            tr.sequence_length,
            micro,
            arch.vocab_size,
            device,
            autocast_dtype,
        )
    finally:
        if ddp:
            import torch.distributed as dist

            dist.destroy_process_group()
    return TrainingFigures(
        parameter_count=total,
        trainable_parameter_count=sum(p.numel() for p in trainable),
        weights_bytes=weights,
        notes=notes,
    )
