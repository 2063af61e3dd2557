"""A decoder-only transformer of a spec's architecture, with random weights. Needs torch.

The synthetic measurement builds this model directly on the target device in the target dtype
(every parameter is created by a factory call with ``device=`` and ``dtype=``, then initialised
in place there: no CPU copy, no download). Built on ``torch.device("meta")`` it allocates nothing
and :func:`parameter_count` gives the exact count, which the tests compare with
:mod:`gpu_sizer.budget`: the estimate and the probe agree by construction.

The parameter layout follows the Hugging Face ``transformers`` modelling files of each family
(``modeling_llama.py``, ``modeling_mistral.py``, ``modeling_mixtral.py``, ``modeling_qwen2.py``,
``modeling_qwen2_moe.py``, ``modeling_gemma.py``, ``modeling_gemma2.py``, ``modeling_phi3.py``,
``modeling_gpt_neox.py``, ``modeling_falcon.py``, ``modeling_opt.py``): the same tensors with the
same shapes and biases. Fused projections (Phi-3's ``qkv_proj``/``gate_up_proj``, GPT-NeoX and
Falcon's ``query_key_value``) are kept as separate q/k/v and gate/up modules of the same total
size, so LoRA ``target_modules`` names (q_proj, v_proj, ...) work for every family. MoE experts
are stacked ``[experts, out, in]`` parameters (as vLLM's fused-MoE layer stores them).

What is not reproduced, because it changes compute, not memory: rotary position encodings, the
exact activation functions of each family, Gemma's embedding scaling, logit soft-capping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.bias import causal_lower_right

from gpu_sizer.api import Architecture

__all__ = [
    "Layout",
    "Stage",
    "SyntheticDecoder",
    "build_model",
    "heaviest_stage",
    "layout_for",
    "parameter_count",
    "rank_architecture",
]

KvCache = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class Layout:
    """Per-family structure that changes parameter counts or activation memory."""

    rms_norm: bool = True
    norm_bias: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    gated_mlp: bool = True
    parallel_residual: bool = False
    norms_per_layer: int = 2
    final_norm: bool = True
    learned_positions_offset: int | None = None
    activation: str = "silu"
    tied: bool = False


#: transformers' config classes whose ``tie_word_embeddings`` / bias flags default to true.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "falcon", "opt"})
_BIASED_BY_DEFAULT = frozenset({"gpt_neox", "opt"})


def _flag(arch: Architecture, name: str, family_default: bool) -> bool:
    """A flag the spec may leave unset: then the family's config-class default applies."""
    if name in arch.model_fields_set:
        return bool(getattr(arch, name))
    return family_default


