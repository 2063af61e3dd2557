"""Training memory: model states, sharding, LoRA, activations and logits. Pure.

Model states (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", section 3.1): with mixed-precision Adam each trainable parameter costs 2 bytes
of 16-bit weights, 2 bytes of 16-bit gradients and K = 12 bytes of optimizer state (fp32 master
copy, momentum, variance), 16 bytes in all. Here the fp32 master copy is reported as
``masterWeightBytes`` and the rest of K as ``optimizerStateBytes``.

- Weights: 4 bytes per parameter under ``fp32``, 2 otherwise (Micikevicius et al. 2018, "Mixed
  Precision Training", section 3: 16-bit working copy; under PyTorch autocast the 16-bit copies
  are the cast weights saved for backward).
- Master weights: 4 bytes per trainable parameter under ``bf16-mixed``/``fp16-mixed``; none for
  ``fp32`` (the weights are the master) and ``bf16-true`` (no fp32 copy).
- Gradients: the weights' dtype under ``fp32`` and ``bf16-true``; under mixed precision 2 bytes
  with DeepSpeed ZeRO (16-bit gradients, ZeRO paper section 3.1) and 4 bytes with PyTorch-native
  training (``none``/``ddp``/``fsdp-*``: autocast keeps parameters, hence gradients, in fp32;
  FSDP casts reduced gradients back to the fp32 sharded parameter).
- Optimizer state per trainable parameter, in ``s`` bytes per state (4, or 2 under ``bf16-true``
  where ``torch.optim`` creates states like the parameters): AdamW 2s (Loshchilov & Hutter
  2019); SGD 0; SGD with momentum s; Lion s (Chen et al. 2023, one momentum); 8-bit AdamW 2 bytes
  plus one fp32 absmax per 256-element block per state (Dettmers et al. 2022, "8-bit Optimizers
  via Block-wise Quantization", section 2, as bitsandbytes ``Optimizer2State.init_state``
  allocates it; tensors under 4096 elements keep 32-bit states, ``min_8bit_size``); Adafactor
  factored second moments, ``rows + cols`` per matrix and the full size per vector, no first
  moment (Shazeer & Stern 2018, section 3; Hugging Face
  ``Adafactor`` default ``beta1=None``).

Sharding over ``dataParallelSize`` N (ZeRO paper section 5.1, Figure 1; PyTorch FSDP docs,
``ShardingStrategy``): ``zero1`` shards optimizer state and master weights; ``zero2`` and
``fsdp-shard-grad-op`` also gradients; ``zero3`` and ``fsdp-full-shard`` also weights. Sharded
weights must be gathered to compute: ZeRO-3 holds the largest module plus one prefetched layer
(``stage3_prefetch_bucket_size``); FSDP full-shard holds the root unit (embeddings, lm_head) and
the current and prefetched layer (``BackwardPrefetch.BACKWARD_PRE``); shard-grad-op keeps all
weights gathered between forward and backward. Communication buffers: DDP's gradient buckets
(``bucket_cap_mb`` 25 MiB each) are copies of every gradient unless ``gradient_as_bucket_view``
(PyTorch DDP docs: "the saved memory size will be equal to the total gradients size");
DeepSpeed ZeRO-1/2/3 reduce gradients through a bucket of ``reduce_bucket_size`` = 5e8 elements
(DeepSpeed config docs); FSDP reduce-scatters one unit's unsharded gradient at a time.

Tensor parallelism divides each layer (see ``params``); pipeline parallelism gives the most loaded
stage ``ceil(layers / pp)`` layers plus its share of embeddings and lm_head.

LoRA (Hu et al. 2021, section 4): each targeted projection of K inputs and N outputs gets
``A (r x K)`` and ``B (N x r)``, r x (K + N) trainable parameters, which alone receive gradients,
optimizer state and master copies; the base model is frozen in its dtype, or in NF4 for QLoRA
(Dettmers et al. 2023), where bitsandbytes dequantizes one linear at a time to 16-bit for the
matmul.

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 4.1, equation 1): per layer ``sbh(34 + 5as/h)`` bytes for a 16-bit micro-batch
of b sequences of s tokens, width h, a heads: attention 11sbh + 5as^2b, MLP 19sbh, layer norms
4sbh. The MLP's 16sbh (two 4h-wide tensors of 2 bytes) is generalised to the model's
intermediate size I (2 bytes x 2 I-wide tensors, or x 4 for gated MLPs: gate, up, activated gate,
product; x top-k for MoE) and the attention's 8sbh (Q, K, V, output) to the model's q and kv
widths; with I = 4h, multi-head attention and a GeLU MLP it is the paper's 34 exactly. Tensor
parallelism without sequence parallelism (section 4.2.1, equation 2): ``sbh(10 + 24/t +
5as/(ht))``. FlashAttention (Dao et al. 2022) keeps no score matrix: the ``5as/h`` term goes.
Full activation checkpointing (section 4.3 / 5): only each layer's input, ``2sbh`` per layer, plus
one layer's full activations during recomputation. Pipeline parallelism with 1F1B: the first stage
holds ``min(pp, gradientAccumulationSteps)`` micro-batches in flight (section 4.2.3). fp32
training doubles the bytes. Logits: the lm_head output (16-bit), its float32 upcast in the loss,
and the float32 log-softmax that cross-entropy saves for backward, per token over the vocabulary
(Hugging Face ``ForCausalLMLoss`` upcasts logits with ``.float()``).

All results are bytes on the most loaded GPU, or parameters where named so.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_sizer.api import (
    Architecture,
    FinetuningMethod,
    GPUWorkloadSpec,
    Model,
    Optimizer,
    ParallelStrategy,
    Precision,
    Training,
)
from gpu_sizer.budget.families import family
from gpu_sizer.budget.params import Layout
from gpu_sizer.budget.weights import dequantization_workspace_bytes, weight_bytes

__all__ = [
    "DEEPSPEED_REDUCE_BUCKET_ELEMENTS",
    "ModelStates",
    "TrainingBudget",
    "activation_bytes",
    "adapter_params",
    "communication_buffer_bytes",
    "gradient_bytes_per_param",
    "logits_bytes",
    "master_bytes_per_param",
    "model_states",
    "optimizer_state_bytes",
    "trainable_parameter_count",
    "training_budget",
    "weight_bytes_per_param",
]

#: DeepSpeed ``zero_optimization.reduce_bucket_size`` default, in elements.
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
#: bitsandbytes blockwise 8-bit optimizer: block size and ``min_8bit_size``.
_ADAM8_BLOCK = 256
_ADAM8_MIN_SIZE = 4096

_DEEPSPEED = frozenset({ParallelStrategy.zero1, ParallelStrategy.zero2, ParallelStrategy.zero3})
_SHARD_OPTIMIZER = frozenset(
    {
        ParallelStrategy.zero1,
        ParallelStrategy.zero2,
        ParallelStrategy.zero3,
        ParallelStrategy.fsdp_shard_grad_op,
        ParallelStrategy.fsdp_full_shard,
    }
)
_SHARD_GRADIENTS = frozenset(
    {
        ParallelStrategy.zero2,
        ParallelStrategy.zero3,
        ParallelStrategy.fsdp_shard_grad_op,
        ParallelStrategy.fsdp_full_shard,
    }
)
_SHARD_WEIGHTS = frozenset({ParallelStrategy.zero3, ParallelStrategy.fsdp_full_shard})

#: Module names a LoRA target selects, mapped to canonical roles. Llama's names also select the
#: fused projections of families that fuse them (Phi-3 ``qkv_proj``, GPT-NeoX/Falcon
#: ``query_key_value``), so that one target list sizes every family.
_TARGET_ROLES: dict[str, frozenset[str]] = {
    "q_proj": frozenset({"q", "qkv"}),
    "k_proj": frozenset({"k", "qkv"}),
    "v_proj": frozenset({"v", "qkv"}),
    "o_proj": frozenset({"o"}),
    "gate_proj": frozenset({"gate", "gate_up"}),
    "up_proj": frozenset({"up", "gate_up"}),
    "down_proj": frozenset({"down"}),
    "all-linear": frozenset({"q", "k", "v", "o", "qkv", "gate", "up", "down", "gate_up", "router"}),
}


def weight_bytes_per_param(precision: Precision) -> int:
    """Bytes per weight of the working copy: 4 under fp32, else 2."""
    return 4 if precision is Precision.fp32 else 2


def gradient_bytes_per_param(precision: Precision, strategy: ParallelStrategy) -> int:
    """Bytes per gradient element (see the module docstring for the rule)."""
    if precision is Precision.fp32:
        return 4
    if precision is Precision.bf16_true:
        return 2
    return 2 if strategy in _DEEPSPEED else 4


def _state_bytes(precision: Precision) -> int:
    return 2 if precision is Precision.bf16_true else 4


def master_bytes_per_param(precision: Precision) -> int:
    """fp32 master-copy bytes per trainable parameter: 4 under mixed precision, else 0."""
    return 4 if precision in (Precision.bf16_mixed, Precision.fp16_mixed) else 0


def optimizer_state_bytes(
    optimizer: Optimizer,
    precision: Precision,
    params: int,
    factored: int,
    small: int,
) -> int:
    """Optimizer-state bytes for ``params`` trainable parameters.

    :param factored: Adafactor's state elements (``rows + cols`` per matrix, size per vector).
    :param small: how many of ``params`` sit in tensors under 4096 elements (8-bit AdamW keeps
        those in 32-bit).
    """
    s = _state_bytes(precision)
    if optimizer is Optimizer.adamw:
        return 2 * s * params
    if optimizer is Optimizer.sgd:
        return 0
    if optimizer is Optimizer.sgd_momentum or optimizer is Optimizer.lion:
        return s * params
    if optimizer is Optimizer.adafactor:
        return s * factored
    big = params - small
    return 2 * big + 2 * 4 * -(-big // _ADAM8_BLOCK) + 2 * 4 * small


@dataclass(frozen=True, slots=True)
class ModelStates:
    """Per-GPU model-state bytes (weights, gradients, optimizer state, master weights)."""

    weights: int
    gradients: int
    optimizer: int
    master: int

    @property
    def total(self) -> int:
        """Sum of the four, in bytes."""
        return self.weights + self.gradients + self.optimizer + self.master


def model_states(
    weight_bytes_: int,
    trainable: int,
    grad_per_param: int,
    optimizer_bytes: int,
    master_per_param: int,
    strategy: ParallelStrategy,
    data_parallel: int,
) -> ModelStates:
    """Model states on one GPU after ZeRO/FSDP partitioning over ``data_parallel`` ranks.

    Reproduces the ZeRO paper's Figure 1: Psi = 7.5e9, K = 12, N_d = 64 gives 120 GB for the
    baseline (``ddp``), 31.4 GB for P_os (``zero1``), 16.6 GB for P_os+g (``zero2``) and 1.88 GB
    for P_os+g+p (``zero3``) with ``weight_bytes_ = 2 Psi``, ``grad_per_param = 2``,
    ``optimizer_bytes + master = 12 Psi``.

    :param weight_bytes_: bytes of all weights held before partitioning (frozen ones included).
    :param trainable: trainable parameters held before partitioning.
    """
    n = data_parallel
    grads = trainable * grad_per_param
    master = trainable * master_per_param
    opt = optimizer_bytes
    weights = weight_bytes_
    if strategy in _SHARD_OPTIMIZER:
        opt = -(-opt // n)
        master = -(-master // n)
    if strategy in _SHARD_GRADIENTS:
        grads = -(-grads // n)
    if strategy in _SHARD_WEIGHTS:
        weights = -(-weights // n)
    return ModelStates(weights, grads, opt, master)


def adapter_params(lay: Layout, rank: int, targets: list[str]) -> tuple[int, int, int]:
    """LoRA adapters of ``lay``'s layers: (parameters, Adafactor state elements, largest adapter).

    A target selects modules by their name in the family (e.g. ``dense_h_to_4h``) or by the
    Llama name of the same role (``_TARGET_ROLES``); ``all-linear`` selects every linear layer.
    """
    roles: set[str] = set()
    names = set(targets)
    for t in targets:
        roles |= _TARGET_ROLES.get(t, frozenset())
    params = 0
    factored = 0
    largest = 0
    for group in lay.groups:
        for lin in group.linears:
            if lin.role in roles or lin.name in names:
                one = rank * (lin.in_features + lin.out_features)
                params += group.count * one * lin.copies
                factored += (
                    group.count * (2 * rank + lin.in_features + lin.out_features) * lin.copies
                )
                largest = max(largest, rank * max(lin.in_features, lin.out_features))
    return params, factored, largest


def _layer_factored(lay: Layout) -> int:
    return sum(
        g.count * sum((lin.in_features + lin.out_features) * lin.copies for lin in g.linears)
        for g in lay.groups
    )


def _outer_factored(lay: Layout) -> int:
    # Embedding and lm_head as (vocab, hidden) matrices; the smaller outer tensors as vectors.
    matrices = 1 if lay.tied else 2
    rest = max(0, lay.embedding + lay.head - matrices * lay.vocab * lay.hidden)
    return matrices * (lay.vocab + lay.hidden) + rest


def activation_bytes(arch: Architecture, tr: Training, layers: int) -> int:
    """Activation bytes of ``layers`` layers, in-flight micro-batches (Korthikanti eq. 1, 2)."""
    par = tr.parallelism
    t = par.tensor_parallel_size
    s = tr.sequence_length
    b = tr.micro_batch_size
    h = arch.hidden_size
    hd = arch.head_size
    a = arch.num_attention_heads
    q_dim = a * hd
    kv_dim = arch.kv_heads * hd
    inter = arch.moe_intermediate_size or arch.intermediate_size
    tensors = 4 if family(arch.model_type).mlp.gated else 2
    mlp = 2 * tensors * inter
    if arch.experts is not None and arch.num_experts_per_tok is not None:
        mlp *= arch.num_experts_per_tok
        if arch.shared_expert_intermediate_size is not None:
            mlp += 2 * tensors * arch.shared_expert_intermediate_size
    attn = 4 * q_dim + 4 * kv_dim
    # Bytes per layer, times sbh: replicated 10 (layer norms 4, attention and MLP inputs 2 + 2,
    # dropout masks 1 + 1) and the split attention and MLP parts.
    sb = s * b
    per_layer = sb * (10 * h + (attn + mlp) // t)
    if not tr.flash_attention:
        per_layer += 5 * a * s * sb // t
    scale = 2 if tr.precision is Precision.fp32 else 1
    in_flight = min(par.pipeline_parallel_size, tr.gradient_accumulation_steps)
    if tr.activation_checkpointing:
        stored = in_flight * layers * 2 * sb * h + per_layer
    else:
        stored = in_flight * layers * per_layer
    return stored * scale


def logits_bytes(arch: Architecture, tr: Training) -> int:
    """Logits of one micro-batch: 16-bit output, fp32 upcast and fp32 log-softmax (bytes)."""
    vocab = -(-arch.vocab_size // tr.parallelism.tensor_parallel_size)
    per = 8 if tr.precision is Precision.fp32 else 10
    return tr.sequence_length * tr.micro_batch_size * vocab * per


def communication_buffer_bytes(
    strategy: ParallelStrategy, trainable: int, grad_per_param: int
) -> int:
    """Gradient communication buffers (bytes): DDP's bucket copies of every gradient, DeepSpeed's
    reduce bucket of ``reduce_bucket_size`` elements; none without data parallelism."""
    if strategy is ParallelStrategy.ddp:
        return trainable * grad_per_param
    if strategy in _DEEPSPEED:
        return min(DEEPSPEED_REDUCE_BUCKET_ELEMENTS, trainable) * grad_per_param
    return 0


@dataclass(frozen=True, slots=True)
class TrainingBudget:
    """Per-GPU training bytes by component, and trainable parameters on that GPU."""

    weights: int
    quantization_overhead: int
    gradients: int
    optimizer: int
    master: int
    activations: int
    trainable: int


def _largest_unit(lay: Layout, stage_outer: int) -> int:
    """Largest module ZeRO-3 gathers at once: a layer, the embedding or lm_head (parameters)."""
    return max(lay.largest_layer, min(stage_outer, max(lay.embedding, lay.head)))


def training_budget(spec: GPUWorkloadSpec, lay: Layout, outer: int) -> TrainingBudget:
    """Per-GPU training bytes of ``spec`` on the most loaded pipeline stage.

    :param lay: the tensor-parallel rank's layout of the stage's decoder layers.
    :param outer: the stage's parameters outside the layers (embedding, lm_head, encoder).
    """
    tr = spec.training
    assert tr is not None
    arch = spec.model.architecture
    assert arch is not None
    model: Model = spec.model
    par = tr.parallelism
    strategy = par.strategy
    n = par.data_parallel_size
    precision = tr.precision
    w_per = weight_bytes_per_param(precision)
    g_per = gradient_bytes_per_param(precision, strategy)
    layers = lay.layers
    vectors = sum(g.count * g.vectors for g in lay.groups)
    stage_params = lay.layer_total + outer
    ft = tr.finetuning
    overhead = 0
    extra_activation = 0
    if ft.method is FinetuningMethod.full:
        trainable = stage_params
        weights = stage_params * w_per
        factored = _layer_factored(lay) + vectors + _outer_factored(lay)
        small = vectors if lay.hidden < _ADAM8_MIN_SIZE else 0
        bytes_per_weight = float(w_per)
    else:
        trainable, factored, largest = adapter_params(lay, ft.lora_rank, ft.lora_target_modules)
        small = trainable if largest < _ADAM8_MIN_SIZE else 0
        base, overhead = weight_bytes(lay, model, outer)
        weights = base + trainable * w_per
        bytes_per_weight = (base + overhead) / max(1, stage_params)
        extra_activation = dequantization_workspace_bytes(lay, model.quantization, training=True)
    opt = optimizer_state_bytes(tr.optimizer, precision, trainable, factored, small)
    states = model_states(
        weights, trainable, g_per, opt, master_bytes_per_param(precision), strategy, n
    )
    weights_out = states.weights
    grads_out = states.gradients
    if strategy is ParallelStrategy.zero3:
        unit = _largest_unit(lay, outer) + lay.largest_layer
        weights_out += int(min(unit, stage_params) * bytes_per_weight)
    elif strategy is ParallelStrategy.fsdp_full_shard:
        unit = outer + 2 * lay.largest_layer
        weights_out += int(min(unit, stage_params) * bytes_per_weight)
        grads_out += min(lay.largest_layer, trainable) * g_per
    elif strategy is ParallelStrategy.fsdp_shard_grad_op:
        weights_out += int(stage_params * bytes_per_weight)
        grads_out += min(lay.largest_layer, trainable) * g_per
    grads_out += communication_buffer_bytes(strategy, trainable, g_per)
    acts = activation_bytes(arch, tr, layers) + logits_bytes(arch, tr) + extra_activation
    return TrainingBudget(
        weights=weights_out,
        quantization_overhead=-(-overhead // n) if strategy in _SHARD_WEIGHTS else overhead,
        gradients=grads_out,
        optimizer=states.optimizer,
        master=states.master,
        activations=acts,
        trainable=trainable,
    )


def trainable_parameter_count(lay: Layout, training: Training) -> int:
    """Trainable parameters of the whole model (``lay`` built with tp = 1)."""
    ft = training.finetuning
    if ft.method is FinetuningMethod.full:
        return lay.total
    return adapter_params(lay, ft.lora_rank, ft.lora_target_modules)[0]
