"""Training memory on the most loaded GPU: phases, LoRA, activations. Pure.

This module assembles the training budget from its parts, each with its sources:

- ``training_precision``: which tensors hold which dtype (precision recipes), optimizer state;
- ``training_sharding``: DDP, FSDP 1/2, DeepSpeed ZeRO-1/2/3 and offload as implemented;
- ``training_load``: the ``Load`` phase (initialisation and checkpoint load);
- ``training_loss``: the logits and the loss's float32 working set;
- here: what one GPU holds before sharding (:class:`~gpu_sizer.budget.training_sharding.Holdings`:
  full fine-tuning, LoRA and QLoRA), activations, and the phases.

A step has two instants whose larger is its peak (``Step``): **backward** (activations saved for
backward, logits, gathered units, gradients being produced, communication buffers) and the
**optimizer step** (activations freed; the optimizer's gradient copies and temporaries). The
``Load`` phase is computed apart; ``status.estimate.peakPhase`` names the larger.

LoRA (Hu et al. 2021, section 4): each targeted projection of K inputs and N outputs gets
``A (r x K)`` and ``B (N x r)``, r x (K + N) trainable parameters, which alone receive gradients,
optimizer state and master copies; the base model is frozen in its dtype, or in NF4 for QLoRA
(Dettmers et al. 2023), where bitsandbytes dequantizes one linear at a time to 16-bit for the
matmul. PEFT creates the adapters in float32 (``autocast_adapter_dtype``), which is the
recipe's parameter dtype under Autocast.

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", section 4.1, equation 1): per layer ``sbh(34 + 5as/h)`` bytes for a 16-bit micro-batch
of b sequences of s tokens, width h, a heads: attention 11sbh + 5as^2b, MLP 19sbh, layer norms
4sbh. The MLP's 16sbh (two 4h-wide tensors of 2 bytes) is generalised to the model's
intermediate size I (2 bytes x 2 I-wide tensors, or x 4 for gated MLPs: gate, up, activated gate,
product; x top-k for MoE) and the attention's 8sbh (Q, K, V, output) to the model's q and kv
widths; with I = 4h, multi-head attention and a GeLU MLP it is the paper's 34 exactly. Each
layer group (:class:`~gpu_sizer.budget.params.LayerGroup`) is sized by its own kind and its rank's
linear layers: MLA, Mamba-1/2, dense and MoE feed-forwards and Nemotron-H's single-block layers
(:func:`layer_activation_bytes`), and the groups are summed. Tensor
parallelism without sequence parallelism (section 4.2.1, equation 2): ``sbh(10 + 24/t +
5as/(ht))``; with sequence parallelism (section 4.2.2, equation 3) every term is divided by t.
Context parallelism gives each rank ``s / cp`` tokens. FlashAttention (Dao et al. 2022) keeps no
score matrix: the ``5as/h`` term goes. Full activation checkpointing (section 4.3 / 5): only each
layer's input, ``2sbh`` per layer, plus one layer's full activations during recomputation.
Pipeline parallelism with 1F1B: the first stage holds ``min(pp, gradientAccumulationSteps)``
micro-batches in flight (section 4.2.3). fp32 compute doubles the bytes. Under the ``Autocast``
recipe ``torch.autocast`` also keeps a 16-bit copy of every fp32 weight it casts for a matmul
(the weight cast cache, saved for backward), counted with the activations.

All results are bytes on the most loaded GPU, or parameters where named so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_sizer.api import (
    DTYPE_BYTES,
    Architecture,
    Dtype,
    FinetuningMethod,
    GPUWorkloadSpec,
    Training,
)
from gpu_sizer.budget.params import LayerGroup, Layout, Linear
from gpu_sizer.budget.training_hf import (
    kbit_upcast,
    loss_shift_copy,
    recomputed_layer_bytes,
    stream_bytes,
)
from gpu_sizer.budget.training_load import load_peak
from gpu_sizer.budget.training_loss import logits_bytes
from gpu_sizer.budget.training_precision import (
    ADAM8_MIN_SIZE,
    Recipe,
    optimizer_state_bytes,
    recipe,
)
from gpu_sizer.budget.training_sharding import (
    Holdings,
    PhaseBytes,
    deepspeed_options,
    sharded_states,
)
from gpu_sizer.budget.weights import (
    dequantization_workspace_bytes,
    high_precision_bytes,
    weight_bytes,
)

__all__ = [
    "PhaseBytes",
    "TrainingBudget",
    "activation_bytes",
    "adapter_params",
    "autocast_copy_bytes",
    "flat_holdings",
    "holdings",
    "layer_activation_bytes",
    "phases",
    "step_activation_bytes",
    "trainable_parameter_count",
    "training_budget",
]

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


#: Roles of the linear layers that take an MLP's (or an expert's) input.
_UP_ROLES = frozenset({"gate", "up", "gate_up"})


def _roles(targets: list[str]) -> tuple[set[str], set[str]]:
    roles: set[str] = set()
    for t in targets:
        roles |= _TARGET_ROLES.get(t, frozenset())
    return roles, set(targets)


def _group_adapters(group: LayerGroup, rank: int, targets: list[str]) -> tuple[int, int, int]:
    """LoRA adapters of one layer of ``group``: (parameters, Adafactor elements, largest)."""
    roles, names = _roles(targets)
    params = factored = largest = 0
    for lin in group.linears:
        if lin.role in roles or lin.name in names:
            params += rank * (lin.in_features + lin.out_features) * lin.copies
            factored += (2 * rank + lin.in_features + lin.out_features) * lin.copies
            largest = max(largest, rank * max(lin.in_features, lin.out_features))
    return params, factored, largest


def adapter_params(lay: Layout, rank: int, targets: list[str]) -> tuple[int, int, int]:
    """LoRA adapters of ``lay``'s layers: (parameters, Adafactor state elements, largest adapter).

    A target selects modules by their name in the family (e.g. ``dense_h_to_4h``) or by the
    Llama name of the same role (``_TARGET_ROLES``); ``all-linear`` selects every linear layer.
    """
    params = factored = largest = 0
    for group in lay.groups:
        p, f, big = _group_adapters(group, rank, targets)
        params += group.count * p
        factored += group.count * f
        largest = max(largest, big)
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


def _largest_group(lay: Layout) -> LayerGroup | None:
    """The group of the largest decoder layer (the unit FSDP gathers at its largest)."""
    return max(lay.groups, key=lambda g: g.params, default=None)


def _one_layer(lay: Layout, group: LayerGroup) -> Layout:
    """A layout holding one layer of ``group`` and nothing else (to size one unit)."""
    return replace(
        lay, groups=(replace(group, indices=group.indices[:1]),), embedding=0, head=0, encoder=0
    )


def _mlp_token_bytes(linears: list[Linear]) -> int:
    """Bytes one token saves for backward in one MLP (or one expert), 16-bit: the outputs of
    gate and up (or the fused gate_up, or the one up projection) and, per width-I tensor after
    them, the activation's output and (gated) the product that enters down."""
    outs = sum(lin.out_features for lin in linears if lin.role in _UP_ROLES)
    down = sum(lin.in_features for lin in linears if lin.role == "down")
    gated = any(lin.role in {"gate", "gate_up"} for lin in linears)
    return 2 * outs + 2 * down * (2 if gated else 1)


