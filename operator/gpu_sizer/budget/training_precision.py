"""Precision recipes: which training tensors hold which dtype, per framework. Pure.

A recipe fixes the bytes per element of the four model states (weights, gradients, fp32 master
weights, optimizer state), the activations' element size, and whether ``torch.autocast`` makes
16-bit copies of fp32 weights during the forward pass. ``spec.training.precision`` keeps
PyTorch Lightning's names for the compute precision; ``spec.training.precisionRecipe`` says who
holds what, and ``Auto`` maps each precision to what the framework the strategy implies does by
default:

- ``Float32`` (``precision: fp32``): fp32 parameters, gradients and optimizer state; 4 + 4 + 8
  bytes per parameter with AdamW.
- ``Autocast`` (PyTorch AMP; the default for ``bf16-mixed``/``fp16-mixed`` under ``none``,
  ``ddp`` and ``fsdp-*``): the parameters stay fp32, ``torch.autocast`` casts them to 16 bits per
  use (PyTorch docs "Automatic Mixed Precision", ``torch/amp/autocast_mode.py``: the weight cast
  cache keeps one 16-bit copy of each fp32 leaf that requires grad until the autocast region
  exits, and the matmuls save those copies for backward), gradients are fp32 like the
  parameters, and there is no separate master copy: 4 + 4 + 8 = 16 bytes per parameter. This is
  what Lightning's ``bf16-mixed`` and the Hugging Face Trainer's ``--bf16`` (accelerate
  ``mixed_precision="bf16"``: ``torch.autocast`` around the forward) do. Under FSDP the
  ``MixedPrecision``/``MixedPrecisionPolicy`` ``param_dtype`` casts each unit when it is
  gathered instead (``torch/distributed/fsdp/_flat_param.py``, ``_fsdp_param.py``): the sharded
  parameters and gradients stay fp32, the gathered unit is 16-bit, no whole-model copy exists.
- ``MasterWeights`` (Megatron-LM ``Float16OptimizerWithFloat16Params``, DeepSpeed's ZeRO
  optimizers, Apex O2, the ZeRO paper's mixed-precision Adam; the default for ``*-mixed`` under
  ``zero1/2/3``): the model holds 16-bit parameters and gradients, the optimizer an fp32 master
  copy and fp32 states: 2 + 2 + 4 + 8 = 16 bytes per parameter (Rajbhandari et al. 2020,
  section 3.1, K = 12). DeepSpeed keeps gradients in the model dtype unless
  ``data_types.grad_accum_dtype`` says fp32; Megatron-LM accumulates ``main_grad`` in fp32
  under bf16 (``--accumulate-allreduce-grads-in-fp32``), 2 + 4 + 4 + 8 = 18 bytes: set
  ``gradientDtype: float32`` for that.
- ``LowPrecision`` (``bf16-true``: Lightning's ``bf16-true``, a model loaded with
  ``torch_dtype=bfloat16`` and trained with ``torch.optim``): 16-bit parameters and gradients,
  no fp32 copy; ``torch.optim`` creates its states like the parameters (``torch/optim/adamw.py``
  ``_init_group``: ``torch.zeros_like(p)``), so 2 + 2 + 4 bytes with AdamW, or 2 + 2 + 8 with
  ``optimizerStateDtype: float32``. Under DeepSpeed it is ``bf16.bf16_master_weights_and_grads``
  (0.19.5 ``precision_config.py``): the ZeRO optimizer's partition copy is then 16-bit too.

Optimizer state per trainable parameter, in ``s`` bytes per state element (the recipe's, or
``optimizerStateDtype``): AdamW 2s (Loshchilov & Hutter 2019); SGD 0; SGD with momentum s; Lion s
(Chen et al. 2023, one momentum); 8-bit AdamW 2 bytes plus one fp32 absmax per 256-element block
per state (Dettmers et al. 2022, section 2, as bitsandbytes ``Optimizer2State.init_state``
allocates it; tensors under 4096 elements keep 32-bit states, ``min_8bit_size``); Adafactor
factored second moments, ``rows + cols`` per matrix and the full size per vector, no first
moment (Shazeer & Stern 2018, section 3; Hugging Face ``Adafactor`` default ``beta1=None``).

The optimizer step's workspace: ``torch.optim``'s AdamW, Lion and Adafactor allocate one
temporary the size of the states they update (AdamW ``_multi_tensor_adamw``:
``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)``; ``foreach`` is the default on CUDA,
``_default_to_fused_or_foreach``; the single-tensor path's ``exp_avg_sq.sqrt()`` is the same
size for DeepSpeed's one flat partition). SGD updates in place; bitsandbytes' 8-bit kernels
update block by block.

All sizes are bytes per element or bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gpu_sizer.api import (
    Optimizer,
    ParallelStrategy,
    Precision,
    PrecisionRecipe,
    Training,
    TrainingDtype,
)

__all__ = [
    "ADAM8_BLOCK",
    "ADAM8_MIN_SIZE",
    "Framework",
    "Recipe",
    "framework",
    "optimizer_state_bytes",
    "optimizer_step_workspace_bytes",
    "recipe",
]

#: bitsandbytes blockwise 8-bit optimizer: block size and ``min_8bit_size``.
ADAM8_BLOCK = 256
ADAM8_MIN_SIZE = 4096

_DTYPE_BYTES = {TrainingDtype.float32: 4, TrainingDtype.bfloat16: 2, TrainingDtype.float16: 2}


class Framework(StrEnum):
    """The training framework a strategy implies (decides allocation details)."""

    PyTorch = "PyTorch"
    DeepSpeed = "DeepSpeed"


def framework(strategy: ParallelStrategy) -> Framework:
    """DeepSpeed for ``zero1/2/3``; PyTorch (DDP, FSDP, single process) otherwise."""
    if strategy in (ParallelStrategy.zero1, ParallelStrategy.zero2, ParallelStrategy.zero3):
        return Framework.DeepSpeed
    return Framework.PyTorch


@dataclass(frozen=True, slots=True)
class Recipe:
    """A resolved precision recipe, in bytes per element.

    ``param`` is the trainable parameters' storage, ``grad`` the gradients as held between
    backward and the step, ``master`` the optimizer's separate full-precision copy (0 when the
    parameters are the master), ``state`` one optimizer-state element, ``compute`` an
    activation element and the dtype weights are used in; ``autocast`` says whether
    ``torch.autocast`` makes 16-bit copies of fp32 weights (not under FSDP, which gathers units
    in ``param_dtype``).
    """

    name: PrecisionRecipe
    framework: Framework
    param: int
    grad: int
    master: int
    state: int
    compute: int
    autocast: bool

    @property
    def model_state_bytes_per_param(self) -> int:
        """Weights + gradients + master weights per trainable parameter (no optimizer state)."""
        return self.param + self.grad + self.master


def _resolve_name(training: Training, fw: Framework) -> PrecisionRecipe:
    name = training.precision_recipe
    if name is not PrecisionRecipe.Auto:
        return name
    if training.precision is Precision.fp32:
        return PrecisionRecipe.Float32
    if training.precision is Precision.bf16_true:
        return PrecisionRecipe.LowPrecision
    return PrecisionRecipe.MasterWeights if fw is Framework.DeepSpeed else PrecisionRecipe.Autocast


def recipe(training: Training) -> Recipe:
    """The recipe ``training`` resolves to (``Auto`` by precision and framework; see the module
    docstring), with ``gradientDtype``/``optimizerStateDtype`` applied."""
    strategy = training.parallelism.strategy
    fw = framework(strategy)
    name = _resolve_name(training, fw)
    if name is PrecisionRecipe.Float32:
        param, grad, master, state, compute = 4, 4, 0, 4, 4
    elif name is PrecisionRecipe.Autocast:
        param, grad, master, state, compute = 4, 4, 0, 4, 2
    elif name is PrecisionRecipe.MasterWeights:
        param, grad, master, state, compute = 2, 2, 4, 4, 2
    else:  # LowPrecision
        param, grad, master, state, compute = 2, 2, 0, 2, 2
    if fw is Framework.DeepSpeed:
        # The ZeRO optimizer always keeps its own partition copy (stage_1_and_2.py
        # ``single_partition_of_fp32_groups``; stage3.py ``fp32_partitioned_groups_flat``) in
        # ``master_weights_and_grads_dtype``: fp32, or 16-bit with bf16_master_weights_and_grads.
        master = 2 if name is PrecisionRecipe.LowPrecision else 4
    if training.gradient_dtype is not None:
        grad = _DTYPE_BYTES[training.gradient_dtype]
    if training.optimizer_state_dtype is not None:
        state = _DTYPE_BYTES[training.optimizer_state_dtype]
    autocast = name is PrecisionRecipe.Autocast and not strategy.value.startswith("fsdp")
    return Recipe(name, fw, param, grad, master, state, compute, autocast)


def optimizer_state_bytes(
    optimizer: Optimizer, state: int, params: int, factored: int, small: int
) -> int:
    """Optimizer-state bytes for ``params`` trainable parameters.

    :param state: bytes per state element (the recipe's ``state``).
    :param factored: Adafactor's state elements (``rows + cols`` per matrix, size per vector).
    :param small: how many of ``params`` sit in tensors under 4096 elements (8-bit AdamW keeps
        those in 32-bit).
    """
    if optimizer is Optimizer.adamw:
        return 2 * state * params
    if optimizer is Optimizer.sgd:
        return 0
    if optimizer is Optimizer.sgd_momentum or optimizer is Optimizer.lion:
        return state * params
    if optimizer is Optimizer.adafactor:
        return state * factored
    big = params - small
    return 2 * big + 2 * 4 * -(-big // ADAM8_BLOCK) + 2 * 4 * small


def optimizer_step_workspace_bytes(optimizer: Optimizer, state: int, params: int) -> int:
    """Temporary bytes of one optimizer step over ``params`` parameters (module docstring)."""
    if optimizer in (Optimizer.adamw, Optimizer.lion, Optimizer.adafactor):
        return state * params
    return 0
