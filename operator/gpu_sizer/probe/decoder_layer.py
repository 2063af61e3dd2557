"""One decoder layer of the synthetic model: a token mixer, a feed-forward, the family's norms.

Which mixer and feed-forward a layer has is the config's
(:func:`gpu_sizer.budget.params.layer_plan`, the same plan the estimate counts); the norms and
residual wiring are the family's (:func:`gpu_sizer.budget.family_wiring.wiring`). Needs torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor, nn

from gpu_sizer.api import Architecture
from gpu_sizer.budget.family_wiring import Wiring
from gpu_sizer.budget.params import LayerKind
from gpu_sizer.probe.attention import Attention, KvCache, MlaAttention
from gpu_sizer.probe.feed_forward import Mlp, SparseMoe
from gpu_sizer.probe.mamba import Mamba1Mixer, Mamba2Mixer

__all__ = ["DecoderLayer", "norm"]


def norm(wired: Wiring, width: int, factory: dict[str, Any]) -> nn.Module:
    """The family's norm over ``width``: LayerNorm with bias, or RMSNorm (weight only)."""
    if wired.layer_norm:
        return nn.LayerNorm(width, bias=True, **factory)
    return nn.RMSNorm(width, **factory)


class DecoderLayer(nn.Module):
    """A token mixer (attention, MLA, Mamba or none) and a feed-forward (MLP, MoE or none), with
    the family's norms and residual wiring."""

    def __init__(
        self,
        arch: Architecture,
        wired: Wiring,
        factory: dict[str, Any],
        kind: LayerKind | None = None,
        tp: int = 1,
    ) -> None:
        super().__init__()
        h = arch.hidden_size
        kind = kind or LayerKind("attention", "full", "moe" if arch.experts else "dense")
        self.wired = wired
        self.kind = kind
        self.self_attn: nn.Module | None = None
        if kind.mixer == "attention":
            self.self_attn = Attention(arch, wired, factory, tp)
        elif kind.mixer == "mla":
            self.self_attn = MlaAttention(arch, wired, factory)
        elif kind.mixer == "mamba":
            mamba = wired.family.mamba
            mixer = Mamba2Mixer if mamba is not None and mamba.version == 2 else Mamba1Mixer
            self.self_attn = mixer(arch, factory, tp)
        self.mlp: nn.Module | None = None
        if kind.ffn == "moe":
            self.mlp = SparseMoe(arch, wired, factory)
        elif kind.ffn == "dense":
            width = getattr(arch, wired.family.mlp.width_key, None) or arch.intermediate_size
            self.mlp = Mlp(
                h,
                width,
                factory,
                gated=wired.family.mlp.gated,
                activation=wired.activation,
                bias=wired.mlp_bias,
            )
        both = self.self_attn is not None and self.mlp is not None
        count = wired.norms if both else wired.block_norms
        self.norms = nn.ModuleList(norm(wired, h, factory) for _ in range(count))

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
        if self.wired.parallel_residual:
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
