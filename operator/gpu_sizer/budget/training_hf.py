"""Activations of a fine-tuning step as the Hugging Face stack allocates them. Pure.

The stack is ``transformers`` (model code, ``Trainer``), PEFT (LoRA layers,
``prepare_model_for_kbit_training``), TRL (``SFTTrainer``), bitsandbytes (``Linear4bit``) and
``torch.utils.checkpoint``. At long context the memory of a step goes to four places, each
sized here from the code that allocates it:

1. **Checkpointed layer inputs.** ``PreTrainedModel.gradient_checkpointing_enable`` wraps each
   decoder layer in ``torch.utils.checkpoint`` (``gradient_checkpointing_kwargs`` default
   ``{"use_reentrant": True}``); the forward keeps only each layer's input hidden states, one
   ``[tokens, hidden]`` tensor per layer, in the dtype of the residual stream.
2. **The residual stream's dtype.** PEFT ``prepare_model_for_kbit_training`` (``peft/utils/
   other.py``, called by TRL ``SFTTrainer._prepare_peft_model`` for a 4/8-bit model with a
   ``peft_config``) casts every parameter that is not a bitsandbytes ``Params4bit``/``Int8Params``
   to float32: embeddings, lm_head and the norms. The embedding's output is then float32,
   ``LlamaRMSNorm.forward`` returns ``weight * hidden.to(input_dtype)`` in float32, and
   bitsandbytes ``Linear4bit.forward`` returns ``out.to(inp_dtype)``: the residual stream and
   every projection's output stay float32 under ``torch.autocast`` (which casts only matmul
   inputs), so checkpoints and the recomputed layer's tensors are 4 bytes per element.
3. **The recomputed layer.** During backward the layer being differentiated is re-run with
   autograd on, so one layer's saved tensors exist at once, plus the gradients flowing through
   it. Per token (elements of the widths on this rank, ``s`` the stream's bytes, ``c`` the
   compute dtype's): each norm keeps its normalised input and its output (2 x s x hidden,
   ``LlamaRMSNorm``); each quantized linear keeps its input cast to the compute dtype
   (``Linear4bit.forward``: ``x.to(self.compute_dtype)``, saved by ``MatMul4Bit``), and an
   adapted one also the LoRA A input as ``torch.autocast`` cast it (when the input is wider than
   the compute dtype) and, with ``lora_dropout`` > 0, PEFT's dropout mask (1 byte) and dropped
   copy (``LoraLayer.update_layer``: one ``nn.Dropout`` per adapted module); each output is kept
   in the stream dtype (PEFT ``Linear4bit.forward`` clones the base output and adds the
   adapter's). Attention keeps rotated Q and K (``apply_rotary_pos_emb``), their and V's casts
   to the compute dtype for FlashAttention 2 (``_flash_attention_forward`` requires 16-bit
   inputs; it keeps no score matrix, Dao 2023) and its output; a gated MLP keeps the
   activation's output and the product entering ``down_proj`` in the projections' output dtype.
   The backward's own working set is the gradient of the widest intermediates: three
   feed-forward-wide tensors (the product's, the activation's and up's gradients) and the
   gradient of the layer's output and input in the stream dtype.
4. **The loss** (:mod:`gpu_sizer.budget.training_loss`): the lm_head output, its float32 upcast
   and the float32 log-softmax, and before transformers 4.49 the contiguous float32 copy of the
   shifted logits (``ForCausalLMLoss``: ``shift_logits = logits[..., :-1, :].contiguous()``,
   removed by transformers PR 35646, released in 4.49.0). With an upcast float32 lm_head,
   ``torch.autocast`` casts its weight to the compute dtype for the matmul; the weight is frozen,
   so the autocast cache (which holds only leaf tensors that require grad) does not keep it, but
   the matmul saves it for the input's gradient: one 16-bit copy of lm_head until its backward.

Items 1 and 4 exist together at the end of the forward (the loss instant); item 3 replaces item
4 during the backward of the last layer (the logits and the loss's tensors are freed once the
loss's backward has run). The step's activation peak is the larger of the two instants, not
their sum. With ``use_reentrant: False`` the recomputed tensors are freed as backward consumes
them, so the reentrant figure used here is an upper bound for it.

All results are bytes on one GPU for one micro-batch.
"""

from __future__ import annotations

import re

from gpu_sizer.api import FinetuningMethod, GPUWorkloadSpec, Training, TrainingFramework
from gpu_sizer.budget.params import LayerGroup, Linear

__all__ = [
    "LOSS_SHIFT_COPY_UNTIL",
    "MODELLED_TRANSFORMERS",
    "framework_version",
    "kbit_upcast",
    "loss_shift_copy",
    "recomputed_layer_bytes",
    "stream_bytes",
    "version_notes",
]

#: First transformers release whose ``ForCausalLMLoss`` pads the labels instead of copying the
#: shifted logits (PR 35646, merged 2025-01-13, after 4.48.0 of 2025-01-10).
LOSS_SHIFT_COPY_UNTIL: tuple[int, int] = (4, 49)
#: transformers releases whose loss and checkpointing code this module follows (inclusive).
MODELLED_TRANSFORMERS: tuple[tuple[int, int], tuple[int, int]] = ((4, 36), (5, 6))

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?")


