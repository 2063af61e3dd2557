"""Parameter layout of a decoder model, per tensor-parallel rank and pipeline stage. Pure.

The layout lists every weight matrix of the decoder layers, grouped by layer structure (a
:class:`LayerGroup` per distinct structure, with how many layers have it), with each matrix's
input and output width, copies (MoE experts), bias, whether quantized formats pack it, and its
module path as the checkpoint names it (so quantization ``ignore`` lists and LoRA targets can
match). Outside the layers: embeddings, lm_head, the final norm and a vision encoder. Weights,
quantization metadata, LoRA adapters, Adafactor's factored states, ZeRO-3's gathered working set
and pipeline stages are all derived from it, so the parameter count is the one thing that must
be exact; tests compare it with ``transformers``' model built on the meta device, per family.

One generic function, :func:`layout`, turns a family's parts (:mod:`gpu_sizer.budget.families`)
and the config's sizes and per-layer pattern (:func:`layer_plan`) into the layout:

- attention: q/k/v/o (or a fused qkv) of ``numAttentionHeads x headDim`` and
  ``numKeyValueHeads x headDim``; q/k norms; gpt-oss sinks (``numAttentionHeads`` scalars);
- multi-head latent attention (DeepSeek-V2/V3, ``DeepseekV3Attention``): ``q_a_proj`` hidden ->
  qLoraRank, ``q_a_layernorm``, ``q_b_proj`` qLoraRank -> heads x (qkNope + qkRope) (or one
  ``q_proj`` without qLoraRank), ``kv_a_proj_with_mqa`` hidden -> kvLoraRank + qkRope,
  ``kv_a_layernorm``, ``kv_b_proj`` kvLoraRank -> heads x (qkNope + vHead), ``o_proj``;
- dense MLP, MoE (router, experts, shared experts), Mamba-2 (``in_proj`` hidden -> 2 x inner +
  2 x groups x state + heads, ``conv1d`` over inner + 2 x groups x state channels, ``dt_bias``,
  ``A_log``, ``D`` per head, gated RMSNorm over inner, ``out_proj``) and Mamba-1 (Jamba:
  ``in_proj`` hidden -> 2 x inner, ``conv1d``, ``x_proj`` inner -> dtRank + 2 x state,
  ``dt_proj`` dtRank -> inner with bias, ``A_log`` inner x state, ``D``, the dt/B/C RMSNorms,
  ``out_proj``).

Under tensor parallelism (Megatron-LM, Shoeybi et al. 2019, section 3; vLLM's
``ColumnParallelLinear``/``RowParallelLinear``/``QKVParallelLinear``/``VocabParallelEmbedding``/
``FusedMoE``): q/k/v, gate/up and the vocabulary split by output, o/down split by input, KV heads
split or replicated when fewer than ranks, norms, routers and row-parallel biases replicated, MoE
experts split along their intermediate width. MLA's ``q_a_proj`` and ``kv_a_proj_with_mqa`` are
replicated (vLLM ``deepseek_v2.py``: ``ReplicatedLinear``/``disable_tp``), its ``q_b_proj``,
``kv_b_proj`` split by heads. Mamba's heads, inner width and groups split (vLLM
``MambaMixer2``: one group per rank is replicated when groups do not divide), OLMo 2's full-width
q/k norms replicated (vLLM ``olmo2.py`` normalises the gathered q and k), sinks split by heads.

All counts are numbers of parameters (elements), not bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

from gpu_sizer.api import Architecture
from gpu_sizer.budget.families import FAMILIES, Family, Mlp, Moe, family
from gpu_sizer.budget.family_wiring import Wiring, wiring

__all__ = [
    "LayerGroup",
    "LayerKind",
    "Layout",
    "Linear",
    "config_value",
    "geometry_layout",
    "layer_plan",
    "layout",
    "parameter_count",
    "stage_layers",
]

Mixer = Literal["attention", "mla", "mamba", "none"]
Window = Literal["full", "sliding", "chunked"]
Ffn = Literal["dense", "moe", "none"]

#: ``transformers``' config-class defaults that decide the layer pattern or a size when the
#: config leaves the key out, by family (e.g. ``Gemma3TextConfig.sliding_window`` 4096,
#: ``GptOssConfig.sliding_window`` 128, ``Llama4TextConfig.attention_chunk_size`` 8192,
#: ``JambaConfig``'s periods and Mamba sizes, ``NemotronHConfig``'s Mamba-2 sizes).
_DEFAULTS: dict[str, dict[str, int | bool]] = {
    "gemma2": {"sliding_window": 4096},
    "gemma3": {"sliding_window": 4096, "sliding_window_pattern": 6},
    "gemma3_text": {"sliding_window": 4096, "sliding_window_pattern": 6},
    "gpt_oss": {"sliding_window": 128},
    "llama4": {"attention_chunk_size": 8192, "interleave_moe_layer_step": 1},
    "jamba": {
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_conv_bias": True,
        "mamba_proj_bias": False,
    },
    "nemotron_h": {
        "ssm_state_size": 128,
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "n_groups": 8,
        "conv_kernel": 4,
        "use_conv_bias": True,
        "use_bias": False,
    },
}


def config_value(arch: Architecture, key: str) -> int:
    """``arch``'s value of config key ``key`` (snake_case), or its family's config-class default.

    :raises KeyError: neither the spec nor the family gives it (a programming error: callers ask
        only for keys their family declares).
    """
    value = getattr(arch, key, None)
    if value is None:
        value = _DEFAULTS.get(arch.model_type, {})[key]
    return int(value)


def _optional(arch: Architecture, key: str) -> int | None:
    value = getattr(arch, key, None)
    if value is None:
        value = _DEFAULTS.get(arch.model_type, {}).get(key)
    return None if value is None else int(value)


class Linear(NamedTuple):
    """One weight matrix on one tensor-parallel rank.

    ``role`` is canonical (q, k, v, o, qkv, gate, up, down, gate_up, router, q_a, q_b, kv_a,
    kv_b, in_proj, out_proj, x_proj, dt_proj); ``name`` is the module name in the checkpoint
    (used to match LoRA target modules); ``path`` is the module path inside a layer
    (``self_attn.q_proj``, ``mlp.experts.down_proj``): the checkpoint name of layer ``i``'s
    matrix is ``f"{Layout.prefix}.{i}.{path}"``, with the expert index after ``experts`` for
    per-expert checkpoints (``mlp.experts.7.down_proj``; gpt-oss and Llama 4 store the experts
    fused, as the path says). Widths are in elements; ``copies`` is the number of copies per
    layer (MoE experts).
    """

    role: str
    name: str
    in_features: int
    out_features: int
    copies: int
    bias: bool
    quantizable: bool
    path: str = ""

    @property
    def weight_params(self) -> int:
        """Matrix elements of all copies (bias excluded)."""
        return self.in_features * self.out_features * self.copies

    @property
    def bias_params(self) -> int:
        """Bias elements of all copies."""
        return self.out_features * self.copies if self.bias else 0


class LayerKind(NamedTuple):
    """What one decoder layer is made of: its token mixer, attention span and feed-forward."""

    mixer: Mixer
    window: Window
    ffn: Ffn


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Decoder layers of one structure on one rank: ``count`` layers (at ``indices``) alike.

    ``vectors`` are one layer's parameters outside the matrices: norms, biases, sinks, Mamba's
    conv weights and per-head scalars (elements).
    """

    kind: LayerKind
    indices: tuple[int, ...]
    linears: tuple[Linear, ...]
    vectors: int

    @property
    def count(self) -> int:
        """Layers of this structure."""
        return len(self.indices)

    @property
    def matrix_params(self) -> int:
        """Matrix elements of one layer."""
        return sum(lin.weight_params for lin in self.linears)

    @property
    def params(self) -> int:
        """All parameters of one layer."""
        return self.matrix_params + self.vectors


