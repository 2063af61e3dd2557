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

Every family is built from the wiring the estimate's parameter layout uses
(:func:`gpu_sizer.budget.family_wiring.wiring`: biases, norms, activation, residual, from the
declarations in :mod:`gpu_sizer.budget.families`) and the same per-layer plan
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

This module assembles the model; its parts live in :mod:`gpu_sizer.probe.attention`,
:mod:`~gpu_sizer.probe.mamba`, :mod:`~gpu_sizer.probe.feed_forward`,
:mod:`~gpu_sizer.probe.decoder_layer`, :mod:`~gpu_sizer.probe.vision_tower` and the training loss
in :mod:`~gpu_sizer.probe.loss`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from gpu_sizer.api import Architecture
from gpu_sizer.budget.families import FAMILIES
from gpu_sizer.budget.family_wiring import Wiring, wiring
from gpu_sizer.budget.params import layer_plan, stage_layers
from gpu_sizer.probe.attention import KvCache
from gpu_sizer.probe.decoder_layer import DecoderLayer, norm
from gpu_sizer.probe.loss import causal_lm_loss
from gpu_sizer.probe.vision_tower import VisionTower

__all__ = [
    "DecoderLayer",
    "KvCache",
    "Stage",
    "SyntheticDecoder",
    "build_model",
    "causal_lm_loss",
    "heaviest_stage",
    "layout_for",
    "parameter_count",
    "rank_architecture",
]


def layout_for(arch: Architecture) -> Wiring:
    """The family wiring of ``arch.model_type``, the one the estimate's parameter layout uses.

    :raises KeyError: a ``modelType`` without a parameter layout (the probe refuses those before
        building, see :mod:`gpu_sizer.probe.support`).
    """
    return wiring(arch, FAMILIES[arch.model_type])


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
        wired = layout_for(arch)
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
            if wired.learned_positions_offset is not None:
                self.embed_positions = nn.Embedding(
                    arch.max_position_embeddings + wired.learned_positions_offset, h, **factory
                )
            if embed_dim != h:  # OPT-350m: word_embed_proj_dim 512 < hidden_size 1024
                self.project_in = nn.Linear(embed_dim, h, bias=False, **factory)
        if arch.vision_config is not None:
            self.vision = VisionTower(arch, factory, tp)
        plan = layer_plan(arch)
        layers = arch.num_hidden_layers if stage.layers is None else stage.layers
        self.layer_kinds = plan[stage.start : stage.start + layers]
        self.layers = nn.ModuleList(
            DecoderLayer(arch, wired, factory, kind, tp) for kind in self.layer_kinds
        )
        if stage.last:
            self.norm = norm(wired, h, factory) if wired.final_norm else None
            if embed_dim != h:
                self.project_out = nn.Linear(h, embed_dim, bias=False, **factory)
            self.lm_head = nn.Linear(embed_dim, arch.vocab_size, bias=False, **factory)
            if wired.tied and self.embed_tokens is not None:
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
