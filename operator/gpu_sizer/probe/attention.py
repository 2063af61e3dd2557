"""The synthetic model's token mixers that attend: GQA and multi-head latent attention. Needs torch.

Both read and write the per-layer cache views :mod:`gpu_sizer.probe.inference` allocates (the
paged KV cache; MLA's latent cache), so the cache the probe measures is the cache the engine
would hold. Their tensors follow ``transformers``' ``LlamaAttention`` (with the family's biases,
q/k norms and gpt-oss's sinks) and ``DeepseekV3Attention``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention.bias import causal_lower_right

from gpu_sizer.api import Architecture
from gpu_sizer.budget.family_wiring import Wiring

__all__ = ["Attention", "KvCache", "MlaAttention"]

#: One layer's cache views: K and V, MLA's latent twice, or a Mamba layer's conv and SSM state.
KvCache = tuple[Tensor, Tensor]


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
        self, arch: Architecture, wired: Wiring, factory: dict[str, Any], tp: int = 1
    ) -> None:
        super().__init__()
        self.heads = arch.num_attention_heads
        self.kv_heads = arch.kv_heads
        self.head_dim = arch.head_size
        h = arch.hidden_size
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=wired.qkv_bias, **factory)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=wired.qkv_bias, **factory)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=wired.qkv_bias, **factory)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=wired.o_bias, **factory)
        self.q_norm: nn.Module | None = None
        self.k_norm: nn.Module | None = None
        self.full_width_norm = wired.qk_norm == "width"
        if wired.qk_norm == "head":
            self.q_norm = nn.RMSNorm(self.head_dim, **factory)
            self.k_norm = nn.RMSNorm(self.head_dim, **factory)
        elif self.full_width_norm:
            self.q_norm = nn.RMSNorm(self.heads * tp * self.head_dim, **factory)
            self.k_norm = nn.RMSNorm(self.kv_heads * tp * self.head_dim, **factory)
        self.sinks = (
            nn.Parameter(torch.zeros(self.heads, **factory))
            if wired.family.attention.sinks
            else None
        )

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

    def __init__(self, arch: Architecture, wired: Wiring, factory: dict[str, Any]) -> None:
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
            self.q_a_proj = nn.Linear(h, rank, bias=wired.qkv_bias, **factory)
            self.q_a_layernorm = nn.RMSNorm(rank, **factory)
            self.q_b_proj = nn.Linear(rank, q_width, bias=False, **factory)
        else:
            self.q_proj = nn.Linear(h, q_width, bias=False, **factory)
        self.kv_a_proj_with_mqa = nn.Linear(
            h, self.latent + self.rope, bias=wired.qkv_bias, **factory
        )
        self.kv_a_layernorm = nn.RMSNorm(self.latent, **factory)
        self.kv_b_proj = nn.Linear(
            self.latent, self.heads * (self.nope + self.v_dim), bias=False, **factory
        )
        self.o_proj = nn.Linear(self.heads * self.v_dim, h, bias=wired.o_bias, **factory)

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