@dataclass(frozen=True, slots=True)
class Layout:
    """Parameters of one tensor-parallel rank, by where they live (all in elements).

    ``groups`` are the decoder layers held (all of them, or a pipeline stage's range);
    ``embedding`` holds the input embedding and whatever sits before the first layer (learned
    positions, OPT's ``project_in``); ``head`` holds lm_head (0 when tied), the final norm and
    OPT's ``project_out``; ``encoder`` the vision encoder and its projector (vision-language
    models; vLLM builds it on every rank).
    """

    family: str
    groups: tuple[LayerGroup, ...]
    embedding: int
    head: int
    encoder: int
    vocab: int
    hidden: int
    tied: bool
    prefix: str

    @property
    def layers(self) -> int:
        """Decoder layers held."""
        return sum(g.count for g in self.groups)

    @property
    def layer_total(self) -> int:
        """Parameters of all decoder layers held."""
        return sum(g.count * g.params for g in self.groups)

    @property
    def largest_layer(self) -> int:
        """Parameters of the largest decoder layer (FSDP and ZeRO-3 gather one at a time)."""
        return max((g.params for g in self.groups), default=0)

    @property
    def linears(self) -> tuple[Linear, ...]:
        """Every distinct matrix shape of the layers held (one entry per group and module)."""
        return tuple(lin for g in self.groups for lin in g.linears)

    @property
    def total(self) -> int:
        """All parameters of the rank (tied lm_head counted once)."""
        return self.layer_total + self.embedding + self.head + self.encoder


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


