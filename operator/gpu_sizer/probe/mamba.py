"""The synthetic model's state-space mixers: Mamba-2 (Nemotron-H) and Mamba-1 (Jamba). Needs torch.

Each holds the tensors of its ``transformers`` mixer and keeps a per-sequence conv and SSM state
in the cache views :mod:`gpu_sizer.probe.inference` allocates. The selective scan is one state
update per forward: the same tensors, not the same arithmetic, because memory is what is
measured.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gpu_sizer.api import Architecture
from gpu_sizer.budget.params import config_value
from gpu_sizer.probe.attention import KvCache

__all__ = ["Mamba1Mixer", "Mamba2Mixer"]


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