def layout_for(arch: Architecture) -> Layout:
    """The family layout of ``arch.model_type`` (transformers' defaults for that family)."""
    mt = arch.model_type
    tied = _flag(arch, "tie_word_embeddings", mt in _TIED_BY_DEFAULT)
    attn_bias = _flag(arch, "attention_bias", mt in _BIASED_BY_DEFAULT)
    if mt in ("qwen2", "qwen2_moe"):
        # Qwen2Attention: q/k/v always carry biases (modeling_qwen2.py).
        return Layout(qkv_bias=True, o_bias=attn_bias, mlp_bias=arch.mlp_bias, tied=tied)
    if mt == "gemma2":
        # Gemma2DecoderLayer: input, post-attention, pre- and post-feedforward RMSNorms.
        return Layout(norms_per_layer=4, activation="gelu", tied=tied)
    if mt == "gemma":
        return Layout(activation="gelu", tied=tied)
    if mt == "gpt_neox":
        # GPTNeoXLayer: LayerNorms with bias, query_key_value/dense biased per attention_bias
        # (default true), biased MLP, parallel residual.
        return Layout(
            rms_norm=False,
            norm_bias=True,
            qkv_bias=attn_bias,
            o_bias=attn_bias,
            mlp_bias=True,
            gated_mlp=False,
            parallel_residual=True,
            activation="gelu",
            tied=tied,
        )
    if mt == "falcon":
        # FalconDecoderLayer: one LayerNorm with parallel_attn (7B), ln_attn + ln_mlp with the
        # new decoder architecture (40B/180B), input + post-attention norms without parallel_attn;
        # config.json's `bias` (attentionBias/mlpBias here) on every linear.
        bias = attn_bias or arch.mlp_bias
        two = arch.new_decoder_architecture or not arch.parallel_attn
        return Layout(
            rms_norm=False,
            norm_bias=True,
            qkv_bias=bias,
            o_bias=bias,
            mlp_bias=bias,
            gated_mlp=False,
            parallel_residual=arch.new_decoder_architecture or arch.parallel_attn,
            norms_per_layer=2 if two else 1,
            activation="gelu",
            tied=tied,
        )
    if mt == "opt":
        # OPTDecoderLayer: every linear biased per enable_bias, LayerNorms with bias, fc1/fc2
        # ReLU, learned positions offset by 2, final LayerNorm only with do_layer_norm_before.
        return Layout(
            rms_norm=False,
            norm_bias=True,
            qkv_bias=attn_bias,
            o_bias=attn_bias,
            mlp_bias=attn_bias,
            gated_mlp=False,
            final_norm=arch.do_layer_norm_before,
            learned_positions_offset=2,
            activation="relu",
            tied=tied,
        )
    # llama, mistral, mixtral, phi3: RMSNorm, SwiGLU; Llama's attention_bias / mlp_bias flags.
    return Layout(qkv_bias=attn_bias, o_bias=attn_bias, mlp_bias=arch.mlp_bias, tied=tied)


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "relu": F.relu,
}


def _norm(layout: Layout, width: int, factory: dict[str, Any]) -> nn.Module:
    if layout.rms_norm:
        return nn.RMSNorm(width, **factory)
    return nn.LayerNorm(width, bias=layout.norm_bias, **factory)


class Attention(nn.Module):
    """Multi-head / grouped-query attention reading and writing a paged KV cache."""

    def __init__(self, arch: Architecture, layout: Layout, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = arch.num_attention_heads
        self.kv_heads = arch.kv_heads
        self.head_dim = arch.head_size
        h = arch.hidden_size
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=layout.qkv_bias, **factory)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=layout.qkv_bias, **factory)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=layout.qkv_bias, **factory)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=layout.o_bias, **factory)

    def forward(self, x: Tensor, cache: KvCache | None = None, start: int = 0) -> Tensor:
        b, t, _ = x.shape
        gqa = self.kv_heads != self.heads
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim)
        if cache is None:
            out = F.scaled_dot_product_attention(
                q, k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=gqa
            )
        else:
            cache_k, cache_v = cache  # [b, capacity, kv_heads, head_dim] views of the paged cache
            end = start + t
            cache_k[:, start:end] = k
            cache_v[:, start:end] = v
            keys = cache_k[:, :end].transpose(1, 2)
            values = cache_v[:, :end].transpose(1, 2)
            mask = None if t == 1 else causal_lower_right(t, end)
            if keys.dtype == q.dtype:
                out = F.scaled_dot_product_attention(
                    q, keys, values, attn_mask=mask, enable_gqa=gqa
                )
            else:
                # fp8 KV cache: dequantize one sequence's slice at a time (vLLM's kernels read
                # fp8 directly; this keeps the transient to one sequence's context).
                out = torch.cat(
                    [
                        F.scaled_dot_product_attention(
                            q[i : i + 1],
                            keys[i : i + 1].to(q.dtype),
                            values[i : i + 1].to(q.dtype),
                            attn_mask=mask,
                            enable_gqa=gqa,
                        )
                        for i in range(b)
                    ]
                )
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        result: Tensor = self.o_proj(out)
        return result


