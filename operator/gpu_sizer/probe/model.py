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

The newer families are built from the same part declarations the estimate uses
(:mod:`gpu_sizer.budget.families`) and the same per-layer plan
(:func:`gpu_sizer.budget.params.layer_plan`): q/k norms (Qwen3, Gemma 3, OLMo 2), attention sinks
(gpt-oss, one logit per head joined to the softmax), multi-head latent attention (DeepSeek: the
cache holds the ``kvLoraRank + qkRopeHeadDim`` latent per token, attention runs in the latent
space as vLLM's MLA decode does), MoE with router and expert biases and shared experts, dense and
MoE layers as the config interleaves them, Mamba-2 and Mamba-1 mixers with a per-sequence conv
and SSM state (the scan is a single state update per forward: the same tensors, not the same
arithmetic), and vision encoders with their stem and projector.

What is not reproduced, because it changes compute, not memory: rotary position encodings, the
exact activation functions of each family, Gemma's embedding scaling, logit soft-capping, the
Mamba selective scan's recurrence, sliding-window and chunked masks (every layer attends to the
whole cache: the cache is allocated for every position, see ``probe/inference.py``).
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
from gpu_sizer.budget.families import FAMILIES
from gpu_sizer.budget.params import LayerKind, config_value, layer_plan, stage_layers
from gpu_sizer.budget.vision import encoder_params

__all__ = [
    "Layout",
    "Stage",
    "SyntheticDecoder",
    "build_model",
    "causal_lm_loss",
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
    #: per-head q/k RMSNorms (``head``) or over the whole q and k width (``width``, OLMo 2)
    qk_norm: str = "none"
    sinks: bool = False
    #: norms of a block that has only a mixer or only an MLP (Nemotron-H)
    block_norms: int = 1
    router_bias: bool = False
    expert_bias: bool = False
    #: ``none``, ``qwen2``, ``deepseek`` or ``llama4`` (see ``budget.families.Moe``)
    shared: str = "none"
    dense_width_key: str = "intermediate_size"
    moe_width_key: str = "moe_intermediate_size"
    mamba: int = 0


#: transformers' config classes whose ``tie_word_embeddings`` / bias flags default to true.
_TIED_BY_DEFAULT = frozenset(n for n, f in FAMILIES.items() if f.tied)
_BIASED_BY_DEFAULT = frozenset(n for n, f in FAMILIES.items() if f.attention_bias)


def _flag(arch: Architecture, name: str, family_default: bool) -> bool:
    """A flag the spec may leave unset: then the family's config-class default applies."""
    if name in arch.model_fields_set and getattr(arch, name) is not None:
        return bool(getattr(arch, name))
    return family_default


def layout_for(arch: Architecture) -> Layout:
    """The family layout of ``arch.model_type`` (transformers' defaults for that family)."""
    mt = arch.model_type
    fam = FAMILIES[mt]
    tied = _flag(arch, "tie_word_embeddings", mt in _TIED_BY_DEFAULT)
    attn_bias = _flag(arch, "attention_bias", mt in _BIASED_BY_DEFAULT)
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
    # The declared families: RMSNorm, gated or plain MLP, the declared biases and norms.
    part = fam.attention
    qkv_bias = part.qkv_bias == "always" or (part.qkv_bias == "flag" and attn_bias)
    o_bias = part.o_bias == "always" or (part.o_bias == "flag" and attn_bias)
    if mt == "nemotron_h":
        qkv_bias = o_bias = False
    qk_norm = part.qk_norm
    if qk_norm == "head_if_flag":
        qk_norm = "head" if arch.use_qk_norm else "none"
    moe = fam.moe
    return Layout(
        qkv_bias=qkv_bias,
        o_bias=o_bias,
        mlp_bias=arch.mlp_bias,
        gated_mlp=fam.mlp.gated,
        norms_per_layer=fam.norms,
        activation="gelu" if mt.startswith("gemma") else "relu2" if mt == "nemotron_h" else "silu",
        tied=tied,
        qk_norm=qk_norm,
        sinks=part.sinks,
        block_norms=fam.block_norms,
        router_bias=moe is not None and moe.router_bias,
        expert_bias=moe is not None and moe.expert_bias,
        shared=moe.shared if moe is not None else "none",
        dense_width_key=fam.mlp.width_key,
        moe_width_key=moe.width_key if moe is not None else "moe_intermediate_size",
        mamba=fam.mamba.version if fam.mamba is not None else 0,
    )


def _relu2(x: Tensor) -> Tensor:
    return torch.square(F.relu(x))


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "relu": F.relu,
    "relu2": _relu2,
}


