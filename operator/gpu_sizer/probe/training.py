"""Synthetic training: forward, backward and optimizer steps with the spec's settings. Torch.

Two optimizer steps, each over ``min(gradientAccumulationSteps, 2)`` micro-batches of
``microBatchSize x sequenceLength`` tokens: the first step allocates the optimizer state lazily,
so only the second shows the steady-state peak (gradients, optimizer state and activations all
resident); accumulating more micro-batches adds no memory (gradients accumulate in place).

Precision follows the spec's recipe (``gpu_sizer.budget.training_precision``): ``Float32`` and
``Autocast`` keep float32 parameters, the latter running the forward under ``torch.autocast``
(fp16 with a ``GradScaler``); ``LowPrecision`` keeps 16-bit parameters; ``MasterWeights`` is
DeepSpeed's (``gpu_sizer.probe.sharded``). LoRA freezes the base in the model dtype and trains
float32 adapters (peft's default ``autocast_adapter_dtype``), with peft's ``LoraModel`` when peft
is installed, else the minimal adapter below (same tensors: ``lora_A [r, in]``, ``lora_B [out,
r]``, Hu et al. 2021, section 4.1). The model computes the loss as ``spec.training.loss`` says
(``gpu_sizer.probe.model.causal_lm_loss``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from gpu_sizer.api import (
    Architecture,
    FinetuningMethod,
    GPUWorkloadSpec,
    Initialization,
    Optimizer,
    Precision,
)
from gpu_sizer.budget.training_load import initialization
from gpu_sizer.budget.training_precision import recipe
from gpu_sizer.probe.memory import Recorder
from gpu_sizer.probe.model import (
    SyntheticDecoder,
    build_model,
    parameter_count,
    rank_architecture,
)

__all__ = [
    "Lion",
    "LoraLinear",
    "Stepper",
    "TrainingFigures",
    "accumulation_micro_batches",
    "add_lora",
    "autocast_dtype",
    "build_trainable",
    "make_optimizer",
    "param_dtype",
    "randomize",
    "run_steps",
    "run_training",
]

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


class Stepper:
    """Backward and optimizer step of a plain ``torch.optim`` optimizer, with a ``GradScaler``
    under fp16 (``torch.amp``). Distributed wrappers that own the step (DeepSpeed) replace it."""

    def __init__(self, optimizer: torch.optim.Optimizer, scaler: Any = None) -> None:
        self.optimizer = optimizer
        self.scaler = scaler

    def backward(self, loss: Tensor) -> None:
        """Backpropagate ``loss`` (scaled under fp16)."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self) -> None:
        """Update the parameters and drop the gradients (``set_to_none``)."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def param_dtype(spec: GPUWorkloadSpec) -> torch.dtype:
    """The dtype the synthetic model's parameters are built in: the recipe's parameter dtype
    (``budget.training_precision``), except that a LoRA base stays in the model's dtype."""
    assert spec.training is not None
    tr = spec.training
    r = recipe(tr)
    if tr.finetuning.method is not FinetuningMethod.full and tr.precision is not Precision.fp32:
        return _DTYPES[spec.model.dtype.value]
    if r.param == 4:
        return torch.float32
    return torch.float16 if tr.precision is Precision.fp16_mixed else torch.bfloat16


def autocast_dtype(spec: GPUWorkloadSpec) -> torch.dtype | None:
    """``torch.autocast``'s dtype under the mixed precisions, else ``None``."""
    assert spec.training is not None
    return {
        Precision.bf16_mixed: torch.bfloat16,
        Precision.fp16_mixed: torch.float16,
    }.get(spec.training.precision)


def accumulation_micro_batches(spec: GPUWorkloadSpec, notes: list[str]) -> int:
    """Micro-batches run per optimizer step: ``min(gradientAccumulationSteps, 2)`` (gradients
    accumulate in place, so more add no memory; a note says so)."""
    assert spec.training is not None
    steps = spec.training.gradient_accumulation_steps
    micro = min(steps, 2)
    if steps > 2:
        notes.append(
            f"{micro} of {steps} accumulation micro-batches run per step: gradients accumulate "
            "in place, so more add no memory"
        )
    return micro