class Mlp(nn.Module):
    """SwiGLU (gate/up/down) or the classic two-layer MLP (fc1/fc2)."""

    def __init__(
        self, h: int, inner: int, layout: Layout, factory: dict[str, Any], *, bias: bool
    ) -> None:
        super().__init__()
        self.act = _ACTIVATIONS[layout.activation]
        self.gated = layout.gated_mlp
        if self.gated:
            self.gate_proj = nn.Linear(h, inner, bias=bias, **factory)
        self.up_proj = nn.Linear(h, inner, bias=bias, **factory)
        self.down_proj = nn.Linear(inner, h, bias=bias, **factory)

    def forward(self, x: Tensor) -> Tensor:
        if self.gated:
            inner = self.act(self.gate_proj(x)) * self.up_proj(x)
        else:
            inner = self.act(self.up_proj(x))
        result: Tensor = self.down_proj(inner)
        return result


class SparseMoe(nn.Module):
    """Top-k routed experts (Mixtral, Qwen2-MoE), optionally with Qwen2-MoE's shared expert."""

    def __init__(self, arch: Architecture, layout: Layout, factory: dict[str, Any]) -> None:
        super().__init__()
        assert arch.num_local_experts is not None and arch.num_experts_per_tok is not None
        h = arch.hidden_size
        experts = arch.num_local_experts
        inner = arch.moe_intermediate_size or arch.intermediate_size
        self.top_k = arch.num_experts_per_tok
        self.act = _ACTIVATIONS[layout.activation]
        self.gate = nn.Linear(h, experts, bias=False, **factory)
        self.w_gate = nn.Parameter(torch.empty(experts, inner, h, **factory))
        self.w_up = nn.Parameter(torch.empty(experts, inner, h, **factory))
        self.w_down = nn.Parameter(torch.empty(experts, h, inner, **factory))
        for weight in (self.w_gate, self.w_up, self.w_down):
            nn.init.uniform_(
                weight, -1 / math.sqrt(weight.shape[-1]), 1 / math.sqrt(weight.shape[-1])
            )
        self.b_gate: nn.Parameter | None = None
        self.b_up: nn.Parameter | None = None
        self.b_down: nn.Parameter | None = None
        if layout.mlp_bias:
            self.b_gate = nn.Parameter(torch.zeros(experts, inner, **factory))
            self.b_up = nn.Parameter(torch.zeros(experts, inner, **factory))
            self.b_down = nn.Parameter(torch.zeros(experts, h, **factory))
        self.shared_expert: Mlp | None = None
        self.shared_expert_gate: nn.Linear | None = None
        if arch.shared_expert_intermediate_size:
            self.shared_expert = Mlp(
                h, arch.shared_expert_intermediate_size, layout, factory, bias=layout.mlp_bias
            )
            self.shared_expert_gate = nn.Linear(h, 1, bias=False, **factory)

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights = torch.softmax(self.gate(flat).float(), dim=-1)
        top_w, top_i = torch.topk(weights, self.top_k, dim=-1)
        top_w = (top_w / top_w.sum(dim=-1, keepdim=True)).to(flat.dtype)
        out = torch.zeros_like(flat)
        for e in range(self.w_gate.shape[0]):
            rows, slot = (top_i == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            tokens = flat[rows]
            gate, up = tokens @ self.w_gate[e].T, tokens @ self.w_up[e].T
            if self.b_gate is not None and self.b_up is not None:
                gate, up = gate + self.b_gate[e], up + self.b_up[e]
            down = (self.act(gate) * up) @ self.w_down[e].T
            if self.b_down is not None:
                down = down + self.b_down[e]
            out.index_add_(0, rows, down * top_w[rows, slot, None])
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return out.view(shape)


class DecoderLayer(nn.Module):
    """Attention plus MLP (or MoE) with the family's norms and residual wiring."""

    def __init__(self, arch: Architecture, layout: Layout, factory: dict[str, Any]) -> None:
        super().__init__()
        h = arch.hidden_size
        self.layout = layout
        self.self_attn = Attention(arch, layout, factory)
        self.mlp: nn.Module
        if arch.num_local_experts:
            self.mlp = SparseMoe(arch, layout, factory)
        else:
            self.mlp = Mlp(h, arch.intermediate_size, layout, factory, bias=layout.mlp_bias)
        self.norms = nn.ModuleList(_norm(layout, h, factory) for _ in range(layout.norms_per_layer))

    def forward(self, x: Tensor, cache: KvCache | None = None, start: int = 0) -> Tensor:
        norms: list[Callable[[Tensor], Tensor]] = list(self.norms)
        if self.layout.parallel_residual:
            attn_in = norms[0](x)
            mlp_in = norms[1](x) if len(norms) > 1 else attn_in
            result: Tensor = x + self.self_attn(attn_in, cache, start) + self.mlp(mlp_in)
            return result
        attn = self.self_attn(norms[0](x), cache, start)
        if len(norms) == 4:  # Gemma-2: post-attention and pre/post-feedforward norms
            x = x + norms[1](attn)
            result = x + norms[3](self.mlp(norms[2](x)))
            return result
        x = x + attn
        result = x + self.mlp(norms[1](x))
        return result


@dataclass(frozen=True)
class Stage:
    """Which part of the model one pipeline stage holds (the whole model by default).

    vLLM and Megatron-LM: the first stage holds the embedding (and what precedes the first
    layer), the last the final norm and lm_head (a tied lm_head becomes a copy of the embedding
    there); layers are split over the stages.
    """

    layers: int | None = None
    first: bool = True
    last: bool = True


class SyntheticDecoder(nn.Module):
    """Embedding, decoder layers, final norm and LM head, laid out like the Hugging Face model.

    ``forward(inputs, caches, start, last_only)`` takes token ids ``[batch, t]`` (or, on a
    pipeline stage without the embedding, hidden states ``[batch, t, hidden]``) and returns logits
    ``[batch, t or 1, vocab]`` in the model dtype (hidden states on a stage without lm_head); with
    ``caches`` (one (K, V) pair of views per layer) attention reads and writes the KV cache at
    positions ``start .. start + t``.
    """

    def __init__(
        self,
        arch: Architecture,
        dtype: torch.dtype,
        device: torch.device,
        stage: Stage | None = None,
    ) -> None:
        super().__init__()
        stage = stage or Stage()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        layout = layout_for(arch)
        h = arch.hidden_size
        embed_dim = arch.word_embed_proj_dim or h
        self.arch = arch
        self.stage = stage
        self.checkpointing = False
        self.embed_tokens: nn.Embedding | None = None
        self.embed_positions: nn.Embedding | None = None
        self.project_in: nn.Linear | None = None
        self.project_out: nn.Linear | None = None
        self.norm: nn.Module | None = None
        self.lm_head: nn.Linear | None = None
        if stage.first:
            self.embed_tokens = nn.Embedding(arch.vocab_size, embed_dim, **factory)
            if layout.learned_positions_offset is not None:
                self.embed_positions = nn.Embedding(
                    arch.max_position_embeddings + layout.learned_positions_offset, h, **factory
                )
            if embed_dim != h:  # OPT-350m: word_embed_proj_dim 512 < hidden_size 1024
                self.project_in = nn.Linear(embed_dim, h, bias=False, **factory)
        layers = arch.num_hidden_layers if stage.layers is None else stage.layers
        self.layers = nn.ModuleList(DecoderLayer(arch, layout, factory) for _ in range(layers))
        if stage.last:
            self.norm = _norm(layout, h, factory) if layout.final_norm else None
            if embed_dim != h:
                self.project_out = nn.Linear(h, embed_dim, bias=False, **factory)
            self.lm_head = nn.Linear(embed_dim, arch.vocab_size, bias=False, **factory)
            if layout.tied and self.embed_tokens is not None:
                self.lm_head.weight = self.embed_tokens.weight

    def make_inputs(self, batch: int, t: int, device: torch.device) -> Tensor:
        """Random inputs for one forward: token ids, or hidden states from the previous stage."""
        if self.embed_tokens is not None:
            return torch.randint(0, self.arch.vocab_size, (batch, t), device=device)
        dtype = next(self.parameters()).dtype
        return torch.randn(batch, t, self.arch.hidden_size, device=device, dtype=dtype)

    def forward(
        self,
        inputs: Tensor,
        caches: list[KvCache] | None = None,
        start: int = 0,
        last_only: bool = False,
    ) -> Tensor:
        x = inputs
        if self.embed_tokens is not None:
            x = self.embed_tokens(inputs)
            if self.project_in is not None:
                x = self.project_in(x)
            if self.embed_positions is not None:
                positions = torch.arange(start, start + inputs.shape[1], device=inputs.device)
                x = x + self.embed_positions(
                    positions.clamp(max=self.embed_positions.num_embeddings - 1)
                )
        for i, layer in enumerate(self.layers):
            cache = None if caches is None else caches[i]
            if self.checkpointing and self.training:
                from torch.utils.checkpoint import checkpoint

                x = checkpoint(layer, x, cache, start, use_reentrant=False)
            else:
                x = layer(x, cache, start)
        if self.lm_head is None:
            return x
        if last_only:
            x = x[:, -1:]
        if self.norm is not None:
            x = self.norm(x)
        if self.project_out is not None:
            x = self.project_out(x)
        logits: Tensor = self.lm_head(x)
        return logits


def heaviest_stage(arch: Architecture, pp: int) -> Stage:
    """The most loaded of ``pp`` pipeline stages: ``ceil(layers / pp)`` layers plus the larger
    end (the first stage's embedding or the last stage's lm_head and final norm), counted on the
    meta device. One stage is the whole model."""
    if pp == 1:
        return Stage()
    layers = -(-arch.num_hidden_layers // pp)
    meta = torch.device("meta")
    first = Stage(layers=layers, first=True, last=False)
    last = Stage(layers=layers, first=False, last=True)
    sizes = {
        stage: parameter_count(SyntheticDecoder(arch, torch.bfloat16, meta, stage))
        for stage in (first, last)
    }
    return max(sizes, key=lambda stage: sizes[stage])


def rank_architecture(arch: Architecture, tp: int) -> Architecture:
    """The shape one tensor-parallel rank holds, as a (smaller) architecture of its own.

    vLLM's Megatron-style sharding (Shoeybi et al. 2019, section 3; vLLM
    ``ColumnParallelLinear``/``RowParallelLinear``/``QKVParallelLinear``/
    ``VocabParallelEmbedding``/``FusedMoE``): query heads, the MLP and expert widths and the
    vocabulary split ``tp`` ways; KV heads split, or are replicated when there are fewer than
    ``tp``; norms, routers, learned positions and row-parallel biases stay whole. The head width
    is kept, so the rank's attention is the same per head.
    """
    if tp == 1:
        return arch

    def split(width: int | None) -> int | None:
        return None if width is None else -(-width // tp)

    return arch.model_copy(
        update={
            "num_attention_heads": arch.num_attention_heads // tp,
            "num_key_value_heads": max(1, arch.kv_heads // tp),
            "head_dim": arch.head_size,
            "intermediate_size": split(arch.intermediate_size),
            "vocab_size": split(arch.vocab_size),
            "moe_intermediate_size": split(arch.moe_intermediate_size),
            "shared_expert_intermediate_size": split(arch.shared_expert_intermediate_size),
        }
    )


def build_model(
    arch: Architecture, dtype: torch.dtype, device: torch.device, stage: Stage | None = None
) -> SyntheticDecoder:
    """The synthetic model (or one pipeline ``stage`` of it), allocated and randomly
    initialised on ``device`` in ``dtype``.

    On ``torch.device("meta")`` nothing is allocated (shapes only).
    """
    with torch.no_grad():
        return SyntheticDecoder(arch, dtype, device, stage)


def parameter_count(model: nn.Module) -> int:
    """Distinct parameters (a tied LM head counts once, as in ``model.num_parameters()``)."""
    return sum(p.numel() for p in model.parameters())