def framework_version(training: Training) -> tuple[int, int] | None:
    """``frameworkVersion`` as (major, minor), ``None`` when unset."""
    text = training.framework_version
    if text is None:
        return None
    m = _VERSION.match(text)
    assert m is not None  # the API's pattern admits only such strings
    return int(m.group(1)), int(m.group(2) or 0)


def loss_shift_copy(training: Training) -> bool:
    """Whether the causal-LM loss copies the shifted float32 logits (transformers < 4.49).

    Unset versions are the newest modelled (no copy); versions older than the modelled range
    are taken as copying (the older code), which is the larger figure.
    """
    if training.framework is not TrainingFramework.transformers:
        return False
    v = framework_version(training)
    return v is not None and v < LOSS_SHIFT_COPY_UNTIL


def version_notes(training: Training) -> list[str]:
    """Notes for a ``frameworkVersion`` outside the modelled transformers releases."""
    v = framework_version(training)
    if training.framework is not TrainingFramework.transformers or v is None:
        return []
    lo, hi = MODELLED_TRANSFORMERS
    if lo <= v <= hi:
        return []
    side = "older" if v < lo else "newer"
    return [
        f"transformers {training.framework_version} is {side} than the releases modelled "
        f"({lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}): its loss and checkpointing are taken as "
        + ("4.36's (with the shifted-logits copy)" if v < lo else f"{hi[0]}.{hi[1]}'s")
        + "; measure to confirm"
    ]


def kbit_upcast(spec: GPUWorkloadSpec) -> bool:
    """Whether PEFT's ``prepare_model_for_kbit_training`` upcast the unquantized parameters.

    It applies to adapters on a bitsandbytes base (QLoRA, or LoRA on an 8-bit base). Unset, it
    follows the framework: TRL's ``SFTTrainer`` (and axolotl's loader) call it for a k-bit
    model; torchtune and custom loops do not.
    """
    tr = spec.training
    q = spec.model.quantization
    if tr is None or tr.finetuning.method is FinetuningMethod.full or q is None:
        return False
    if not q.method.value.startswith("bitsandbytes"):
        return False
    choice = tr.finetuning.prepare_model_for_kbit_training
    if choice is not None:
        return choice
    return tr.framework in (TrainingFramework.transformers, TrainingFramework.accelerate)


def stream_bytes(spec: GPUWorkloadSpec, compute: int) -> int:
    """Bytes of one element of the residual stream: float32 after the k-bit upcast, else the
    compute dtype's (``compute``: 2, or 4 for fp32 training)."""
    return 4 if kbit_upcast(spec) else compute


def _adapted(lin: Linear, roles: set[str], names: set[str]) -> bool:
    return lin.role in roles or lin.name in names


def recomputed_layer_bytes(
    group: LayerGroup,
    tokens: int,
    hidden: int,
    *,
    stream: int,
    compute: int,
    adapted: tuple[set[str], set[str]],
    dropout: bool,
    quantized: bool,
) -> int:
    """Bytes of one attention + dense-MLP layer re-run in backward, with its gradients.

    See the module docstring, item 3. ``adapted`` is (roles, module names) that carry LoRA
    adapters; ``quantized`` whether the base linears are bitsandbytes layers (whose inputs are
    cast to the compute dtype and whose outputs return in the input's dtype).

    :param tokens: tokens of the micro-batch on this rank.
    :param hidden: the model's hidden size (the residual stream's width).
    """
    roles, names = adapted
    out_bytes = stream if quantized else compute
    per = 2 * 2 * stream * hidden  # two norms: normalised input and output
    widest = 0
    for lin in group.linears:
        width = lin.in_features
        lora = _adapted(lin, roles, names)
        if lin.role in {"q", "k", "v", "qkv", "gate", "up", "gate_up"}:
            in_bytes = stream  # the normed residual stream
        elif lin.role == "o":
            in_bytes = compute  # FlashAttention's output
        else:
            in_bytes = out_bytes  # the MLP's product, in the projections' output dtype
        casts = 0
        if in_bytes > compute:
            casts = (1 if quantized else 0) + (1 if lora else 0)
        per += casts * compute * width
        if lora and dropout:
            per += width * (1 + (compute if in_bytes <= compute else 0))
        per += out_bytes * lin.out_features * lin.copies
        if lin.role in {"gate", "up", "gate_up"}:
            widest = max(widest, lin.out_features)
    q = sum(lin.out_features for lin in group.linears if lin.role in {"q"})
    kv = sum(lin.out_features for lin in group.linears if lin.role in {"k", "v"})
    fused = sum(lin.out_features for lin in group.linears if lin.role == "qkv")
    qkv = q + kv + fused
    # Rotated Q and K (output dtype), their and V's casts to 16 bits for FlashAttention when
    # the projections return float32, and its output.
    per += out_bytes * (qkv - kv // 2) + compute * max(q, fused // 3)
    if out_bytes > compute:
        per += compute * qkv
    gated = any(lin.role in {"gate", "gate_up"} for lin in group.linears)
    inter = widest // (2 if any(lin.role == "gate_up" for lin in group.linears) else 1)
    per += out_bytes * inter * (2 if gated else 1)  # activation output (and product)
    grads = 3 * out_bytes * inter + 2 * stream * hidden
    return tokens * (per + grads)