_WINDOWS: dict[str, Window] = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "sliding",
    "chunked_attention": "chunked",
}
_HYBRID_CODES: dict[str, tuple[Mixer, Ffn]] = {
    "M": ("mamba", "none"),
    "*": ("attention", "none"),
    "-": ("none", "dense"),
    "E": ("none", "moe"),
}
_HYBRID_TYPES: dict[str, str] = {
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "mlp": "-",
    "moe": "E",
}


def _moe_layers(arch: Architecture, fam: Family) -> list[bool]:
    """Whether each layer routes to experts, as each family's modeling code decides it.

    DeepSeek/GLM: ``i >= firstKDenseReplace and i % moeLayerFreq == 0``; Qwen-MoE: ``i not in
    mlpOnlyLayers and (i + 1) % decoderSparseStep == 0``; Llama 4: ``(i + 1) %
    interleaveMoeLayerStep == 0`` (``moe_layers = range(step - 1, layers, step)``); Jamba: ``i %
    expertLayerPeriod == expertLayerOffset``. Keys a config leaves out are neutral.
    """
    n = arch.num_hidden_layers
    if fam.moe is None or arch.experts is None:
        return [False] * n
    first = arch.first_k_dense_replace or 0
    freq = arch.moe_layer_freq or 1
    dense = set(arch.mlp_only_layers or ())
    sparse = arch.decoder_sparse_step or 1
    step = _optional(arch, "interleave_moe_layer_step") or 1
    period = _optional(arch, "expert_layer_period")
    offset = _optional(arch, "expert_layer_offset") or 0
    return [
        i >= first
        and i % freq == 0
        and i not in dense
        and (i + 1) % sparse == 0
        and (i + 1) % step == 0
        and (period is None or i % period == offset)
        for i in range(n)
    ]


def _windows(arch: Architecture, fam: Family) -> list[Window]:
    """Each layer's attention span: ``layerTypes`` when given, else the family's pattern."""
    n = arch.num_hidden_layers
    if arch.layer_types is not None:
        return [_WINDOWS.get(t, "full") for t in arch.layer_types]
    if fam.pattern == "nope_every_4th":
        rope = arch.no_rope_layers or [int((j + 1) % 4 != 0) for j in range(n)]
        return ["chunked" if r else "full" for r in rope]
    if _optional(arch, "sliding_window") is None or fam.pattern == "explicit":
        return ["full"] * n
    if fam.pattern in ("gemma2", "alternate"):
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if fam.pattern == "every_nth_global":
        every = config_value(arch, "sliding_window_pattern")
        return ["sliding" if (i + 1) % every else "full" for i in range(n)]
    return ["sliding"] * n


