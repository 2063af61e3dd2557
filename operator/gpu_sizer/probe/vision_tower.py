"""The synthetic model's image encoder and projector (vision-language models). Needs torch."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gpu_sizer.api import Architecture
from gpu_sizer.budget.vision import encoder_params

__all__ = ["VisionTower"]


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