def _width(linears: tuple[Linear, ...], role: str, side: str) -> int:
    return sum(getattr(lin, side) for lin in linears if lin.role == role)


def _mixer_token_bytes(group: LayerGroup) -> int:
    """Bytes one token saves for backward in ``group``'s token mixer on this rank (16-bit),
    beyond the block's input and norm (counted with the replicated part).

    - attention: Q, K, V and the attention output entering o_proj (Korthikanti's 8sbh for
      multi-head attention; q and kv widths of the rank's heads);
    - MLA (transformers ``DeepseekV3Attention.forward``; Megatron ``MLASelfAttention``): the
      q_a_layernorm and kv_a_layernorm inputs (q_a and kv_a outputs, the latter with the shared
      rope key), the normed latents entering q_b_proj and kv_b_proj, then Q and K of
      ``heads x (qkNope + qkRope)`` each (the rope key concatenated to every head), V of
      ``heads x vHead`` and the attention output entering o_proj;
    - Mamba-2 (mamba_ssm ``ssd_combined.py`` ``MambaSplitConv1dScanCombinedFn.forward``, the
      training path of transformers' Nemotron-H mixer): ``zxbcdt`` (in_proj's output of
      ``2 x inner + 2 x groups x state + heads``) and ``out_x`` (the scan output, inner); the
      conv output and the gated norm's output are recomputed in backward;
    - Mamba-1 (transformers ``JambaMambaMixer.cuda_kernels_forward`` with mamba_ssm's
      ``causal_conv1d_fn`` and ``selective_scan_fn``): in_proj's output (x and the gate z,
      2 x inner), the conv output (inner), x_proj's output (dt rank + 2 x state), dt_proj's
      output (inner) and the scan output entering out_proj (inner).
    """
    lins = group.linears
    mixer = group.kind.mixer
    if mixer == "attention":
        qkv = sum(lin.out_features for lin in lins if lin.role in {"q", "k", "v", "qkv"})
        return 2 * qkv + 2 * _width(lins, "o", "in_features")
    if mixer == "mla":
        q = _width(lins, "q", "out_features") + _width(lins, "q_b", "out_features")
        latents = (
            _width(lins, "q_a", "out_features")
            + _width(lins, "q_b", "in_features")
            + _width(lins, "kv_a", "out_features")
            + _width(lins, "kv_b", "in_features")
        )
        v = _width(lins, "o", "in_features")
        return 2 * latents + 2 * (2 * q + 2 * v)
    if mixer == "mamba":
        inner = _width(lins, "out_proj", "in_features")
        saved = _width(lins, "in_proj", "out_features") + inner
        if any(lin.role == "x_proj" for lin in lins):
            saved += inner + _width(lins, "x_proj", "out_features")
            saved += _width(lins, "dt_proj", "out_features")
        return 2 * saved
    return 0


