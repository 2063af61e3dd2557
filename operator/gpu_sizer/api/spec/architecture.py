"""``spec.model.architecture``: the model's shape, as Hugging Face config.json keys camelCased.

Only the keys that change memory are kept; defaults follow ``transformers``' config classes. The
families the sizing engine models exactly are listed here, so that an unknown family is refused
with the list rather than sized by a guess.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from pydantic import Field, StrictBool, model_validator
from pydantic.alias_generators import to_camel

from gpu_sizer.api.family_keys import FAMILY_KEYS, MOE_MODEL_TYPES, family_key_problems
from gpu_sizer.api.spec.base import FieldError, _Model, _Problems
from gpu_sizer.api.spec.bounds import (
    LIMITS,
    Count,
    Experts,
    Fraction,
    Heads,
    Identifier,
    Inner,
    Layers,
    State,
    Tokens,
    Width,
)

__all__ = [
    "KNOWN_MODEL_TYPES",
    "KNOWN_ROPE_TYPES",
    "LAYER_TYPES",
    "VISION_LANGUAGE_MODEL_TYPES",
    "VISION_MODEL_TYPES",
    "Architecture",
    "RopeScaling",
    "VisionConfig",
]


#: Model families whose parameter layout the sizing engine knows exactly (Hugging Face
#: ``model_type`` values).
KNOWN_MODEL_TYPES: tuple[str, ...] = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "gemma",
    "gemma2",
    "phi3",
    "gpt_neox",
    "falcon",
    "opt",
    "qwen3",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "gemma3",
    "gemma3_text",
    "llama4",
    "mistral3",
    "qwen2_5_vl",
    "granite",
    "olmo2",
    "glm4_moe",
    "nemotron_h",
    "jamba",
)


#: Per-layer kinds of ``layerTypes`` (``transformers``' ``layer_types`` values; Nemotron-H's
#: ``layers_block_type`` and Jamba's ``layers_block_type`` use the same words).
LAYER_TYPES: tuple[str, ...] = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "attention",
    "linear_attention",
    "mamba",
    "mlp",
    "moe",
)


#: RoPE scaling types of ``transformers``' ``ROPE_INIT_FUNCTIONS`` (``modeling_rope_utils.py``),
#: plus ``su`` (Phi-3's early name for longrope) and ``default`` (no scaling).
KNOWN_ROPE_TYPES: tuple[str, ...] = (
    "default",
    "linear",
    "dynamic",
    "yarn",
    "longrope",
    "su",
    "llama3",
    "mrope",
)


class RopeScaling(_Model):
    """RoPE scaling from config.json's ``rope_scaling``: extends the usable context."""

    rope_type: Identifier | None = Field(
        None,
        description="Scaling type from config.json: " + ", ".join(KNOWN_ROPE_TYPES) + " "
        "(unset: linear). No default is stored, so that an object written with the legacy "
        "`type` key keeps its value.",
    )
    legacy_type: Identifier | None = Field(
        None,
        alias="type",
        exclude=True,
        description="Older config.json files name ropeType `type`; accepted as ropeType.",
    )
    factor: Fraction = Field(1.0, ge=1.0, le=1024.0, description="Context extension factor.")
    original_max_position_embeddings: Tokens | None = Field(
        None, description="Context length the model was pre-trained with, in tokens."
    )

    @model_validator(mode="before")
    @classmethod
    def _legacy_key(cls, data: Any) -> Any:
        """config.json has used both ``type`` and ``rope_type``: take ``type`` as ropeType."""
        if isinstance(data, dict) and data.get("type") is not None:
            data = dict(data)
            legacy = data.pop("type")
            if data.get("ropeType", legacy) != legacy:
                raise FieldError(
                    [("type", f"type {legacy!r} disagrees with ropeType {data['ropeType']!r}")]
                )
            data["ropeType"] = legacy
        return data

    @model_validator(mode="after")
    def _check(self) -> RopeScaling:
        if self.rope_type is not None and self.rope_type not in KNOWN_ROPE_TYPES:
            raise FieldError(
                [
                    (
                        "ropeType",
                        f"unknown rope type {self.rope_type!r}; known: "
                        + ", ".join(KNOWN_ROPE_TYPES),
                    )
                ]
            )
        return self