def run_steps(
    model: nn.Module,
    stepper: Any,
    recorder: Recorder,
    micro_batch: int,
    sequence: int,
    micro: int,
    vocab: int,
    device: torch.device,
    autocast: torch.dtype | None,
) -> None:
    """Two optimizer steps of ``micro`` micro-batches each, a phase per forward, backward and
    optimizer step. The model computes the loss from ``labels`` (``spec.training.loss``).

    :param stepper: has ``backward(loss)`` and ``step()`` (a :class:`Stepper`, or a wrapper
        for engines that own the step).
    """
    for step in (1, 2):
        for m in range(1, micro + 1):
            recorder.check_deadline()
            tokens = torch.randint(0, vocab, (micro_batch, sequence + 1), device=device)
            with (
                recorder.phase(f"step{step}.forward{m}"),
                torch.autocast(
                    device.type, dtype=autocast or torch.float32, enabled=bool(autocast)
                ),
            ):
                loss = model(tokens[:, :-1], labels=tokens[:, 1:]) / micro
            with recorder.phase(f"step{step}.backward{m}"):
                stepper.backward(loss)
                del loss
        with recorder.phase(f"step{step}.optimizer"):
            stepper.step()


def run_training(
    spec: GPUWorkloadSpec, device: torch.device, recorder: Recorder
) -> TrainingFigures:
    """Run two optimizer steps of the single-process synthetic training workload (strategy
    ``none``; data-parallel strategies run under ``gpu_sizer.probe.launch``). The model is built
    where ``spec.training.initialization`` says (on the GPU, in host memory then moved, or on
    the meta device then materialised), so that the load phase and the host memory are real.

    :raises gpu_sizer.probe.memory.OutOfMemory: an allocation failed (phase and size inside).
    :raises gpu_sizer.probe.memory.DeadlineExceeded: the deadline passed between steps.
    """
    assert spec.training is not None and spec.model.architecture is not None
    tr = spec.training
    tp = tr.parallelism.tensor_parallel_size
    arch = rank_architecture(spec.model.architecture, tp)
    notes: list[str] = []
    if tp > 1:
        notes.append(
            f"tensorParallelSize {tp}: rank 0's shard (Megatron-style, no sequence parallelism) "
            "trained on one GPU; NCCL buffers and the all-reduces are not included"
        )
    micro = accumulation_micro_batches(spec, notes)
    torch.manual_seed(0)
    init = initialization(tr)
    where = {
        Initialization.GpuPerRank: device,
        Initialization.MetaDevice: torch.device("meta"),
    }.get(init, torch.device("cpu"))
    with recorder.phase("load"):
        model, total, lora_notes = build_trainable(spec, arch, param_dtype(spec), where)
        notes.extend(lora_notes)
        if where.type == "meta":
            model.to_empty(device=device)
            randomize(model)
        elif where != device:
            model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    optimizer = make_optimizer(tr.optimizer, trainable)
    scaler: Any = None
    if tr.precision is Precision.fp16_mixed:
        scaler = torch.amp.GradScaler(device.type)
    run_steps(
        model,
        Stepper(optimizer, scaler),
        recorder,
        tr.micro_batch_size,
        tr.sequence_length,
        micro,
        arch.vocab_size,
        device,
        autocast_dtype(spec),
    )
    return TrainingFigures(
        parameter_count=total,
        trainable_parameter_count=sum(p.numel() for p in trainable),
        weights_bytes=weights,
        notes=notes,
    )


def randomize(model: nn.Module) -> None:
    """Give materialised (``to_empty``) parameters finite values: uninitialised memory can hold
    NaN, which would make an fp16 ``GradScaler`` skip the step and the optimizer state never
    appear."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)


def build_trainable(
    spec: GPUWorkloadSpec, arch: Architecture, dtype: torch.dtype, device: torch.device
) -> tuple[nn.Module, int, list[str]]:
    """The synthetic model on ``device`` in ``dtype``, with LoRA adapters when the spec says so,
    in training mode: (model to train, parameters built, notes)."""
    assert spec.training is not None
    tr = spec.training
    tp = tr.parallelism.tensor_parallel_size
    decoder = build_model(arch, dtype, device, None, tp)
    decoder.checkpointing = tr.activation_checkpointing
    decoder.loss = tr.loss.value
    total = parameter_count(decoder)
    model: nn.Module = decoder
    notes: list[str] = []
    if tr.finetuning.method is FinetuningMethod.lora:
        model, notes = add_lora(decoder, tr.finetuning.lora_rank, tr.finetuning.lora_target_modules)
    model.train()
    return model, total, notes