@lru_cache(maxsize=512)
def layer_plan(arch: Architecture) -> tuple[LayerKind, ...]:
    """The kind of every decoder layer, read from the config as ``transformers`` reads it.

    ``layerTypes`` when given; else Nemotron-H's ``hybridOverridePattern``, Jamba's attention
    period and offset, and the family's default pattern (Gemma 2 and gpt-oss alternate sliding
    and full layers; Gemma 3 makes every ``slidingWindowPattern``-th layer global; Llama 4's
    ``noRopeLayers`` are chunked, every fourth layer global; a ``slidingWindow`` on other
    families slides every layer). Layers with ``kvLoraRank`` use MLA. Memoised per architecture
    (the webhook, the estimate and its fixes ask for the same plan many times).
    """
    fam = family(arch.model_type)
    n = arch.num_hidden_layers
    kinds: dict[tuple[str, str, str], LayerKind] = {}

    def kind(mixer: Mixer, window: Window, ffn: Ffn) -> LayerKind:
        return kinds.setdefault((mixer, window, ffn), LayerKind(mixer, window, ffn))

    if fam.pattern == "hybrid_pattern":
        codes = arch.hybrid_override_pattern
        if codes is None:
            codes = "".join(_HYBRID_TYPES.get(t, "*") for t in arch.layer_types or ())
        return tuple(kind(_HYBRID_CODES[c][0], "full", _HYBRID_CODES[c][1]) for c in codes)
    moe = _moe_layers(arch, fam)
    if fam.pattern == "jamba":
        if arch.layer_types is not None:
            attention = [t in _WINDOWS for t in arch.layer_types]
        else:
            period = config_value(arch, "attn_layer_period")
            offset = config_value(arch, "attn_layer_offset")
            attention = [i % period == offset for i in range(n)]
        return tuple(
            kind("attention" if attention[i] else "mamba", "full", "moe" if moe[i] else "dense")
            for i in range(n)
        )
    mixer: Mixer = "mla" if arch.kv_lora_rank is not None else "attention"
    windows = _windows(arch, fam)
    return tuple(kind(mixer, windows[i], "moe" if moe[i] else "dense") for i in range(n))


def stage_layers(arch: Architecture, pp: int) -> range:
    """The decoder layers of the most loaded of ``pp`` pipeline stages.

    Stages hold ``ceil(layers / pp)`` consecutive layers at most (vLLM's ``get_pp_indices``
    gives each stage ``layers // pp`` and one more to some: never more than the ceiling); among
    the windows ``[k x n, (k + 1) x n)`` the one with the most parameters is returned, which for
    uniform layers is the first.
    """
    layers = arch.num_hidden_layers
    size = _ceil_div(layers, pp)
    if pp == 1:
        return range(layers)
    plan = layer_plan(arch)
    if len(set(plan)) == 1:
        return range(size)
    whole = layout(arch)
    per_kind = {g.kind: g.params for g in whole.groups}
    windows = [range(s, min(layers, s + size)) for s in range(0, layers, size)]
    return max(windows, key=lambda w: sum(per_kind[plan[i]] for i in w))


@lru_cache(maxsize=1024)
def layout(
    arch: Architecture,
    tp: int = 1,
    layers: range | None = None,
    experts: tuple[int, int] | None = None,
) -> Layout:
    """The parameter layout of one tensor-parallel rank of ``arch`` (``tp`` ranks in all).

    Memoised (layouts are immutable): the estimate, its fixes and the webhook ask for the same
    architecture's layout many times.

    :param arch: the model's shape (config.json keys).
    :param tp: tensor-parallel degree; 1 gives the whole model, whose ``total`` is the exact
        parameter count.
    :param layers: the decoder layers held (a pipeline stage, see :func:`stage_layers`);
        ``None`` holds all of them. Embeddings, lm_head and the encoder are always listed.
    :param experts: how the routed experts are split, (ranks sharing each expert's width, ranks
        sharing the experts): ``None`` is ``(tp, 1)``, tensor parallelism; vLLM's data parallel
        MoE is ``(tp x dp, 1)`` and expert parallelism ``(1, tp x dp)`` (``FusedMoE``: the
        expert group spans every tensor- and data-parallel rank; the most loaded rank holds
        ``ceil(experts / ranks)`` experts).
    :raises KeyError: a ``modelType`` without a parameter layout (the estimate takes its
        weights from ``parameterCount`` and never asks).
    """
    return _layout(arch, FAMILIES[arch.model_type], tp, layers, experts)