def _norm(layout: Layout, width: int, factory: dict[str, Any]) -> nn.Module:
    if layout.rms_norm:
        return nn.RMSNorm(width, **factory)
    return nn.LayerNorm(width, bias=layout.norm_bias, **factory)


def _attend(
    q: Tensor, keys: Tensor, values: Tensor, mask: Any, gqa: bool, dtype: torch.dtype
) -> Tensor:
    """SDPA over the cached keys and values; an fp8 cache is dequantized one sequence at a time
    (vLLM's kernels read fp8 directly; this keeps the transient to one sequence's context)."""
    if keys.dtype == dtype:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=gqa)
    return torch.cat(
        [
            F.scaled_dot_product_attention(
                q[i : i + 1],
                keys[i : i + 1].to(dtype),
                values[i : i + 1].to(dtype),
                attn_mask=mask,
                enable_gqa=gqa,
            )
            for i in range(q.shape[0])
        ]
    )


class Attention(nn.Module):
    """Multi-head / grouped-query attention reading and writing a paged KV cache.

    Optional q/k RMSNorms (per head, or over the whole q and k width as OLMo 2 does: vLLM keeps
    that full-width norm on every rank, so ``tp`` gives its width) and gpt-oss's attention sinks
    (one parameter per head; here they scale each head's output, the same tensors without the
    log-sum-exp correction).
    """

    def __init__(
        self, arch: Architecture, layout: Layout, factory: dict[str, Any], tp: int = 1
    ) -> None:
        super().__init__()
        self.heads = arch.num_attention_heads
        self.kv_heads = arch.kv_heads
        self.head_dim = arch.head_size
        h = arch.hidden_size
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=layout.qkv_bias, **factory)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=layout.qkv_bias, **factory)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=layout.qkv_bias, **factory)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=layout.o_bias, **factory)
        self.q_norm: nn.Module | None = None
        self.k_norm: nn.Module | None = None
        self.full_width_norm = layout.qk_norm == "width"
        if layout.qk_norm == "head":
            self.q_norm = nn.RMSNorm(self.head_dim, **factory)
            self.k_norm = nn.RMSNorm(self.head_dim, **factory)
        elif self.full_width_norm:
            self.q_norm = nn.RMSNorm(self.heads * tp * self.head_dim, **factory)
            self.k_norm = nn.RMSNorm(self.kv_heads * tp * self.head_dim, **factory)
        self.sinks = nn.Parameter(torch.zeros(self.heads, **factory)) if layout.sinks else None

    def _normed(self, x: Tensor, norm: nn.Module | None, heads: int) -> Tensor:
        if norm is None:
            return x
        if self.full_width_norm:  # this rank's share of the gathered q or k, normalised
            width = heads * self.head_dim
            size = sum(p.numel() for p in norm.parameters())
            full = x.repeat(1, 1, size // width)
            return norm(full)[..., :width]  # type: ignore[no-any-return]
        shaped = x.view(*x.shape[:-1], heads, self.head_dim)
        return norm(shaped).flatten(-2)  # type: ignore[no-any-return]

    def forward(self, x: Tensor, cache: KvCache | None = None, start: int = 0) -> Tensor:
        b, t, _ = x.shape
        gqa = self.kv_heads != self.heads
        q = self._normed(self.q_proj(x), self.q_norm, self.heads)
        k = self._normed(self.k_proj(x), self.k_norm, self.kv_heads)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.head_dim)
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
            out = _attend(q, keys, values, mask, gqa, q.dtype)
        if self.sinks is not None:
            out = out * torch.sigmoid(self.sinks)[None, :, None, None].to(out.dtype)
        out = out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        result: Tensor = self.o_proj(out)
        return result


class MlaAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2/V3, ``DeepseekV3Attention``'s tensors).

    The cache holds one ``kvLoraRank + qkRopeHeadDim`` latent per token (vLLM ``MLAAttention``);
    attention runs in the latent space with ``kv_b_proj`` absorbed into the query and the output
    (vLLM's MLA decode path), so no per-head keys or values are ever materialised.
    """

    def __init__(self, arch: Architecture, layout: Layout, factory: dict[str, Any]) -> None:
        super().__init__()
        assert arch.kv_lora_rank is not None and arch.qk_rope_head_dim is not None
        assert arch.qk_nope_head_dim is not None and arch.v_head_dim is not None
        h = arch.hidden_size
        self.heads = arch.num_attention_heads
        self.nope, self.rope = arch.qk_nope_head_dim, arch.qk_rope_head_dim
        self.v_dim, self.latent = arch.v_head_dim, arch.kv_lora_rank
        q_width = self.heads * (self.nope + self.rope)
        self.q_a_proj: nn.Linear | None = None
        self.q_a_layernorm: nn.RMSNorm | None = None
        self.q_b_proj: nn.Linear | None = None
        self.q_proj: nn.Linear | None = None
        if arch.q_lora_rank is not None:
            rank = arch.q_lora_rank
            self.q_a_proj = nn.Linear(h, rank, bias=layout.qkv_bias, **factory)
            self.q_a_layernorm = nn.RMSNorm(rank, **factory)
            self.q_b_proj = nn.Linear(rank, q_width, bias=False, **factory)
        else:
            self.q_proj = nn.Linear(h, q_width, bias=False, **factory)
        self.kv_a_proj_with_mqa = nn.Linear(
            h, self.latent + self.rope, bias=layout.qkv_bias, **factory
        )
        self.kv_a_layernorm = nn.RMSNorm(self.latent, **factory)
        self.kv_b_proj = nn.Linear(
            self.latent, self.heads * (self.nope + self.v_dim), bias=False, **factory
        )
        self.o_proj = nn.Linear(self.heads * self.v_dim, h, bias=layout.o_bias, **factory)

    def forward(self, x: Tensor, cache: KvCache | None = None, start: int = 0) -> Tensor:
        b, t, _ = x.shape
        if self.q_proj is not None:
            q = self.q_proj(x)
        else:
            assert self.q_a_proj and self.q_a_layernorm and self.q_b_proj
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, t, self.heads, self.nope + self.rope)
        kv = self.kv_a_proj_with_mqa(x)
        latent = self.kv_a_layernorm(kv[..., : self.latent])
        entry = torch.cat([latent, kv[..., self.latent :]], dim=-1)  # [b, t, latent + rope]
        w = self.kv_b_proj.weight.view(self.heads, self.nope + self.v_dim, self.latent)
        q_latent = torch.einsum("bthn,hnl->bthl", q[..., : self.nope], w[:, : self.nope])
        query = torch.cat([q_latent, q[..., self.nope :]], dim=-1).transpose(1, 2)
        if cache is None:
            keys, mask, causal = entry, None, True
        else:
            end = start + t
            cache[0][:, start:end] = entry.to(cache[0].dtype)
            keys = cache[0][:, :end]
            mask, causal = (None if t == 1 else causal_lower_right(t, end)), False
        keys = keys.unsqueeze(1)  # one latent "head" shared by all heads
        values = keys[..., : self.latent]
        if causal:
            out = F.scaled_dot_product_attention(
                query, keys, values, is_causal=True, enable_gqa=True
            )
        else:
            out = _attend(query, keys, values, mask, True, query.dtype)
        out = torch.einsum("bhtl,hvl->bthv", out, w[:, self.nope :])
        result: Tensor = self.o_proj(out.reshape(b, t, self.heads * self.v_dim))
        return result


def _depthwise_conv(channels: int, kernel: int, bias: bool, factory: dict[str, Any]) -> nn.Conv1d:
    """Mamba's causal depthwise conv1d (weight ``[channels, 1, kernel]``)."""
    return nn.Conv1d(
        channels, channels, kernel, groups=channels, padding=kernel - 1, bias=bias, **factory
    )


def _causal_conv(conv: nn.Conv1d, x: Tensor, state: Tensor | None) -> Tensor:
    """SiLU of the causal conv over ``x`` ``[b, t, channels]``; with a ``state`` ``[b, channels,
    kernel - 1]`` the last inputs are kept there for the next step."""
    t = x.shape[1]
    if state is not None:
        window = torch.cat([state.to(x.dtype), x.transpose(1, 2)], dim=-1)
        state.copy_(window[..., -state.shape[-1] :])
    return F.silu(conv(x.transpose(1, 2))[..., :t].transpose(1, 2))


class Mamba2Mixer(nn.Module):
    """Mamba-2 (Nemotron-H, ``NemotronHMamba2Mixer``'s tensors) with a per-sequence state.

    One rank of ``tp``: heads, inner width and groups split (one group per rank replicated when
    groups do not divide, as vLLM's ``MambaMixer2``). The scan is one state update per forward
    (the selective scan's tensors, not its recurrence): memory, not arithmetic, is measured.
    """

    def __init__(self, arch: Architecture, factory: dict[str, Any], tp: int) -> None:
        super().__init__()
        h = arch.hidden_size
        self.heads = config_value(arch, "mamba_num_heads") // tp
        self.head_dim = config_value(arch, "mamba_head_dim")
        groups = config_value(arch, "n_groups")
        self.groups = groups // tp if groups % tp == 0 else groups
        self.state = config_value(arch, "ssm_state_size")
        self.inner = self.heads * self.head_dim
        self.conv_dim = self.inner + 2 * self.groups * self.state
        kernel = config_value(arch, "conv_kernel")
        bias = bool(config_value(arch, "use_bias"))
        self.in_proj = nn.Linear(h, self.inner + self.conv_dim + self.heads, bias=bias, **factory)
        conv_bias = bool(config_value(arch, "use_conv_bias"))
        self.conv1d = _depthwise_conv(self.conv_dim, kernel, conv_bias, factory)
        self.dt_bias = nn.Parameter(torch.zeros(self.heads, **factory))
        self.A_log = nn.Parameter(torch.zeros(self.heads, **factory))
        self.D = nn.Parameter(torch.ones(self.heads, **factory))
        self.norm = nn.RMSNorm(self.inner, **factory)
        self.out_proj = nn.Linear(self.inner, h, bias=bias, **factory)

    def forward(self, x: Tensor, cache: KvCache | None = None, start: int = 0) -> Tensor:
        b, t, _ = x.shape
        z, xbc, dt = self.in_proj(x).split([self.inner, self.conv_dim, self.heads], dim=-1)
        xbc = _causal_conv(self.conv1d, xbc, None if cache is None else cache[0])
        gs = self.groups * self.state
        xs, bmat, cmat = torch.split(xbc, [self.inner, gs, gs], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        per_group = self.heads // self.groups
        xs = xs.reshape(b, t, self.groups, per_group, self.head_dim)
        bmat = bmat.reshape(b, t, self.groups, self.state)
        cmat = cmat.reshape(b, t, self.groups, self.state)
        weighted = xs * dt.reshape(b, t, self.groups, per_group, 1)
        update = torch.einsum("btgs,btgpd->bgpds", bmat, weighted)
        if cache is not None:
            ssm = cache[1]  # [b, heads, head_dim, state]
            decay = torch.exp(-torch.exp(self.A_log) * dt.sum(1)).to(ssm.dtype)
            state = ssm * decay[:, :, None, None] + update.reshape(ssm.shape).to(ssm.dtype)
            ssm.copy_(state)
            update = state.reshape(update.shape).to(update.dtype)
        y = torch.einsum("btgs,bgpds->btgpd", cmat, update).reshape(b, t, self.inner)
        y = y + (xs * self.D.reshape(self.groups, per_group, 1)).reshape(b, t, self.inner)
        result: Tensor = self.out_proj(self.norm(y * F.silu(z)))
        return result


class Mamba1Mixer(nn.Module):
    """Mamba-1 with Jamba's dt/B/C RMSNorms (``JambaMambaMixer``'s tensors), one rank of ``tp``.

    The scan is one state update per forward, as in :class:`Mamba2Mixer`.
    """

    def __init__(self, arch: Architecture, factory: dict[str, Any], tp: int) -> None:
        super().__init__()
        h = arch.hidden_size
        self.inner = config_value(arch, "mamba_expand") * h // tp
        self.state = config_value(arch, "mamba_d_state")
        self.rank = arch.mamba_dt_rank or -(-h // 16)
        kernel = config_value(arch, "mamba_d_conv")
        bias = bool(config_value(arch, "mamba_proj_bias"))
        self.in_proj = nn.Linear(h, 2 * self.inner, bias=bias, **factory)
        conv_bias = bool(config_value(arch, "mamba_conv_bias"))
        self.conv1d = _depthwise_conv(self.inner, kernel, conv_bias, factory)
        self.x_proj = nn.Linear(self.inner, self.rank + 2 * self.state, bias=False, **factory)
        self.dt_proj = nn.Linear(self.rank, self.inner, bias=True, **factory)
        self.A_log = nn.Parameter(torch.zeros(self.inner, self.state, **factory))
        self.D = nn.Parameter(torch.ones(self.inner, **factory))
        self.out_proj = nn.Linear(self.inner, h, bias=bias, **factory)
        self.dt_layernorm = nn.RMSNorm(self.rank, **factory)
        self.b_layernorm = nn.RMSNorm(self.state, **factory)
        self.c_layernorm = nn.RMSNorm(self.state, **factory)

    def forward(self, x: Tensor, cache: KvCache | None = None, start: int = 0) -> Tensor:
        xs, z = self.in_proj(x).chunk(2, dim=-1)
        xs = _causal_conv(self.conv1d, xs, None if cache is None else cache[0])
        dt, bmat, cmat = self.x_proj(xs).split([self.rank, self.state, self.state], dim=-1)
        dt = F.softplus(self.dt_proj(self.dt_layernorm(dt)))
        bmat, cmat = self.b_layernorm(bmat), self.c_layernorm(cmat)
        update = torch.einsum("bti,bts->bis", xs * dt, bmat)
        if cache is not None:
            ssm = cache[1]  # [b, inner, state]
            decay = torch.exp(-torch.exp(self.A_log) * dt.sum(1)[..., None]).to(ssm.dtype)
            ssm.copy_(ssm * decay + update.to(ssm.dtype))
            update = ssm.to(update.dtype)
        y = torch.einsum("bts,bis->bti", cmat, update) + xs * self.D
        result: Tensor = self.out_proj(y * F.silu(z))
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
    """Top-k routed experts with the family's router and shared experts.

    Mixtral and Qwen-MoE routers without bias, gpt-oss's biased router and expert biases,
    Qwen2-MoE's gated ``shared_expert``, DeepSeek/GLM's ``shared_experts`` of ``nSharedExperts x
    moeIntermediateSize`` and Llama 4's ``shared_expert`` of ``intermediateSize``.
    """

    def __init__(self, arch: Architecture, layout: Layout, factory: dict[str, Any]) -> None:
        super().__init__()
        assert arch.experts is not None and arch.num_experts_per_tok is not None
        h = arch.hidden_size
        experts = arch.experts
        inner = getattr(arch, layout.moe_width_key, None) or arch.intermediate_size
        self.top_k = arch.num_experts_per_tok
        self.act = _ACTIVATIONS[layout.activation]
        self.gate = nn.Linear(h, experts, bias=layout.router_bias, **factory)
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
        if layout.mlp_bias or layout.expert_bias:
            self.b_gate = nn.Parameter(torch.zeros(experts, inner, **factory))
            self.b_up = nn.Parameter(torch.zeros(experts, inner, **factory))
            self.b_down = nn.Parameter(torch.zeros(experts, h, **factory))
        self.shared_expert: Mlp | None = None
        self.shared_expert_gate: nn.Linear | None = None
        gated = Layout(activation=layout.activation)
        shared = 0
        if layout.shared == "qwen2":
            shared = arch.shared_expert_intermediate_size or 0
        elif layout.shared == "deepseek":
            shared = (arch.n_shared_experts or 0) * (arch.moe_intermediate_size or inner)
        elif layout.shared == "llama4":
            shared = arch.intermediate_size
        if shared:
            self.shared_expert = Mlp(h, shared, gated, factory, bias=arch.mlp_bias)
        if layout.shared == "qwen2" and shared:
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
        if self.shared_expert is not None:
            shared = self.shared_expert(flat)
            if self.shared_expert_gate is not None:
                shared = torch.sigmoid(self.shared_expert_gate(flat)) * shared
            out = out + shared
        return out.view(shape)


class DecoderLayer(nn.Module):
    """A token mixer (attention, MLA, Mamba or none) and a feed-forward (MLP, MoE or none), with
    the family's norms and residual wiring."""

    def __init__(
        self,
        arch: Architecture,
        layout: Layout,
        factory: dict[str, Any],
        kind: LayerKind | None = None,
        tp: int = 1,
    ) -> None:
        super().__init__()
        h = arch.hidden_size
        kind = kind or LayerKind("attention", "full", "moe" if arch.experts else "dense")
        self.layout = layout
        self.kind = kind
        self.self_attn: nn.Module | None = None
        if kind.mixer == "attention":
            self.self_attn = Attention(arch, layout, factory, tp)
        elif kind.mixer == "mla":
            self.self_attn = MlaAttention(arch, layout, factory)
        elif kind.mixer == "mamba":
            mixer = Mamba2Mixer if layout.mamba == 2 else Mamba1Mixer
            self.self_attn = mixer(arch, factory, tp)
        self.mlp: nn.Module | None = None
        if kind.ffn == "moe":
            self.mlp = SparseMoe(arch, layout, factory)
        elif kind.ffn == "dense":
            width = getattr(arch, layout.dense_width_key, None) or arch.intermediate_size
            self.mlp = Mlp(h, width, layout, factory, bias=layout.mlp_bias)
        both = self.self_attn is not None and self.mlp is not None
        count = layout.norms_per_layer if both else layout.block_norms
        self.norms = nn.ModuleList(_norm(layout, h, factory) for _ in range(count))

    def forward(self, x: Tensor, cache: KvCache | None = None, start: int = 0) -> Tensor:
        norms: list[Callable[[Tensor], Tensor]] = list(self.norms)
        result: Tensor
        if self.self_attn is None or self.mlp is None:
            part = self.mlp if self.self_attn is None else None
            if part is not None:
                result = x + part(norms[0](x))
            else:
                assert self.self_attn is not None
                result = x + self.self_attn(norms[0](x), cache, start)
            return result
        if self.layout.parallel_residual:
            attn_in = norms[0](x)
            mlp_in = norms[1](x) if len(norms) > 1 else attn_in
            result = x + self.self_attn(attn_in, cache, start) + self.mlp(mlp_in)
            return result
        attn = self.self_attn(norms[0](x), cache, start)
        if len(norms) == 4:  # Gemma 2/3: post-attention and pre/post-feedforward norms
            x = x + norms[1](attn)
            result = x + norms[3](self.mlp(norms[2](x)))
            return result
        x = x + attn
        result = x + self.mlp(norms[1](x))
        return result


class VisionTower(nn.Module):
    """A vision-language model's image encoder and projector, one rank of ``tp``.

    The tensors of :mod:`gpu_sizer.budget.vision`'s encoders: a patch embedding (a linear over
    flattened patches, the same elements as the Conv2d/Conv3d), learned positions where the
    encoder has them, pre-norm blocks (q/k/v/o and a gated or plain MLP, split over ``tp`` as vLLM
    does) and the projector to the language model's width. ``forward`` encodes a batch of
    flattened patches ``[patches, patch_elements]`` with full attention over them.
    """

    def __init__(self, arch: Architecture, factory: dict[str, Any], tp: int) -> None:
        super().__init__()
        vc = arch.vision_config
        assert vc is not None
        kind = vc.model_type
        h, p = vc.hidden_size, vc.patch_size
        text = arch.hidden_size
        layer_norm = kind in ("siglip_vision_model", "llama4_vision_model")
        self.gated = kind in ("pixtral", "qwen2_5_vl")
        bias = kind != "pixtral"
        frames = (vc.temporal_patch_size or 2) if kind == "qwen2_5_vl" else 1
        self.patch_elements = vc.channels * p * p * frames
        self.patch_embed = nn.Linear(
            self.patch_elements, h, bias=kind == "siglip_vision_model", **factory
        )
        self.heads = vc.heads // tp
        width = self.heads * (vc.head_dim or h // vc.heads)
        inner = -(-vc.intermediate_size // tp)

        def norm() -> nn.Module:
            return nn.LayerNorm(h, **factory) if layer_norm else nn.RMSNorm(h, **factory)

        self.blocks: list[nn.ModuleDict] = []
        blocks = nn.ModuleList()
        for _ in range(vc.layers):
            block = nn.ModuleDict(
                {
                    "norm1": norm(),
                    "norm2": norm(),
                    "q": nn.Linear(h, width, bias=bias, **factory),
                    "k": nn.Linear(h, width, bias=bias, **factory),
                    "v": nn.Linear(h, width, bias=bias, **factory),
                    "o": nn.Linear(width, h, bias=bias, **factory),
                    "up": nn.Linear(h, inner, bias=bias, **factory),
                    "down": nn.Linear(inner, h, bias=bias, **factory),
                }
            )
            if self.gated:
                block["gate"] = nn.Linear(h, inner, bias=bias, **factory)
            blocks.append(block)
            self.blocks.append(block)
        self.encoder_blocks = blocks
        self.projector = nn.Linear(h, text, bias=False, **factory)
        # Learned positions, the stem's and projector's norms, Qwen2.5-VL's merger and Llama 4's
        # pixel-shuffle adapter: kept as one tensor of the size the estimate counts (they hold
        # weights; their activations are a small share of the encoder's).
        built = sum(t.numel() for t in self.parameters())
        self.stem_and_projector_rest = nn.Parameter(
            torch.zeros(encoder_params(arch, tp) - built, **factory)
        )

    def forward(self, patches: Tensor) -> Tensor:
        x = self.patch_embed(patches).unsqueeze(0)
        n = x.shape[1]
        for block in self.blocks:
            y = block["norm1"](x)
            q = block["q"](y).view(1, n, self.heads, -1).transpose(1, 2)
            k = block["k"](y).view(1, n, self.heads, -1).transpose(1, 2)
            v = block["v"](y).view(1, n, self.heads, -1).transpose(1, 2)
            attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, n, -1)
            x = x + block["o"](attn)
            y = block["norm2"](x)
            up = block["up"](y)
            inner = F.silu(block["gate"](y)) * up if self.gated else F.gelu(up)
            x = x + block["down"](inner)
        result: Tensor = self.projector(x[0])
        return result


@dataclass(frozen=True)
class Stage:
    """Which part of the model one pipeline stage holds (the whole model by default).

    vLLM and Megatron-LM: the first stage holds the embedding (and what precedes the first
    layer), the last the final norm and lm_head (a tied lm_head becomes a copy of the embedding
    there); layers are split over the stages (``start`` is the stage's first layer index). A
    vision encoder is built on every stage, as vLLM does.
    """

    layers: int | None = None
    first: bool = True
    last: bool = True
    start: int = 0


class SyntheticDecoder(nn.Module):
    """Embedding, decoder layers, final norm and LM head, laid out like the Hugging Face model.

    ``forward(inputs, caches, start, last_only)`` takes token ids ``[batch, t]`` (or, on a
    pipeline stage without the embedding, hidden states ``[batch, t, hidden]``) and returns logits
    ``[batch, t or 1, vocab]`` in the model dtype (hidden states on a stage without lm_head), or,
    given ``labels``, the training loss computed the way :attr:`loss` says; with ``caches`` (one
    pair of views per layer: K and V, MLA's latent twice, or a Mamba layer's conv and SSM state)
    the layers read and write the cache at positions ``start .. start + t``.

    ``tp`` is the tensor-parallel degree ``arch`` (a :func:`rank_architecture`) was split for:
    Mamba mixers, OLMo 2's full-width q/k norms and the vision encoder split themselves.
    """

    def __init__(
        self,
        arch: Architecture,
        dtype: torch.dtype,
        device: torch.device,
        stage: Stage | None = None,
        tp: int = 1,
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
        #: ``spec.training.loss``: how ``forward(..., labels=...)`` computes the loss.
        self.loss = "standard"
        self.embed_tokens: nn.Embedding | None = None
        self.embed_positions: nn.Embedding | None = None
        self.project_in: nn.Linear | None = None
        self.project_out: nn.Linear | None = None
        self.norm: nn.Module | None = None
        self.lm_head: nn.Linear | None = None
        self.vision: VisionTower | None = None
        if stage.first:
            self.embed_tokens = nn.Embedding(arch.vocab_size, embed_dim, **factory)
            if layout.learned_positions_offset is not None:
                self.embed_positions = nn.Embedding(
                    arch.max_position_embeddings + layout.learned_positions_offset, h, **factory
                )
            if embed_dim != h:  # OPT-350m: word_embed_proj_dim 512 < hidden_size 1024
                self.project_in = nn.Linear(embed_dim, h, bias=False, **factory)
        if arch.vision_config is not None:
            self.vision = VisionTower(arch, factory, tp)
        plan = layer_plan(arch)
        layers = arch.num_hidden_layers if stage.layers is None else stage.layers
        self.layer_kinds = plan[stage.start : stage.start + layers]
        self.layers = nn.ModuleList(
            DecoderLayer(arch, layout, factory, kind, tp) for kind in self.layer_kinds
        )
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
        labels: Tensor | None = None,
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
        if labels is not None:
            return causal_lm_loss(x, self.lm_head, labels, self.loss)
        logits: Tensor = self.lm_head(x)
        return logits


def _cross_entropy_sum(logits: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(logits.float(), labels, reduction="sum")


def _linear_cross_entropy_sum(hidden: Tensor, weight: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(F.linear(hidden, weight).float(), labels, reduction="sum")


def causal_lm_loss(hidden: Tensor, lm_head: nn.Linear, labels: Tensor, mode: str) -> Tensor:
    """Mean cross-entropy of ``lm_head(hidden)`` against ``labels`` as ``spec.training.loss``
    computes it (see ``gpu_sizer.budget.training_loss`` for the sources).

    ``standard``: the full logits, upcast to float32 (``transformers``' ``ForCausalLMLoss``).
    ``chunked``: the full 16-bit logits, each of 8 chunks upcast and reduced under activation
    checkpointing, which keeps what torchtune's compiled ``CEWithChunkedOutputLoss`` keeps (the
    16-bit chunk, not its float32 log-softmax). ``fused``: Liger's chunking of the tokens
    (``liger_chunk_rows``), each chunk's logits computed and reduced under checkpointing, so no
    full logits tensor exists.

    :param hidden: ``[batch, t, hidden]``; ``labels``: ``[batch, t]`` token ids.
    """
    from torch.utils.checkpoint import checkpoint

    from gpu_sizer.budget.training_loss import CHUNKED_LOSS_CHUNKS, liger_chunk_rows

    flat = hidden.reshape(-1, hidden.shape[-1])
    targets = labels.reshape(-1)
    tokens = targets.numel()
    if mode == "fused":
        rows = liger_chunk_rows(tokens, lm_head.out_features, lm_head.in_features)
        total = sum(
            checkpoint(
                _linear_cross_entropy_sum,
                flat[i : i + rows],
                lm_head.weight,
                targets[i : i + rows],
                use_reentrant=False,
            )
            for i in range(0, tokens, rows)
        )
        return total / tokens  # type: ignore[no-any-return]
    logits = lm_head(flat)
    if mode == "chunked":
        chunks = zip(
            logits.tensor_split(CHUNKED_LOSS_CHUNKS),
            targets.tensor_split(CHUNKED_LOSS_CHUNKS),
            strict=True,
        )
        total = sum(checkpoint(_cross_entropy_sum, c, t, use_reentrant=False) for c, t in chunks)
        return total / tokens  # type: ignore[no-any-return]
    return F.cross_entropy(logits.float(), targets)


def heaviest_stage(arch: Architecture, pp: int, tp: int = 1) -> Stage:
    """The most loaded of ``pp`` pipeline stages: the decoder layers of
    :func:`gpu_sizer.budget.params.stage_layers` (``ceil(layers / pp)`` of them) plus the larger
    end (the first stage's embedding or the last stage's lm_head and final norm), counted on the
    meta device. One stage is the whole model."""
    if pp == 1:
        return Stage()
    window = stage_layers(arch, pp)
    layers, start = len(window), window.start
    meta = torch.device("meta")
    first = Stage(layers=layers, first=True, last=False, start=start)
    last = Stage(layers=layers, first=False, last=True, start=start)
    sizes = {
        stage: parameter_count(SyntheticDecoder(arch, torch.bfloat16, meta, stage, tp))
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
    is kept, so the rank's attention is the same per head. Mamba mixers and the vision encoder
    are split by the modules themselves (build the model with the same ``tp``).
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
            "intermediate_size_mlp": split(arch.intermediate_size_mlp),
            "vocab_size": split(arch.vocab_size),
            "moe_intermediate_size": split(arch.moe_intermediate_size),
            "shared_expert_intermediate_size": split(arch.shared_expert_intermediate_size),
        }
    )


def build_model(
    arch: Architecture,
    dtype: torch.dtype,
    device: torch.device,
    stage: Stage | None = None,
    tp: int = 1,
) -> SyntheticDecoder:
    """The synthetic model (or one pipeline ``stage`` of it), allocated and randomly
    initialised on ``device`` in ``dtype``; ``arch`` is the rank's shape for ``tp`` ranks.

    On ``torch.device("meta")`` nothing is allocated (shapes only).
    """
    with torch.no_grad():
        return SyntheticDecoder(arch, dtype, device, stage, tp)


def parameter_count(model: nn.Module) -> int:
    """Distinct parameters (a tied LM head counts once, as in ``model.num_parameters()``)."""
    return sum(p.numel() for p in model.parameters())