class VisionConfig(_Model):
    """A vision-language model's image encoder: config.json's ``vision_config``, camelCased.

    The keys are those of the vision config class of each supported family, spelled as that
    class spells them (Qwen2.5-VL says ``depth``/``numHeads`` where SigLIP, Pixtral and Llama 4
    say ``numHiddenLayers``/``numAttentionHeads``); either spelling is accepted.
    """

    model_type: Identifier = Field(
        description="Vision config model_type: siglip_vision_model (Gemma 3), pixtral "
        "(Mistral 3), qwen2_5_vl (Qwen2.5-VL), llama4_vision_model (Llama 4)."
    )
    hidden_size: Width = Field(description="Encoder width.")
    intermediate_size: Inner = Field(description="Encoder MLP inner width.")
    num_hidden_layers: Layers | None = Field(None, description="Encoder blocks (SigLIP, Pixtral).")
    depth: Layers | None = Field(None, description="Encoder blocks (Qwen2.5-VL's name).")
    num_attention_heads: Heads | None = Field(None, description="Encoder heads.")
    num_heads: Heads | None = Field(None, description="Encoder heads (Qwen2.5-VL's name).")
    head_dim: Width | None = Field(None, description="Per-head width (Pixtral).")
    patch_size: Width = Field(14, description="Patch side in pixels.")
    image_size: Annotated[int, Field(ge=1, le=LIMITS["width"], strict=True)] | None = Field(
        None, description="Image side in pixels the encoder was trained at (learned positions)."
    )
    num_channels: Width | None = Field(None, description="Image channels (default 3).")
    in_chans: Width | None = Field(None, description="Image channels (Qwen2.5-VL's name).")
    temporal_patch_size: Width | None = Field(
        None, description="Qwen2.5-VL: frames per 3-D patch (default 2)."
    )
    spatial_merge_size: Width | None = Field(
        None, description="Qwen2.5-VL: patches merged per side by the merger (default 2)."
    )
    out_hidden_size: Width | None = Field(
        None, description="Qwen2.5-VL: merger output width (the language model's hiddenSize)."
    )
    vision_use_head: StrictBool | None = Field(
        None, description="SigLIP: attention-pooling head (false in Gemma 3)."
    )
    vision_output_dim: Width | None = Field(None, description="Llama 4: adapter output width.")
    projector_input_dim: Width | None = Field(None, description="Llama 4: projector input.")
    projector_output_dim: Width | None = Field(None, description="Llama 4: projector output.")
    pixel_shuffle_ratio: Fraction | None = Field(
        None, gt=0.0, le=1.0, description="Llama 4: pixel-shuffle ratio (0.5 merges 2 x 2)."
    )

    @property
    def layers(self) -> int:
        """Encoder blocks, whichever key the config uses."""
        return self.num_hidden_layers or self.depth or 1

    @property
    def heads(self) -> int:
        """Encoder attention heads, whichever key the config uses."""
        return self.num_attention_heads or self.num_heads or 1

    @property
    def channels(self) -> int:
        """Image channels, whichever key the config uses."""
        return self.num_channels or self.in_chans or 3

    @model_validator(mode="after")
    def _check(self) -> VisionConfig:
        problems = _Problems()
        if self.model_type not in VISION_MODEL_TYPES:
            problems.add(
                "modelType",
                f"unknown vision model type {self.model_type!r}; supported: "
                + ", ".join(VISION_MODEL_TYPES),
            )
        if self.num_hidden_layers is None and self.depth is None:
            problems.add("numHiddenLayers", "give numHiddenLayers (or depth)")
        if self.num_attention_heads is None and self.num_heads is None:
            problems.add("numAttentionHeads", "give numAttentionHeads (or numHeads)")
        problems.raise_if_any()
        return self


#: Vision encoders the sizing engine knows (``vision_config.model_type``), by the family that
#: uses them.
VISION_MODEL_TYPES: tuple[str, ...] = (
    "siglip_vision_model",
    "pixtral",
    "qwen2_5_vl",
    "llama4_vision_model",
)


#: Families whose config.json nests a ``vision_config`` (vision-language models).
VISION_LANGUAGE_MODEL_TYPES: tuple[str, ...] = ("gemma3", "mistral3", "qwen2_5_vl", "llama4")