def geometry_layout(arch: Architecture, tp: int = 1, layers: range | None = None) -> Layout:
    """:func:`layout` for any model type: one without a parameter layout is laid out as
    :data:`~gpu_sizer.budget.families.GENERIC` declares it (its attention geometry and a gated
    MLP of ``intermediateSize``). For activations; its parameter totals are not the model's."""
    if arch.model_type in FAMILIES:
        return layout(arch, tp, layers)
    return _layout(arch, family(arch.model_type), tp, layers)


def _layout(
    arch: Architecture,
    fam: Family,
    tp: int,
    layers: range | None,
    experts: tuple[int, int] | None = None,
) -> Layout:
    from gpu_sizer.budget.vision import encoder_params

    h = arch.hidden_size
    vocab = _ceil_div(arch.vocab_size, tp)
    wired = wiring(arch, fam)
    tied = wired.tied
    norm = 2 * h if wired.layer_norm else h
    plan = layer_plan(arch)
    indices: dict[LayerKind, list[int]] = {}
    for i in range(len(plan)) if layers is None else layers:
        indices.setdefault(plan[i], []).append(i)
    groups = tuple(
        _group(arch, wired, kind, tuple(idx), tp, norm, experts) for kind, idx in indices.items()
    )
    embedding = vocab * h
    head = (0 if tied else vocab * h) + norm
    if arch.model_type == "opt":
        embedding, head = _opt_outer(arch, wired, vocab)
    return Layout(
        family=arch.model_type,
        groups=groups,
        embedding=embedding,
        head=head,
        encoder=encoder_params(arch, tp),
        vocab=vocab,
        hidden=h,
        tied=tied,
        prefix=fam.layers_prefix,
    )


def _opt_outer(arch: Architecture, wired: Wiring, vocab: int) -> tuple[int, int]:
    """OPT's embedding side (learned positions with ``OPTLearnedPositionalEmbedding``'s offset of
    2, ``project_in``) and head side (lm_head, ``project_out``, the final LayerNorm only with
    ``do_layer_norm_before``)."""
    h = arch.hidden_size
    proj = arch.word_embed_proj_dim or h
    offset = wired.learned_positions_offset or 0
    embedding = vocab * proj + (arch.max_position_embeddings + offset) * h
    head = 0 if wired.tied else vocab * proj
    if proj != h:
        embedding += proj * h
        head += h * proj
    if wired.final_norm:
        head += 2 * h
    return embedding, head