def _ffn_token_bytes(arch: Architecture, group: LayerGroup) -> int:
    """Bytes one token saves for backward in ``group``'s feed-forward on this rank (16-bit).

    Dense: :func:`_mlp_token_bytes`. MoE (transformers ``MixtralSparseMoeBlock`` /
    ``MixtralExperts.forward`` and the families built like it): the router's float32 softmax
    over the experts, and per routed expert (``numExpertsPerTok``) the token's gathered copy
    entering the expert, the expert's MLP tensors and its output scaled by the routing weight;
    plus the shared experts' MLP tensors.
    """
    kind = group.kind.ffn
    mlp = [lin for lin in group.linears if lin.role in _UP_ROLES | {"down"}]
    if kind == "dense":
        return _mlp_token_bytes(mlp)
    if kind != "moe" or arch.experts is None:
        return 0
    experts = arch.experts
    routed = [lin for lin in mlp if lin.copies == experts]
    shared = [lin for lin in mlp if lin.copies != experts]
    k = arch.num_experts_per_tok or 1
    h = arch.hidden_size
    return 4 * experts + k * (2 * h + _mlp_token_bytes(routed) + 2 * h) + _mlp_token_bytes(shared)


def layer_activation_bytes(arch: Architecture, tr: Training, group: LayerGroup) -> int:
    """Bytes one layer of ``group`` saves for backward for one micro-batch on this rank.

    Korthikanti et al. 2022 (section 4.1) per block: its input and its norm's input (2 + 2 bytes
    per hidden element) and the dropout mask on its output (1 byte), so 10sbh for a layer of
    attention and MLP and 5sbh for Nemotron-H's single-block layers, divided by t under sequence
    parallelism; then the mixer's and the feed-forward's own tensors (already the rank's share:
    the group's linears are the rank's), and without FlashAttention the attention scores'
    ``5 x heads x s`` bytes per token (heads on this rank).
    """
    par = tr.parallelism
    t = par.tensor_parallel_size
    tokens = (tr.sequence_length // par.context_parallel_size) * tr.micro_batch_size
    h = arch.hidden_size
    blocks = (group.kind.mixer != "none") + (group.kind.ffn != "none")
    replicated = 5 * blocks * h
    if par.sequence_parallel:
        replicated //= t
    per_token = replicated + _mixer_token_bytes(group) + _ffn_token_bytes(arch, group)
    if not tr.flash_attention and group.kind.mixer in {"attention", "mla"}:
        seq = tr.sequence_length // par.context_parallel_size
        per_token += 5 * (arch.num_attention_heads // t) * seq
    return tokens * per_token


def _inter_width(group: LayerGroup) -> int:
    """Feed-forward width of one token on this rank (per routed expert for MoE)."""
    ups = [lin for lin in group.linears if lin.role in _UP_ROLES]
    fused = any(lin.role == "gate_up" for lin in ups)
    widest = max((lin.out_features for lin in ups), default=0)
    return widest // 2 if fused else widest


def _backward_grad_bytes(group: LayerGroup, tokens: int, hidden: int, stream: int, c: int) -> int:
    """The backward's own working set in one layer: three feed-forward-wide gradients (the
    product's, the activation's, up's) and the gradients of the layer's output and input."""
    return tokens * (3 * c * _inter_width(group) + 2 * stream * hidden)


def _layer_instant_bytes(
    spec: GPUWorkloadSpec, arch: Architecture, group: LayerGroup, stream: int
) -> int:
    """One layer of ``group`` with autograd on (saved tensors and backward gradients)."""
    tr = spec.training
    assert tr is not None
    par = tr.parallelism
    tokens = (tr.sequence_length // par.context_parallel_size) * tr.micro_batch_size
    c = recipe(tr).compute
    ft = tr.finetuning
    hf_layer = (
        ft.method is not FinetuningMethod.full
        and group.kind.mixer == "attention"
        and group.kind.ffn == "dense"
        and tr.flash_attention
        and not par.sequence_parallel
    )
    if hf_layer:
        q = spec.model.quantization
        return recomputed_layer_bytes(
            group,
            tokens,
            arch.hidden_size,
            stream=stream,
            compute=c,
            adapted=_roles(ft.lora_target_modules),
            dropout=ft.lora_dropout > 0,
            quantized=q is not None and q.method.value.startswith("bitsandbytes"),
        )
    saved = layer_activation_bytes(arch, tr, group) * (2 if c == 4 else 1)
    return saved + _backward_grad_bytes(group, tokens, arch.hidden_size, stream, c)


def step_activation_bytes(
    spec: GPUWorkloadSpec, arch: Architecture, lay: Layout, outer: int
) -> int:
    """Activation bytes at a step's activation peak on the most loaded GPU (see
    :mod:`gpu_sizer.budget.training_hf` for the code paths).

    Two instants, whose larger is the peak: the **loss instant** at the end of the forward
    (every layer's saved tensors or, under checkpointing, every layer's input; the final norm;
    the loss's working set, :func:`~gpu_sizer.budget.training_loss.logits_bytes`; the 16-bit
    copy of an upcast lm_head) and the **layer instant** in the backward of the largest layer
    (the same stored tensors, the loss's freed, plus that layer re-run with its gradients,
    :func:`_layer_instant_bytes`). Pipeline parallelism keeps ``min(pp, gradient accumulation
    steps)`` micro-batches' stored tensors on the first stage (Korthikanti et al. 2022,
    section 4.2.3). Korthikanti's per-layer counts (:func:`layer_activation_bytes`) size the
    layers the Hugging Face path does not cover (full fine-tuning, MoE, MLA, Mamba, eager
    attention); float32 compute doubles them.

    :param arch: the model's architecture (``spec.model.architecture`` or the geometry used
        for a family without a parameter layout).
    :param lay: the tensor-parallel rank's layout of the stage's decoder layers.
    :param outer: the stage's parameters outside the layers.
    """
    tr = spec.training
    assert tr is not None
    par = tr.parallelism
    t = par.tensor_parallel_size
    tokens = (tr.sequence_length // par.context_parallel_size) * tr.micro_batch_size
    in_flight = min(par.pipeline_parallel_size, tr.gradient_accumulation_steps)
    c = recipe(tr).compute
    stream = stream_bytes(spec, c)
    h = arch.hidden_size
    per_group = [(g, _layer_instant_bytes(spec, arch, g, stream)) for g in lay.groups]
    if tr.activation_checkpointing:
        split = t if par.sequence_parallel else 1
        stored = in_flight * lay.layers * (tokens * stream * h // split)
        layer = max((b for _, b in per_group), default=0)
    else:
        scale = 2 if c == 4 else 1
        stored = (
            in_flight
            * scale
            * sum(g.count * layer_activation_bytes(arch, tr, g) for g, _ in per_group)
        )
        layer = max(
            (_backward_grad_bytes(g, tokens, h, stream, c) for g, _ in per_group), default=0
        )
    head_outer = min(outer, lay.vocab * lay.hidden)
    upcast_head = c * head_outer if kbit_upcast(spec) and head_outer else 0
    final_norm = tokens * (3 * stream * h + (c * h if stream > c else 0))
    loss = final_norm + logits_bytes(arch, tr, c, shift_copy=loss_shift_copy(tr)) + upcast_head
    return stored + max(loss, layer)


def activation_bytes(arch: Architecture, tr: Training, lay: Layout) -> int:
    """Korthikanti et al.'s stored activation bytes of ``lay``'s layers (a tensor-parallel
    rank's pipeline stage) with the in-flight micro-batches: each layer group's
    :func:`layer_activation_bytes` times its layers, or under full checkpointing each layer's
    input plus the largest layer recomputed (the paper's model; the estimate uses
    :func:`step_activation_bytes`)."""
    par = tr.parallelism
    t = par.tensor_parallel_size
    tokens = (tr.sequence_length // par.context_parallel_size) * tr.micro_batch_size
    in_flight = min(par.pipeline_parallel_size, tr.gradient_accumulation_steps)
    per_group = [(g.count, layer_activation_bytes(arch, tr, g)) for g in lay.groups]
    largest = max((b for _, b in per_group), default=0)
    if tr.activation_checkpointing:
        checkpoint = 2 * tokens * arch.hidden_size // (t if par.sequence_parallel else 1)
        stored = in_flight * lay.layers * checkpoint + largest
    else:
        stored = in_flight * sum(n * b for n, b in per_group)
    scale = 2 if recipe(tr).compute == 4 else 1
    return stored * scale


def autocast_copy_bytes(spec: GPUWorkloadSpec, lay: Layout, outer: int) -> int:
    """16-bit copies ``torch.autocast`` keeps of fp32 weights used in matmuls (bytes): every
    trainable fp32 matrix (all decoder-layer matrices and lm_head in a full fine-tune, the
    adapters under LoRA) and, for a float32 LoRA base, the base's matrices too."""
    tr = spec.training
    assert tr is not None
    r = recipe(tr)
    if not r.autocast:
        return 0
    ft = tr.finetuning
    head = min(outer, lay.vocab * lay.hidden)
    matrices = sum(g.count * g.matrix_params for g in lay.groups) + head
    if ft.method is FinetuningMethod.full:
        return r.compute * matrices
    adapters, _, _ = adapter_params(lay, ft.lora_rank, ft.lora_target_modules)
    base = matrices if spec.model.dtype is Dtype.float32 and spec.model.quantization is None else 0
    return r.compute * (adapters + base)


def holdings(spec: GPUWorkloadSpec, lay: Layout, outer: int) -> Holdings:
    """What one GPU's tensor-parallel part of the most loaded pipeline stage holds.

    :param lay: the tensor-parallel rank's layout of the stage's decoder layers.
    :param outer: the stage's parameters outside the layers (embeddings, lm_head, final norm,
        vision encoder).
    """
    tr = spec.training
    assert tr is not None
    r = recipe(tr)
    ft = tr.finetuning
    model = spec.model
    stage_params = lay.layer_total + outer
    vectors = sum(g.count * g.vectors for g in lay.groups)
    group = _largest_group(lay)
    unit_params = group.params if group is not None else 0
    if ft.method is FinetuningMethod.full:
        trainable = stage_params
        unit_trainable = unit_params
        root_trainable = outer
        stored, quant = stage_params * r.param, 0
        unit_bytes = unit_params * r.param
        root_bytes = outer * r.param
        factored = _layer_factored(lay) + vectors + _outer_factored(lay)
        small = vectors if lay.hidden < ADAM8_MIN_SIZE else 0
        largest = 0
    else:
        targets = ft.lora_target_modules
        trainable, factored, largest = adapter_params(lay, ft.lora_rank, targets)
        unit_trainable = _group_adapters(group, ft.lora_rank, targets)[0] if group else 0
        root_trainable = 0
        base, quant = weight_bytes(lay, model, outer)
        root_bytes = weight_bytes(replace(lay, groups=()), model, outer)[0]
        unit_base = weight_bytes(_one_layer(lay, group), model, 0)[0] if group else 0
        if kbit_upcast(spec):
            # prepare_model_for_kbit_training: unquantized parameters become float32.
            wider = 4 - high_precision_bytes(model)
            base += wider * (outer + vectors)
            root_bytes += wider * outer
            unit_base += wider * (group.vectors if group else 0)
        stored = base + trainable * r.param
        unit_bytes = unit_base + unit_trainable * r.param
        small = trainable if largest < ADAM8_MIN_SIZE else 0
    largest_linear = max(
        (lin.in_features * lin.out_features * lin.copies for lin in lay.linears), default=0
    )
    largest_module = max(largest_linear, min(outer, max(lay.embedding, lay.head)))
    threshold = deepspeed_options(tr).stage3_param_persistence_threshold
    persistent = vectors + lay.hidden if lay.hidden <= threshold else 0
    return Holdings(
        params=stage_params,
        trainable=trainable,
        weight_bytes=stored,
        quant_overhead=quant,
        optimizer_bytes=optimizer_state_bytes(tr.optimizer, r.state, trainable, factored, small),
        layers=lay.layers,
        unit_params=unit_params,
        unit_trainable=unit_trainable,
        unit_bytes=unit_bytes,
        root_params=outer,
        root_trainable=root_trainable,
        root_bytes=root_bytes,
        largest_module=largest_module,
        persistent=min(persistent, stage_params),
        largest_trainable_module=largest or largest_module,
    )


def flat_holdings(spec: GPUWorkloadSpec, params: int) -> Holdings:
    """Holdings of a full fine-tune of ``params`` parameters with no known layout: no units
    (FSDP's gathered units and ZeRO-3's largest module are unknown), Adafactor unfactored."""
    tr = spec.training
    assert tr is not None
    r = recipe(tr)
    return Holdings(
        params=params,
        trainable=params,
        weight_bytes=params * r.param,
        quant_overhead=0,
        optimizer_bytes=optimizer_state_bytes(tr.optimizer, r.state, params, params, 0),
        layers=0,
        unit_params=0,
        unit_trainable=0,
        unit_bytes=0,
        root_params=0,
        root_trainable=0,
        root_bytes=0,
        largest_module=0,
        persistent=0,
        largest_trainable_module=0,
    )


@dataclass(frozen=True, slots=True)
class TrainingBudget:
    """Per-GPU training bytes of the ``Step`` and ``Load`` phases, trainable parameters on the
    GPU, host bytes per node, and which instant of the step is its peak."""

    step: PhaseBytes
    load: PhaseBytes
    trainable: int
    host_per_node: int
    step_instant: str
    recipe: Recipe


def _staged_bytes(spec: GPUWorkloadSpec, h: Holdings) -> int:
    """Checkpoint bytes this rank stages in host memory: a bitsandbytes base is quantized on
    load from its 16-bit checkpoint; an unquantized model is staged in its checkpoint dtype
    or as trained, whichever is larger; everything else as stored."""
    q = spec.model.quantization
    if q is not None and q.method.value.startswith("bitsandbytes"):
        return h.params * max(2, DTYPE_BYTES[spec.model.dtype])
    stored = h.weight_bytes + h.quant_overhead
    if q is None:
        # Loaded in the checkpoint's dtype before the wrapper casts it (DeepSpeed's 16-bit
        # model is cast from a float32 load: its estimators count 4 bytes per parameter).
        return max(stored, h.params * DTYPE_BYTES[spec.model.dtype])
    return stored


def phases(spec: GPUWorkloadSpec, h: Holdings, activations: int) -> TrainingBudget:
    """The ``Step`` and ``Load`` phases of ``h`` with ``activations`` bytes at the backward
    instant (activations, logits, workspaces)."""
    tr = spec.training
    assert tr is not None
    r = recipe(tr)
    states = sharded_states(tr, r, h)
    backward = replace(states.backward, activations=states.backward.activations + activations)
    update = states.step
    if backward.reserved >= update.reserved:
        step, instant = backward, "backward"
    else:
        step, instant = update, "optimizer step"
    q = spec.model.quantization
    bnb = q is not None and q.method.value.startswith("bitsandbytes")
    peak = load_peak(tr, r, h, _staged_bytes(spec, h), bitsandbytes=bnb)
    load = PhaseBytes(peak.weights, peak.quant, 0, 0, peak.master, 0)
    host = max(peak.host_per_node, tr.parallelism.ranks_per_node * states.host)
    return TrainingBudget(step, load, h.trainable, host, instant, r)


def training_budget(spec: GPUWorkloadSpec, lay: Layout, outer: int) -> TrainingBudget:
    """Per-GPU training bytes of ``spec`` on the most loaded pipeline stage.

    :param lay: the tensor-parallel rank's layout of the stage's decoder layers.
    :param outer: the stage's parameters outside the layers (embedding, lm_head, encoder).
    """
    tr = spec.training
    assert tr is not None
    arch = spec.model.architecture
    assert arch is not None
    h = holdings(spec, lay, outer)
    acts = step_activation_bytes(spec, arch, lay, outer) + autocast_copy_bytes(spec, lay, outer)
    if tr.finetuning.method is not FinetuningMethod.full:
        acts += dequantization_workspace_bytes(lay, spec.model.quantization, training=True)
    return phases(spec, h, acts)


def trainable_parameter_count(lay: Layout, training: Training) -> int:
    """Trainable parameters of the whole model (``lay`` built with tp = 1)."""
    ft = training.finetuning
    if ft.method is FinetuningMethod.full:
        return lay.total
    return adapter_params(lay, ft.lora_rank, ft.lora_target_modules)[0]