@functools.cache
def _family_fields(model: type[_Model]) -> tuple[tuple[str, str], ...]:
    """``(attribute, wire key)`` of each field of ``model`` that :data:`FAMILY_KEYS` checks.

    Computed once per class: converting every field name to camelCase on every validation was
    a third of a webhook verdict's CPU (110 conversions per spec).
    """
    return tuple(
        (name, wire) for name in model.model_fields if (wire := to_camel(name)) in FAMILY_KEYS
    )


class Architecture(_Model):
    """The model's shape: Hugging Face config.json keys, camelCased.

    Only the keys that change memory are kept. Defaults follow ``transformers``' config classes.
    """

    model_type: Identifier = Field(
        description="Hugging Face model_type. Exact parameter layouts: "
        + ", ".join(KNOWN_MODEL_TYPES)
        + ". Any other model_type needs spec.model.parameterCount; its attention geometry "
        "(layers, KV heads, head size, layerTypes, slidingWindow, kvLoraRank) sizes the KV "
        "cache and activations."
    )
    num_hidden_layers: Layers = Field(description="Transformer blocks (num_hidden_layers).")
    hidden_size: Width = Field(description="Model width d_model (hidden_size).")
    intermediate_size: Inner = Field(
        description="MLP inner width (intermediate_size; ffn_dim for OPT); per expert for MoE."
    )
    num_attention_heads: Heads = Field(description="Query heads per layer.")
    num_key_value_heads: Heads | None = Field(
        None,
        description="KV heads per layer (GQA/MQA); default num_attention_heads (multi-head).",
    )
    head_dim: Width | None = Field(
        None, description="Per-head width; default hiddenSize / numAttentionHeads."
    )
    vocab_size: Annotated[int, Field(ge=1, le=LIMITS["vocab"], strict=True)] = Field(
        description="Vocabulary size (rows of the embedding)."
    )
    tie_word_embeddings: StrictBool | None = Field(
        None,
        description="lm_head shares the input embedding's weights; unset takes the family's "
        "config-class default (tied for gemma, gemma2, falcon, opt).",
    )
    max_position_embeddings: Tokens = Field(
        description="Longest context the model supports without rope scaling, in tokens."
    )
    attention_bias: StrictBool | None = Field(
        None,
        description="q/k/v/o projections carry biases (Llama's attention_bias); unset takes the "
        "family default (biased for gpt_neox and opt; Qwen2's qkv biases are always counted).",
    )
    mlp_bias: StrictBool = Field(
        False, description="MLP projections carry biases (Llama's mlp_bias)."
    )
    num_local_experts: Experts | None = Field(
        None, description="MoE: experts per layer (Mixtral's num_local_experts)."
    )
    num_experts_per_tok: Experts | None = Field(
        None, description="MoE: experts routed per token (top-k)."
    )
    moe_intermediate_size: Inner | None = Field(
        None, description="MoE: per-expert MLP width when it differs from intermediateSize."
    )
    shared_expert_intermediate_size: Inner | None = Field(
        None, description="MoE: width of the always-on shared expert (Qwen2-MoE)."
    )
    sliding_window: Tokens | None = Field(
        None, description="Sliding-window attention span in tokens; caps the KV cache per sequence."
    )
    rope_scaling: RopeScaling | None = Field(
        None, description="RoPE scaling; allows maxModelLen beyond maxPositionEmbeddings."
    )
    word_embed_proj_dim: Width | None = Field(
        None, description="OPT: embedding width when it differs from hiddenSize (OPT-350m)."
    )
    new_decoder_architecture: StrictBool = Field(
        False, description="Falcon: the 40B/180B layout with grouped KV heads and two layer norms."
    )
    parallel_attn: StrictBool = Field(
        True,
        description="Falcon: attention and MLP read one shared layer norm (parallel_attn); false "
        "adds a post-attention layer norm.",
    )
    do_layer_norm_before: StrictBool = Field(
        True,
        description="OPT: pre-layer-norm blocks with a final layer norm (false for OPT-350m).",
    )
    num_experts: Experts | None = Field(
        None, description="MoE: experts per layer, as Qwen-MoE and Jamba name it (num_experts)."
    )
    n_routed_experts: Experts | None = Field(
        None, description="MoE: routed experts per layer, as DeepSeek and GLM name it."
    )
    n_shared_experts: Count | None = Field(
        None, description="MoE: always-on shared experts of moeIntermediateSize (DeepSeek, GLM)."
    )
    first_k_dense_replace: Count | None = Field(
        None, description="MoE: the first k layers have a dense MLP (DeepSeek, GLM)."
    )
    moe_layer_freq: Layers | None = Field(
        None, description="DeepSeek: every n-th layer after the first k is MoE (default 1)."
    )
    decoder_sparse_step: Layers | None = Field(
        None, description="Qwen-MoE: every n-th layer is MoE (default 1)."
    )
    mlp_only_layers: (
        Annotated[
            tuple[Annotated[int, Field(ge=0, lt=LIMITS["layers"], strict=True)], ...],
            Field(max_length=LIMITS["layers"]),
        ]
        | None
    ) = Field(None, description="Qwen-MoE: layer indices with a dense MLP.")
    interleave_moe_layer_step: Layers | None = Field(
        None, description="Llama 4: every n-th layer is MoE (1: all; 2: Maverick)."
    )
    intermediate_size_mlp: Inner | None = Field(
        None, description="Llama 4: MLP width of the dense (non-MoE) layers."
    )
    q_lora_rank: Width | None = Field(
        None, description="MLA: query compression rank (unset: a full q_proj, DeepSeek-V2-Lite)."
    )
    kv_lora_rank: Width | None = Field(
        None,
        description="MLA (multi-head latent attention): the compressed KV width cached per "
        "token and layer, with qkRopeHeadDim (DeepSeek-V2/V3).",
    )
    qk_rope_head_dim: Width | None = Field(None, description="MLA: rotary part of a q/k head.")
    qk_nope_head_dim: Width | None = Field(None, description="MLA: non-rotary part of a q/k head.")
    v_head_dim: Width | None = Field(None, description="MLA: value head width.")
    layer_types: Annotated[tuple[Identifier, ...], Field(max_length=LIMITS["layers"])] | None = (
        Field(
            None,
            description="Per-layer kind, as transformers reads it: " + ", ".join(LAYER_TYPES) + ".",
        )
    )
    sliding_window_pattern: Layers | None = Field(
        None,
        description="Gemma 3: every n-th layer is global, the others slide (default 6); used when "
        "layerTypes is unset.",
    )
    attention_chunk_size: Tokens | None = Field(
        None, description="Llama 4: chunked local attention span in tokens (default 8192)."
    )
    no_rope_layers: (
        Annotated[
            tuple[Annotated[int, Field(ge=0, le=1, strict=True)], ...],
            Field(max_length=LIMITS["layers"]),
        ]
        | None
    ) = Field(
        None,
        description="Llama 4: 1 per RoPE (chunked) layer, 0 per NoPE (global) layer; default "
        "every fourth layer global.",
    )
    use_qk_norm: StrictBool | None = Field(
        None, description="q/k RMSNorm per head (GLM-4.5: weights; Llama 4: weightless L2 norm)."
    )
    hybrid_override_pattern: str | None = Field(
        None,
        description="Nemotron-H: one character per layer: M Mamba-2, * attention, - MLP.",
        max_length=LIMITS["layers"],
    )
    mamba_num_heads: Heads | None = Field(None, description="Nemotron-H: Mamba-2 heads.")
    mamba_head_dim: Width | None = Field(None, description="Nemotron-H: Mamba-2 head width.")
    ssm_state_size: State | None = Field(None, description="Nemotron-H: SSM state per head.")
    n_groups: Heads | None = Field(None, description="Nemotron-H: Mamba-2 B/C groups.")
    conv_kernel: State | None = Field(None, description="Nemotron-H: causal conv width.")
    expand: Width | None = Field(None, description="Nemotron-H: Mamba inner width / hidden.")
    use_conv_bias: StrictBool | None = Field(None, description="Nemotron-H: conv1d bias.")
    use_bias: StrictBool | None = Field(
        None, description="Nemotron-H: Mamba-2 in_proj/out_proj biases."
    )
    attn_layer_period: Layers | None = Field(None, description="Jamba: attention layer period.")
    attn_layer_offset: Count | None = Field(None, description="Jamba: attention layer offset.")
    expert_layer_period: Layers | None = Field(None, description="Jamba: MoE layer period.")
    expert_layer_offset: Count | None = Field(None, description="Jamba: MoE layer offset.")
    mamba_d_state: State | None = Field(None, description="Jamba: SSM state per channel.")
    mamba_d_conv: State | None = Field(None, description="Jamba: causal conv width.")
    mamba_expand: Width | None = Field(None, description="Jamba: Mamba inner width / hidden.")
    mamba_dt_rank: Width | None = Field(None, description="Jamba: time-step projection rank.")
    mamba_conv_bias: StrictBool | None = Field(None, description="Jamba: conv1d bias.")
    mamba_proj_bias: StrictBool | None = Field(
        None, description="Jamba: Mamba in_proj/out_proj biases."
    )
    vision_config: VisionConfig | None = Field(
        None,
        description="Vision-language models (" + ", ".join(VISION_LANGUAGE_MODEL_TYPES) + "): "
        "config.json's vision_config; the language model's keys (text_config) sit at this level.",
    )
    multimodal_projector_bias: StrictBool | None = Field(
        None, description="Mistral 3: biases on the multimodal projector (default false)."
    )
    spatial_merge_size: Width | None = Field(
        None, description="Mistral 3: image patches merged per side (default 2)."
    )

    @property
    def experts(self) -> int | None:
        """Routed experts per MoE layer, whichever config key names them."""
        return self.num_local_experts or self.num_experts or self.n_routed_experts

    @property
    def kv_heads(self) -> int:
        """KV heads per layer (multi-head attention when unset)."""
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        """Per-head width in elements."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def max_context(self) -> int:
        """Longest usable context in tokens, rope scaling included."""
        if self.rope_scaling is None or self.rope_scaling.factor <= 1.0:
            return self.max_position_embeddings
        base = self.rope_scaling.original_max_position_embeddings or self.max_position_embeddings
        return max(self.max_position_embeddings, int(base * self.rope_scaling.factor))

    @model_validator(mode="after")
    def _check(self) -> Architecture:
        problems = _Problems()
        if self.model_type not in KNOWN_MODEL_TYPES:
            self._check_generic(problems)
        else:
            keys = {wire: getattr(self, name) for name, wire in _family_fields(type(self))}
            for wire, message in family_key_problems(self.model_type, keys):
                problems.add(wire, message)
        if self.num_attention_heads % self.kv_heads != 0:
            problems.add(
                "numKeyValueHeads",
                f"numAttentionHeads ({self.num_attention_heads}) must be divisible by "
                f"numKeyValueHeads ({self.kv_heads})",
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads != 0:
            problems.add(
                "headDim",
                f"hiddenSize ({self.hidden_size}) is not divisible by numAttentionHeads "
                f"({self.num_attention_heads}); set headDim explicitly",
            )
        named = [
            wire
            for wire, value in (
                ("numLocalExperts", self.num_local_experts),
                ("numExperts", self.num_experts),
                ("nRoutedExperts", self.n_routed_experts),
            )
            if value is not None
        ]
        experts = self.experts
        if len(named) > 1:
            problems.add(named[1], f"give one of {' and '.join(named)}: they name the same count")
        if self.model_type in MOE_MODEL_TYPES and experts is None:
            problems.add(
                "numLocalExperts",
                f"{self.model_type} is a mixture-of-experts family: set the expert count as "
                "config.json names it (numLocalExperts, numExperts or nRoutedExperts) and "
                "numExpertsPerTok (num_experts_per_tok); without them it would be sized as a "
                "dense model",
            )
        elif (experts is None) != (self.num_experts_per_tok is None):
            problems.add(
                "numExpertsPerTok",
                "MoE needs both an expert count and numExpertsPerTok, or neither",
            )
        if (
            experts is not None
            and self.num_experts_per_tok is not None
            and self.num_experts_per_tok > experts
        ):
            problems.add(
                "numExpertsPerTok",
                f"numExpertsPerTok ({self.num_experts_per_tok}) cannot exceed the expert count "
                f"({experts})",
            )
        self._check_layers(problems)
        problems.raise_if_any()
        return self

    def _check_generic(self, problems: _Problems) -> None:
        """A family without a parameter layout is sized from its attention geometry only: its
        layers must all be attention layers (state-space and linear-attention layers hold state
        whose size only a known family's keys give)."""
        hybrid = [
            wire
            for wire, value in (
                ("hybridOverridePattern", self.hybrid_override_pattern),
                ("mambaNumHeads", self.mamba_num_heads),
                ("ssmStateSize", self.ssm_state_size),
                ("attnLayerPeriod", self.attn_layer_period),
                ("mambaDState", self.mamba_d_state),
            )
            if value is not None
        ]
        if hybrid:
            problems.add(
                hybrid[0],
                f"model type {self.model_type!r} has state-space layers, which are sized only "
                "for nemotron_h and jamba: drop spec.model.architecture and keep "
                "spec.model.parameterCount (the estimate is then Incomplete: KV cache and "
                "activations not counted)",
            )

    def _check_layers(self, problems: _Problems) -> None:
        """Per-layer patterns, MLA and the families that need a nested vision config."""
        layers = self.num_hidden_layers
        if self.layer_types is not None:
            unknown = sorted({t for t in self.layer_types if t not in LAYER_TYPES})
            if unknown:
                problems.add(
                    "layerTypes",
                    f"unknown layer types {unknown}; known: " + ", ".join(LAYER_TYPES),
                )
            hybrid = self.model_type in ("nemotron_h", "jamba")
            kinds = set(self.layer_types)
            if not hybrid and kinds - {"full_attention", "sliding_attention", "chunked_attention"}:
                fix = (
                    ""
                    if self.model_type in KNOWN_MODEL_TYPES
                    else " (a model with other layers: drop spec.model.architecture and keep "
                    "spec.model.parameterCount; the estimate is then Incomplete)"
                )
                problems.add(
                    "layerTypes",
                    f"{self.model_type} layers are full_attention, sliding_attention or "
                    f"chunked_attention, not {sorted(kinds - set(LAYER_TYPES[:3]))}{fix}",
                )
            if "moe" in kinds and self.model_type == "nemotron_h":
                problems.add("layerTypes", "Nemotron-H MoE layers are not sized yet")
            if len(self.layer_types) != layers:
                problems.add(
                    "layerTypes",
                    f"{len(self.layer_types)} entries for numHiddenLayers {layers}: give one "
                    "per layer",
                )
        for name, wire in (("no_rope_layers", "noRopeLayers"),):
            values = getattr(self, name)
            if values is not None and len(values) not in (0, layers):
                problems.add(wire, f"{len(values)} entries for numHiddenLayers {layers}")
        pattern = self.hybrid_override_pattern
        if pattern is not None:
            bad = sorted(set(pattern) - set("M*-"))
            if bad:
                problems.add(
                    "hybridOverridePattern",
                    f"layer codes {bad} are not supported: M (Mamba-2), * (attention) and - (MLP) "
                    "are; E (the MoE layers of Nemotron 3 Nano and later) is not sized yet",
                )
            if len(pattern) != layers:
                problems.add(
                    "hybridOverridePattern",
                    f"{len(pattern)} characters for numHiddenLayers {layers}: give one per layer",
                )
        if self.model_type == "nemotron_h" and pattern is None and self.layer_types is None:
            problems.add(
                "hybridOverridePattern",
                "nemotron_h needs its layer pattern: hybridOverridePattern (or layerTypes) "
                "from config.json",
            )
        if self.mlp_only_layers is not None and any(i >= layers for i in self.mlp_only_layers):
            problems.add("mlpOnlyLayers", f"layer indices must be below numHiddenLayers {layers}")
        mla = (self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim)
        if any(v is not None for v in mla) and any(v is None for v in mla):
            problems.add(
                "kvLoraRank",
                "multi-head latent attention needs kvLoraRank, qkRopeHeadDim, qkNopeHeadDim and "
                "vHeadDim together",
            )
        if self.model_type in ("deepseek_v2", "deepseek_v3") and self.kv_lora_rank is None:
            problems.add(
                "kvLoraRank",
                f"{self.model_type} uses multi-head latent attention: set kvLoraRank, "
                "qkRopeHeadDim, qkNopeHeadDim and vHeadDim from config.json",
            )
        if self.model_type in VISION_LANGUAGE_MODEL_TYPES and self.vision_config is None:
            problems.add(
                "visionConfig",
                f"{self.model_type} is a vision-language model: give config.json's "
                "vision_config as visionConfig (and its text_config keys at this level)",
            )
        if self.vision_config is not None and self.model_type not in VISION_LANGUAGE_MODEL_TYPES:
            problems.add(
                "visionConfig",
                f"{self.model_type} has no vision encoder; visionConfig applies to "
                + ", ".join(VISION_LANGUAGE_MODEL_TYPES),
            )
