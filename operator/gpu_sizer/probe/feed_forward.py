"""The synthetic model's feed-forwards: a dense MLP and routed experts. Needs torch.

The tensors of the family's ``transformers`` MLP (gated gate/up/down or plain up/down, with the
family's biases) and MoE block (router, experts stacked ``[experts, out, in]`` as vLLM's
fused-MoE layer stores them, expert biases, shared experts), with the family's activation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gpu_sizer.api import Architecture
from gpu_sizer.budget.families import Activation
from gpu_sizer.budget.family_wiring import Wiring

__all__ = ["ACTIVATIONS", "Mlp", "SparseMoe"]


def _relu2(x: Tensor) -> Tensor:
    return torch.square(F.relu(x))


#: The family's MLP activation (:data:`gpu_sizer.budget.families.Activation`) as a function.
ACTIVATIONS: dict[Activation, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,
    "relu": F.relu,
    "relu2": _relu2,
}


class Mlp(nn.Module):
    """SwiGLU (gate/up/down) or the classic two-layer MLP (fc1/fc2)."""

    def __init__(
        self,
        h: int,
        inner: int,
        factory: dict[str, Any],
        *,
        gated: bool,
        activation: Activation,
        bias: bool,
    ) -> None:
        super().__init__()
        self.act = ACTIVATIONS[activation]
        self.gated = gated
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

    def __init__(self, arch: Architecture, wired: Wiring, factory: dict[str, Any]) -> None:
        super().__init__()
        assert arch.experts is not None and arch.num_experts_per_tok is not None
        h = arch.hidden_size
        experts = arch.experts
        moe = wired.family.moe
        assert moe is not None
        inner = getattr(arch, moe.width_key, None) or arch.intermediate_size
        self.top_k = arch.num_experts_per_tok
        self.act = ACTIVATIONS[wired.activation]
        self.gate = nn.Linear(h, experts, bias=moe.router_bias, **factory)
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
        if wired.mlp_bias or moe.expert_bias:
            self.b_gate = nn.Parameter(torch.zeros(experts, inner, **factory))
            self.b_up = nn.Parameter(torch.zeros(experts, inner, **factory))
            self.b_down = nn.Parameter(torch.zeros(experts, h, **factory))
        self.shared_expert: Mlp | None = None
        self.shared_expert_gate: nn.Linear | None = None
        shared = 0
        if moe.shared == "qwen2":
            shared = arch.shared_expert_intermediate_size or 0
        elif moe.shared == "deepseek":
            shared = (arch.n_shared_experts or 0) * (arch.moe_intermediate_size or inner)
        elif moe.shared == "llama4":
            shared = arch.intermediate_size
        if shared:
            self.shared_expert = Mlp(
                h, shared, factory, gated=True, activation=wired.activation, bias=arch.mlp_bias
            )
        if moe.shared == "qwen2" and shared:
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