def _path(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _group(
    arch: Architecture,
    wired: Wiring,
    kind: LayerKind,
    indices: tuple[int, ...],
    tp: int,
    norm: int,
    experts: tuple[int, int] | None = None,
) -> LayerGroup:
    linears: list[Linear] = []
    vectors = 0
    if kind.mixer == "attention":
        vectors += _attention(arch, wired, tp, linears)
    elif kind.mixer == "mla":
        vectors += _mla(arch, tp, wired.attention_bias, linears)
    elif kind.mixer == "mamba":
        vectors += _mamba(arch, wired.family, tp, linears)
    if kind.ffn == "dense":
        _dense(arch, wired, tp, linears)
    elif kind.ffn == "moe":
        _moe(arch, wired.family, tp, linears, experts)
    both = kind.mixer != "none" and kind.ffn != "none"
    norms = wired.norms if both else wired.block_norms
    vectors += norms * norm + sum(lin.bias_params for lin in linears)
    return LayerGroup(kind=kind, indices=indices, linears=tuple(linears), vectors=vectors)


def _attention(arch: Architecture, wired: Wiring, tp: int, out: list[Linear]) -> int:
    """q/k/v/o (or fused qkv) into ``out``; returns the layer's extra vectors (q/k norms, sinks)."""
    part = wired.family.attention
    h = arch.hidden_size
    hd = arch.head_size
    q_heads = max(1, arch.num_attention_heads // tp)
    q_out = q_heads * hd
    kv_out = max(1, arch.kv_heads // tp) * hd
    qkv_bias, o_bias = wired.qkv_bias, wired.o_bias
    p = part.prefix
    if part.fused_qkv is not None:
        name = part.fused_qkv
        out.append(Linear("qkv", name, h, q_out + 2 * kv_out, 1, qkv_bias, True, _path(p, name)))
    else:
        out += [
            Linear("q", part.q, h, q_out, 1, qkv_bias, True, _path(p, part.q)),
            Linear("k", part.k, h, kv_out, 1, qkv_bias, True, _path(p, part.k)),
            Linear("v", part.v, h, kv_out, 1, qkv_bias, True, _path(p, part.v)),
        ]
    out.append(Linear("o", part.o, q_out, h, 1, o_bias, True, _path(p, part.o)))
    vectors = 0
    if wired.qk_norm == "head":
        vectors += 2 * hd
    elif wired.qk_norm == "width":
        vectors += (arch.num_attention_heads + arch.kv_heads) * hd
    if part.sinks:
        vectors += q_heads
    return vectors


def _mla(arch: Architecture, tp: int, attn_bias: bool, out: list[Linear]) -> int:
    """Multi-head latent attention (DeepSeek-V2/V3) into ``out``; returns its norm vectors."""
    assert arch.kv_lora_rank is not None and arch.qk_rope_head_dim is not None
    assert arch.qk_nope_head_dim is not None and arch.v_head_dim is not None
    h = arch.hidden_size
    heads = arch.num_attention_heads // tp
    rope, nope, v = arch.qk_rope_head_dim, arch.qk_nope_head_dim, arch.v_head_dim
    latent = arch.kv_lora_rank
    vectors = latent  # kv_a_layernorm
    q_lora = arch.q_lora_rank
    a = "self_attn"
    if q_lora is None:
        out.append(Linear("q", "q_proj", h, heads * (nope + rope), 1, False, True, f"{a}.q_proj"))
    else:
        out += [
            Linear("q_a", "q_a_proj", h, q_lora, 1, attn_bias, True, f"{a}.q_a_proj"),
            Linear(
                "q_b", "q_b_proj", q_lora, heads * (nope + rope), 1, False, True, f"{a}.q_b_proj"
            ),
        ]
        vectors += q_lora  # q_a_layernorm
    out += [
        Linear(
            "kv_a",
            "kv_a_proj_with_mqa",
            h,
            latent + rope,
            1,
            attn_bias,
            True,
            f"{a}.kv_a_proj_with_mqa",
        ),
        Linear("kv_b", "kv_b_proj", latent, heads * (nope + v), 1, False, True, f"{a}.kv_b_proj"),
        Linear("o", "o_proj", heads * v, h, 1, attn_bias, True, f"{a}.o_proj"),
    ]
    return vectors


def _mamba(arch: Architecture, fam: Family, tp: int, out: list[Linear]) -> int:
    """A Mamba mixer into ``out``; returns its non-matrix parameters (conv, A, D, norms)."""
    assert fam.mamba is not None
    h = arch.hidden_size
    p = fam.mamba.prefix
    if fam.mamba.version == 2:
        heads = config_value(arch, "mamba_num_heads") // tp
        inner = heads * config_value(arch, "mamba_head_dim")
        groups = config_value(arch, "n_groups")
        groups = groups // tp if groups % tp == 0 else groups
        state = config_value(arch, "ssm_state_size")
        conv_dim = inner + 2 * groups * state
        bias = bool(config_value(arch, "use_bias"))
        out += [
            Linear(
                "in_proj",
                "in_proj",
                h,
                2 * inner + 2 * groups * state + heads,
                1,
                bias,
                True,
                f"{p}.in_proj",
            ),
            Linear("out_proj", "out_proj", inner, h, 1, bias, True, f"{p}.out_proj"),
        ]
        conv = conv_dim * config_value(arch, "conv_kernel")
        conv += conv_dim if config_value(arch, "use_conv_bias") else 0
        return conv + 3 * heads + inner  # dt_bias, A_log, D; gated RMSNorm over inner
    inner = config_value(arch, "mamba_expand") * h // tp
    state = config_value(arch, "mamba_d_state")
    rank = arch.mamba_dt_rank or _ceil_div(h, 16)
    bias = bool(config_value(arch, "mamba_proj_bias"))
    out += [
        Linear("in_proj", "in_proj", h, 2 * inner, 1, bias, True, f"{p}.in_proj"),
        Linear("x_proj", "x_proj", inner, rank + 2 * state, 1, False, True, f"{p}.x_proj"),
        Linear("dt_proj", "dt_proj", rank, inner, 1, True, True, f"{p}.dt_proj"),
        Linear("out_proj", "out_proj", inner, h, 1, bias, True, f"{p}.out_proj"),
    ]
    conv = inner * config_value(arch, "mamba_d_conv")
    conv += inner if config_value(arch, "mamba_conv_bias") else 0
    # A_log [inner, state], D [inner]; Jamba's dt/B/C RMSNorms (replicated).
    return conv + inner * state + inner + rank + 2 * state


def _dense(arch: Architecture, wired: Wiring, tp: int, out: list[Linear]) -> None:
    part = wired.family.mlp
    width = getattr(arch, part.width_key, None) or arch.intermediate_size
    _gated(
        arch.hidden_size,
        _ceil_div(width, tp),
        part.prefix,
        part,
        wired.mlp_bias,
        out,
    )


def _gated(
    h: int, width: int, prefix: str, part: Mlp | Moe, bias: bool, out: list[Linear], copies: int = 1
) -> None:
    """Gate, up and down (or fused gate_up and down; or up and down when not gated)."""
    gated = not isinstance(part, Mlp) or part.gated
    fused = part.fused_gate_up
    if not gated:
        out.append(Linear("up", part.up, h, width, copies, bias, True, _path(prefix, part.up)))
    elif fused is not None:
        out.append(Linear("gate_up", fused, h, 2 * width, copies, bias, True, _path(prefix, fused)))
    else:
        out += [
            Linear("gate", part.gate, h, width, copies, bias, True, _path(prefix, part.gate)),
            Linear("up", part.up, h, width, copies, bias, True, _path(prefix, part.up)),
        ]
    out.append(Linear("down", part.down, width, h, copies, bias, True, _path(prefix, part.down)))


def _moe(
    arch: Architecture,
    fam: Family,
    tp: int,
    out: list[Linear],
    split: tuple[int, int] | None = None,
) -> None:
    part = fam.moe
    experts = arch.experts
    assert part is not None and experts is not None
    width_ranks, expert_ranks = split or (tp, 1)
    h = arch.hidden_size
    width = getattr(arch, part.width_key, None) or arch.intermediate_size
    p = part.prefix
    router = Linear("router", part.router, h, experts, 1, part.router_bias, False)
    out.append(router._replace(path=_path(p, part.router)))
    bias = part.expert_bias or arch.mlp_bias
    local = _ceil_div(experts, expert_ranks)
    _gated(h, _ceil_div(width, width_ranks), _path(p, part.experts_path), part, bias, out, local)
    shared_width = 0
    if part.shared == "qwen2":
        shared_width = arch.shared_expert_intermediate_size or 0
        name = "shared_expert"
    elif part.shared == "deepseek":
        shared_width = (arch.n_shared_experts or 0) * (arch.moe_intermediate_size or width)
        name = "shared_experts"
    elif part.shared == "llama4":
        shared_width = arch.intermediate_size
        name = "shared_expert"
    if shared_width:
        dense = Mlp()
        _gated(h, _ceil_div(shared_width, tp), _path(p, name), dense, arch.mlp_bias, out)
    if part.shared == "qwen2" and shared_width:
        gate = Linear("router", "shared_expert_gate", h, 1, 1, False, False)
        out.append(gate._replace(path=_path(p, "shared_expert_gate")))


def parameter_count(arch: Architecture) -> int:
    """Exact parameter count of ``arch`` (tied embeddings counted once), in parameters.

    Equals ``sum(p.numel() for p in model.parameters())`` of the ``transformers`` model built
    from the same config.json.
    """
    return layout(arch).total
