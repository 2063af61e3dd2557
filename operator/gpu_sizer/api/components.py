"""The diffusion component classes gpu-sizer sizes, and the config.json keys it reads from each.

A pipeline component is given as its class name and its ``config.json`` (camelCased, as the
other spec fields). Like ``diffusers``' ``ConfigMixin.from_config`` and ``transformers``'
``PretrainedConfig``, keys the memory model does not read are accepted and ignored (a real
config.json carries ``_class_name``, ``act_fn`` and many more); the keys it reads are checked for
type and range, and a key left out takes the class's own default, copied from the constructor
signature of the version modelled: ``diffusers`` 0.42.1 and ``transformers`` 5.24.0 (a test
compares every default here with the library's).

Because a key left out takes the default, a misspelt one is not harmless: ``numLayer: 40``
would be ignored and the model sized with the class's default depth, far smaller than the one
the engine loads. An unread key is therefore refused, naming the key it stands for, when it is
one of: the snake_case spelling of a key the class reads (``num_layers``: spec keys are
camelCase); the same key in another case (``numlayers``); a near miss of one
(:data:`_NEAR_MISS`, ``difflib``'s ratio; no constructor argument of a modelled class is that
close to another, a test checks it against the libraries); or another name
``transformers`` gives the same setting (``T5Config.attribute_map``: ``numHiddenLayers`` is
``numLayers``), which ``PretrainedConfig`` would apply over the key gpu-sizer reads.

Roles: ``Denoiser`` (UNet or diffusion transformer), ``Vae`` (autoencoder), ``TextEncoder``,
``ImageEncoder`` (Wan 2.1 image-to-video's CLIP vision tower), ``SafetyChecker`` (Stable
Diffusion 1.x/2.x's ``StableDiffusionSafetyChecker``, a CLIP vision tower run on the decoded
images).

A nested config object (``CLIPConfig.vision_config`` of the safety checker, the
``text_config`` and ``vision_config`` of Qwen-Image's Qwen2.5-VL) is a key of kind
``obj`` whose default is the mapping of its own keys; missing inner keys take the inner
class's defaults (``transformers`` ``CLIPVisionConfig``), as ``PretrainedConfig`` does.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any, Final

from pydantic.alias_generators import to_camel

__all__ = [
    "COMPONENT_CLASSES",
    "WEIGHTLESS_SUFFIXES",
    "ComponentClass",
    "ConfigKey",
    "Role",
    "config_problems",
    "resolved_config",
    "stray_key",
]


class Role(StrEnum):
    """What a component does in the pipeline."""

    Denoiser = "Denoiser"
    Vae = "Vae"
    TextEncoder = "TextEncoder"
    ImageEncoder = "ImageEncoder"
    SafetyChecker = "SafetyChecker"


@dataclass(frozen=True)
class ConfigKey:
    """One config.json key: its kind (``int``, ``float``, ``bool``, ``str``, ``ints``, ``strs``,
    ``int|ints``, ``bools``, or ``obj``: a nested object whose ``default`` maps its own keys to
    :class:`ConfigKey`), whether ``null`` is allowed, and the class default."""

    kind: str
    default: Any
    nullable: bool = False
    #: ``obj`` keys: camelCase inner name -> (snake_case key, spec), computed once
    inner: Mapping[str, tuple[str, ConfigKey]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.kind == "obj":
            wire = {to_camel(k): (k, v) for k, v in self.default.items()}
            object.__setattr__(self, "inner", wire)


def _k(kind: str, default: Any, nullable: bool = False) -> ConfigKey:
    return ConfigKey(kind, default, nullable or default is None)


@dataclass(frozen=True)
class ComponentClass:
    """A class gpu-sizer can size: its library, role and the config keys it reads.

    ``library`` is the first element of the class's ``model_index.json`` entry (``diffusers``,
    ``transformers``, or a ``diffusers.pipelines`` module such as ``stable_diffusion``).
    """

    library: str
    role: Role
    keys: Mapping[str, ConfigKey]
    #: other names the library gives a key (snake_case alias -> the key), refused when given
    aliases: Mapping[str, str] = field(default_factory=dict)
    #: the nested object (camelCase) whose keys a flat config gives at the top level instead:
    #: transformers moves them in when the object is absent (``Qwen2_5_VLConfig.__post_init__``
    #: "Hub configs are saved as flat dicts": Qwen2.5-VL-7B-Instruct's own config.json)
    flat_into: str = ""
    #: camelCase wire name -> (snake_case key, spec), computed once per class
    wire: Mapping[str, tuple[str, ConfigKey]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire", {to_camel(k): (k, v) for k, v in self.keys.items()})


_CLIP_TEXT: Final = {
    "vocab_size": _k("int", 49408),
    "hidden_size": _k("int", 512),
    "intermediate_size": _k("int", 2048),
    "projection_dim": _k("int", 512),
    "num_hidden_layers": _k("int", 12),
    "num_attention_heads": _k("int", 8),
    "max_position_embeddings": _k("int", 77),
}
_CLIP_VISION: Final = {
    "hidden_size": _k("int", 768),
    "intermediate_size": _k("int", 3072),
    "projection_dim": _k("int", 512),
    "num_hidden_layers": _k("int", 12),
    "num_attention_heads": _k("int", 12),
    "num_channels": _k("int", 3),
    "image_size": _k("int", 224),
    "patch_size": _k("int", 32),
}
_T5: Final = {
    "vocab_size": _k("int", 32128),
    "d_model": _k("int", 512),
    "d_kv": _k("int", 64),
    "d_ff": _k("int", 2048),
    "num_layers": _k("int", 6),
    "num_heads": _k("int", 8),
    "relative_attention_num_buckets": _k("int", 32),
    "feed_forward_proj": _k("str", "relu"),
}
#: ``transformers`` 5.24.0 ``T5Config.attribute_map`` (and ``UMT5Config``'s, the same).
_T5_ALIASES: Final = {
    "hidden_size": "d_model",
    "num_attention_heads": "num_heads",
    "num_hidden_layers": "num_layers",
    "head_dim": "d_kv",
}

#: Every class gpu-sizer sizes, by the class name model_index.json gives it.
COMPONENT_CLASSES: Final[dict[str, ComponentClass]] = {
    "UNet2DConditionModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "sample_size": _k("int", None),
            "in_channels": _k("int", 4),
            "out_channels": _k("int", 4),
            "down_block_types": _k(
                "strs",
                (
                    "CrossAttnDownBlock2D",
                    "CrossAttnDownBlock2D",
                    "CrossAttnDownBlock2D",
                    "DownBlock2D",
                ),
            ),
            "mid_block_type": _k("str", "UNetMidBlock2DCrossAttn", nullable=True),
            "up_block_types": _k(
                "strs",
                ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
            ),
            "block_out_channels": _k("ints", (320, 640, 1280, 1280)),
            "layers_per_block": _k("int|ints", 2),
            "norm_num_groups": _k("int", 32),
            "cross_attention_dim": _k("int|ints", 1280),
            "transformer_layers_per_block": _k("int|ints", 1),
            "attention_head_dim": _k("int|ints", 8),
            "num_attention_heads": _k("int|ints", None),
            "use_linear_projection": _k("bool", False),
            "only_cross_attention": _k("bool", False),
            "class_embed_type": _k("str", None),
            "addition_embed_type": _k("str", None),
            "addition_time_embed_dim": _k("int", None),
            "projection_class_embeddings_input_dim": _k("int", None),
            "encoder_hid_dim": _k("int", None),
            "encoder_hid_dim_type": _k("str", None),
            "time_embedding_type": _k("str", "positional"),
            "time_embedding_dim": _k("int", None),
            "time_cond_proj_dim": _k("int", None),
            "conv_in_kernel": _k("int", 3),
            "conv_out_kernel": _k("int", 3),
            "resnet_time_scale_shift": _k("str", "default"),
            "dual_cross_attention": _k("bool", False),
            "attention_type": _k("str", "default"),
            "class_embeddings_concat": _k("bool", False),
            "reverse_transformer_layers_per_block": _k("ints", None),
        },
    ),
    "SD3Transformer2DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "sample_size": _k("int", 128),
            "patch_size": _k("int", 2),
            "in_channels": _k("int", 16),
            "num_layers": _k("int", 18),
            "attention_head_dim": _k("int", 64),
            "num_attention_heads": _k("int", 18),
            "joint_attention_dim": _k("int", 4096),
            "caption_projection_dim": _k("int", 1152),
            "pooled_projection_dim": _k("int", 2048),
            "out_channels": _k("int", 16),
            "pos_embed_max_size": _k("int", 96),
            "dual_attention_layers": _k("ints", ()),
            "qk_norm": _k("str", None),
        },
    ),
    "FluxTransformer2DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "patch_size": _k("int", 1),
            "in_channels": _k("int", 64),
            "out_channels": _k("int", None),
            "num_layers": _k("int", 19),
            "num_single_layers": _k("int", 38),
            "attention_head_dim": _k("int", 128),
            "num_attention_heads": _k("int", 24),
            "joint_attention_dim": _k("int", 4096),
            "pooled_projection_dim": _k("int", 768),
            "guidance_embeds": _k("bool", False),
            "axes_dims_rope": _k("ints", (16, 56, 56)),
        },
    ),
    "WanTransformer3DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "patch_size": _k("ints", (1, 2, 2)),
            "num_attention_heads": _k("int", 40),
            "attention_head_dim": _k("int", 128),
            "in_channels": _k("int", 16),
            "out_channels": _k("int", 16),
            "text_dim": _k("int", 4096),
            "freq_dim": _k("int", 256),
            "ffn_dim": _k("int", 13824),
            "num_layers": _k("int", 40),
            "cross_attn_norm": _k("bool", True),
            "qk_norm": _k("str", "rms_norm_across_heads", nullable=True),
            "image_dim": _k("int", None),
            "added_kv_proj_dim": _k("int", None),
            "rope_max_seq_len": _k("int", 1024),
            "pos_embed_seq_len": _k("int", None),
        },
    ),
    "HunyuanVideoTransformer3DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "in_channels": _k("int", 16),
            "out_channels": _k("int", 16),
            "num_attention_heads": _k("int", 24),
            "attention_head_dim": _k("int", 128),
            "num_layers": _k("int", 20),
            "num_single_layers": _k("int", 40),
            "num_refiner_layers": _k("int", 2),
            "mlp_ratio": _k("float", 4.0),
            "patch_size": _k("int", 2),
            "patch_size_t": _k("int", 1),
            "qk_norm": _k("str", "rms_norm"),
            "guidance_embeds": _k("bool", True),
            "text_embed_dim": _k("int", 4096),
            "pooled_projection_dim": _k("int", 768),
            "image_condition_type": _k("str", None),
            "rope_axes_dim": _k("ints", (16, 56, 56)),
        },
    ),
    "CogVideoXTransformer3DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "num_attention_heads": _k("int", 30),
            "attention_head_dim": _k("int", 64),
            "in_channels": _k("int", 16),
            "out_channels": _k("int", 16),
            "time_embed_dim": _k("int", 512),
            "ofs_embed_dim": _k("int", None),
            "text_embed_dim": _k("int", 4096),
            "num_layers": _k("int", 30),
            "attention_bias": _k("bool", True),
            "sample_width": _k("int", 90),
            "sample_height": _k("int", 60),
            "sample_frames": _k("int", 49),
            "patch_size": _k("int", 2),
            "patch_size_t": _k("int", None),
            "temporal_compression_ratio": _k("int", 4),
            "max_text_seq_length": _k("int", 226),
            "norm_elementwise_affine": _k("bool", True),
            "use_rotary_positional_embeddings": _k("bool", False),
            "use_learned_positional_embeddings": _k("bool", False),
            "patch_bias": _k("bool", True),
        },
    ),
    "LTXVideoTransformer3DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "in_channels": _k("int", 128),
            "out_channels": _k("int", 128),
            "patch_size": _k("int", 1),
            "patch_size_t": _k("int", 1),
            "num_attention_heads": _k("int", 32),
            "attention_head_dim": _k("int", 64),
            "cross_attention_dim": _k("int", 2048),
            "num_layers": _k("int", 28),
            "norm_elementwise_affine": _k("bool", False),
            "caption_channels": _k("int", 4096),
            "attention_bias": _k("bool", True),
            "attention_out_bias": _k("bool", True),
        },
    ),
    "QwenImageTransformer2DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "patch_size": _k("int", 2),
            "in_channels": _k("int", 64),
            "out_channels": _k("int", 16, nullable=True),
            "num_layers": _k("int", 60),
            "attention_head_dim": _k("int", 128),
            "num_attention_heads": _k("int", 24),
            "joint_attention_dim": _k("int", 3584),
            "guidance_embeds": _k("bool", False),
            "axes_dims_rope": _k("ints", (16, 56, 56)),
            "zero_cond_t": _k("bool", False),
            "use_additional_t_cond": _k("bool", False),
            "use_layer3d_rope": _k("bool", False),
        },
    ),
    "AutoencoderKL": ComponentClass(
        "diffusers",
        Role.Vae,
        {
            "in_channels": _k("int", 3),
            "out_channels": _k("int", 3),
            "down_block_types": _k("strs", ("DownEncoderBlock2D",)),
            "up_block_types": _k("strs", ("UpDecoderBlock2D",)),
            "block_out_channels": _k("ints", (64,)),
            "layers_per_block": _k("int", 1),
            "latent_channels": _k("int", 4),
            "norm_num_groups": _k("int", 32),
            "sample_size": _k("int", 32),
            "force_upcast": _k("bool", True),
            "use_quant_conv": _k("bool", True),
            "use_post_quant_conv": _k("bool", True),
            "mid_block_add_attention": _k("bool", True),
        },
    ),
    "AutoencoderKLWan": ComponentClass(
        "diffusers",
        Role.Vae,
        {
            "base_dim": _k("int", 96),
            "decoder_base_dim": _k("int", None),
            "z_dim": _k("int", 16),
            "dim_mult": _k("ints", (1, 2, 4, 4)),
            "num_res_blocks": _k("int", 2),
            "attn_scales": _k("ints", ()),
            "temperal_downsample": _k("bools", (False, True, True)),
            "is_residual": _k("bool", False),
            "in_channels": _k("int", 3),
            "out_channels": _k("int", 3),
            "patch_size": _k("int", None),
            "scale_factor_temporal": _k("int", 4),
            "scale_factor_spatial": _k("int", 8),
        },
    ),
    "AutoencoderKLQwenImage": ComponentClass(
        "diffusers",
        Role.Vae,
        {
            "base_dim": _k("int", 96),
            "z_dim": _k("int", 16),
            "dim_mult": _k("ints", (1, 2, 4, 4)),
            "num_res_blocks": _k("int", 2),
            "attn_scales": _k("ints", ()),
            "temperal_downsample": _k("bools", (False, True, True)),
            "input_channels": _k("int", 3),
        },
    ),
    "AutoencoderKLHunyuanVideo": ComponentClass(
        "diffusers",
        Role.Vae,
        {
            "in_channels": _k("int", 3),
            "out_channels": _k("int", 3),
            "latent_channels": _k("int", 16),
            "down_block_types": _k("strs", ("HunyuanVideoDownBlock3D",) * 4),
            "up_block_types": _k("strs", ("HunyuanVideoUpBlock3D",) * 4),
            "block_out_channels": _k("ints", (128, 256, 512, 512)),
            "layers_per_block": _k("int", 2),
            "norm_num_groups": _k("int", 32),
            "spatial_compression_ratio": _k("int", 8),
            "temporal_compression_ratio": _k("int", 4),
            "mid_block_add_attention": _k("bool", True),
        },
    ),
    "AutoencoderKLCogVideoX": ComponentClass(
        "diffusers",
        Role.Vae,
        {
            "in_channels": _k("int", 3),
            "out_channels": _k("int", 3),
            "down_block_types": _k("strs", ("CogVideoXDownBlock3D",) * 4),
            "up_block_types": _k("strs", ("CogVideoXUpBlock3D",) * 4),
            "block_out_channels": _k("ints", (128, 256, 256, 512)),
            "latent_channels": _k("int", 16),
            "layers_per_block": _k("int", 3),
            "norm_num_groups": _k("int", 32),
            "temporal_compression_ratio": _k("float", 4),
            "force_upcast": _k("bool", True),
            "use_quant_conv": _k("bool", False),
            "use_post_quant_conv": _k("bool", False),
        },
    ),
    "AutoencoderKLLTXVideo": ComponentClass(
        "diffusers",
        Role.Vae,
        {
            "in_channels": _k("int", 3),
            "out_channels": _k("int", 3),
            "latent_channels": _k("int", 128),
            "block_out_channels": _k("ints", (128, 256, 512, 512)),
            "decoder_block_out_channels": _k("ints", (128, 256, 512, 512)),
            "layers_per_block": _k("ints", (4, 3, 3, 3, 4)),
            "decoder_layers_per_block": _k("ints", (4, 3, 3, 3, 4)),
            "spatio_temporal_scaling": _k("bools", (True, True, True, False)),
            "decoder_spatio_temporal_scaling": _k("bools", (True, True, True, False)),
            "decoder_inject_noise": _k("bools", (False, False, False, False, False)),
            "upsample_residual": _k("bools", (False, False, False, False)),
            "upsample_factor": _k("ints", (1, 1, 1, 1)),
            "timestep_conditioning": _k("bool", False),
            "patch_size": _k("int", 4),
            "patch_size_t": _k("int", 1),
        },
    ),
    "MochiTransformer3DModel": ComponentClass(
        "diffusers",
        Role.Denoiser,
        {
            "patch_size": _k("int", 2),
            "num_attention_heads": _k("int", 24),
            "attention_head_dim": _k("int", 128),
            "num_layers": _k("int", 48),
            "pooled_projection_dim": _k("int", 1536),
            "in_channels": _k("int", 12),
            "out_channels": _k("int", None),
            "text_embed_dim": _k("int", 4096),
            "time_embed_dim": _k("int", 256),
            "activation_fn": _k("str", "swiglu"),
        },
    ),
    "AutoencoderKLMochi": ComponentClass(
        "diffusers",
        Role.Vae,
        {
            "in_channels": _k("int", 15),
            "out_channels": _k("int", 3),
            "encoder_block_out_channels": _k("ints", (64, 128, 256, 384)),
            "decoder_block_out_channels": _k("ints", (128, 256, 512, 768)),
            "latent_channels": _k("int", 12),
            "layers_per_block": _k("ints", (3, 3, 4, 6, 3)),
            "temporal_expansions": _k("ints", (1, 2, 3)),
            "spatial_expansions": _k("ints", (2, 2, 2)),
            "add_attention_block": _k("bools", (False, True, True, True, True)),
        },
    ),
    "CLIPTextModel": ComponentClass("transformers", Role.TextEncoder, dict(_CLIP_TEXT)),
    "CLIPTextModelWithProjection": ComponentClass(
        "transformers", Role.TextEncoder, dict(_CLIP_TEXT)
    ),
    "CLIPVisionModel": ComponentClass("transformers", Role.ImageEncoder, dict(_CLIP_VISION)),
    "CLIPVisionModelWithProjection": ComponentClass(
        "transformers", Role.ImageEncoder, dict(_CLIP_VISION)
    ),
    "T5EncoderModel": ComponentClass(
        "transformers", Role.TextEncoder, dict(_T5), aliases=_T5_ALIASES
    ),
    "UMT5EncoderModel": ComponentClass(
        "transformers",
        Role.TextEncoder,
        {
            "vocab_size": _k("int", 250112),
            "d_model": _k("int", 512),
            "d_kv": _k("int", 64),
            "d_ff": _k("int", 1024),
            "num_layers": _k("int", 8),
            "num_heads": _k("int", 6),
            "relative_attention_num_buckets": _k("int", 32),
            "feed_forward_proj": _k("str", "gated-gelu"),
        },
        aliases=_T5_ALIASES,
    ),
    "StableDiffusionSafetyChecker": ComponentClass(
        "stable_diffusion",
        Role.SafetyChecker,
        {
            "projection_dim": _k("int", 512),
            "vision_config": _k(
                "obj",
                {
                    "hidden_size": _k("int", 768),
                    "intermediate_size": _k("int", 3072),
                    "num_hidden_layers": _k("int", 12),
                    "num_attention_heads": _k("int", 12),
                    "num_channels": _k("int", 3),
                    "image_size": _k("int", 224),
                    "patch_size": _k("int", 32),
                },
            ),
        },
    ),
    "LlamaModel": ComponentClass(
        "transformers",
        Role.TextEncoder,
        {
            "vocab_size": _k("int", 32000),
            "hidden_size": _k("int", 4096),
            "intermediate_size": _k("int", 11008),
            "num_hidden_layers": _k("int", 32),
            "num_attention_heads": _k("int", 32),
            "num_key_value_heads": _k("int", None),
            "head_dim": _k("int", None),
            "attention_bias": _k("bool", False),
            "mlp_bias": _k("bool", False),
        },
    ),
    "Qwen2_5_VLForConditionalGeneration": ComponentClass(
        "transformers",
        Role.TextEncoder,
        {
            "text_config": _k(
                "obj",
                {
                    "vocab_size": _k("int", 152064),
                    "hidden_size": _k("int", 8192),
                    "intermediate_size": _k("int", 29568),
                    "num_hidden_layers": _k("int", 80),
                    "num_attention_heads": _k("int", 64),
                    "num_key_value_heads": _k("int", 8, nullable=True),
                },
            ),
            "vision_config": _k(
                "obj",
                {
                    "depth": _k("int", 32),
                    "hidden_size": _k("int", 3584),
                    "intermediate_size": _k("int", 3420),
                    "num_heads": _k("int", 16),
                    "in_channels": _k("int", 3),
                    "patch_size": _k("int", 14),
                    "temporal_patch_size": _k("int", 2),
                    "spatial_merge_size": _k("int", 2),
                    "out_hidden_size": _k("int", 3584),
                },
            ),
            "tie_word_embeddings": _k("bool", False),
        },
        flat_into="textConfig",
    ),
}

#: Class-name endings of pipeline parts without weights (tokenizers, schedulers, processors):
#: ``import-diffusers`` leaves them out of ``spec.model.pipeline.components``.
WEIGHTLESS_SUFFIXES: Final = (
    "Tokenizer",
    "TokenizerFast",
    "Scheduler",
    "ImageProcessor",
    "FeatureExtractor",
    "Processor",
)

_BOUND: Final = 10_000_000
#: The most a key that repeats modules may ask for. The memory model builds a component's
#: modules once per config (parameter counts, offload and casting walks), and a spec that does
#: not fit has its fixes estimated on top, so the first sight of a deep config costs time in
#: proportion to its depth: a UNet of 16 levels x 16 resnets x 64 transformer layers took 2.2 s
#: of CPU to judge, and a pipeline may hold 16 such components. Published pipelines stay far
#: below these: 60 DiT blocks (HunyuanVideo, Qwen-Image), 10 transformer layers per UNet level
#: (SDXL), 2-4 resnets per UNet or VAE level, 4-5 levels. Layer counts get the bound LLM
#: configs have (``LIMITS["layers"]`` of ``gpu_sizer.api.spec.bounds``, 1,024, written out here
#: since that package imports this module; tests/api/test_component_depth.py holds them equal):
#: a DiT or an encoder of 1,024 layers is judged in 0.15 s. At 8 levels x 8 resnets x 16
#: transformer layers a UNet takes 0.17 s.
_DEPTH_BOUNDS: Final[dict[str, int]] = {
    "num_layers": 1024,
    "num_single_layers": 1024,
    "num_hidden_layers": 1024,
    "depth": 1024,
    "num_refiner_layers": 1024,
    "layers_per_block": 8,
    "decoder_layers_per_block": 8,
    "num_res_blocks": 8,
    "transformer_layers_per_block": 16,
    "reverse_transformer_layers_per_block": 16,
}
#: The most items a list key may hold: one per UNet or VAE level (4-5 in published configs;
#: their product with the per-level depths above is what gets built); lists of layer indices
#: may name any layer.
_MAX_ITEMS: Final = 8
_ITEM_BOUNDS: Final[dict[str, int]] = {"dual_attention_layers": 1024}
#: List kinds and their item type (``int|ints`` as a list is ``ints``).
_ITEM: Final[dict[str, type]] = {"ints": int, "int|ints": int, "strs": str, "bools": bool}


#: Keys whose zero is a size diffusers builds: layer counts (a stage without resnets, a DiT
#: without single-stream blocks) and lists of layer indices. Every other integer the memory model
#: reads is a width, a head count, a patch, a factor or a channel count, and zero there is a
#: model that cannot exist (``nn.Conv2d`` with ``kernel_size=0``, a GroupNorm of no groups, an
#: attention of no heads): diffusers raises building it, or divides by it, so it is refused with
#: the key named rather than reach the estimate.
_ZERO_ALLOWED: Final = frozenset(_DEPTH_BOUNDS) | {"dual_attention_layers", "attn_scales"}


def _limits(key: str) -> tuple[int, int, int]:
    """(smallest integer, largest integer, most list items) the snake_case ``key`` may hold."""
    low = 0 if key in _ZERO_ALLOWED else 1
    return low, _DEPTH_BOUNDS.get(key, _BOUND), _ITEM_BOUNDS.get(key, _MAX_ITEMS)


def _check(
    kind: str, value: Any, low: int = 0, bound: int = _BOUND, items: int = _MAX_ITEMS
) -> str | None:
    """Why ``value`` is not of ``kind``, or ``None`` (``obj`` values are checked key by key in
    :func:`config_problems`); integers (and list items) from ``low`` to ``bound``, lists at
    most ``items`` long (:func:`_limits`)."""
    t = type(value)
    if t is int:  # the common cases first, exactly (bool is not int here)
        if kind == "int" or kind == "int|ints":
            return None if low <= value <= bound else _out_of_range(value, low, bound)
        if kind == "float" and 0 < value <= _BOUND:
            return None
    elif t is list and kind in _ITEM:
        of = _ITEM[kind]
        if (
            len(value) <= items
            and all(type(v) is of for v in value)
            and (of is not int or all(low <= v <= bound for v in value))
        ):
            return None
    elif (t is str and kind == "str") or (t is bool and kind == "bool"):
        return None
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return "must be an integer" + _quoted(value)
        if not low <= value <= bound:
            return _out_of_range(value, low, bound)
        return None
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return "must be a number" + _quoted(value)
        return None if 0 < value <= _BOUND else f"must be above 0 and at most {_BOUND}"
    if kind == "bool":
        return None if isinstance(value, bool) else "must be true or false" + _quoted(value)
    if kind == "str":
        return None if isinstance(value, str) else "must be a string"
    if kind in ("ints", "strs", "bools"):
        if not isinstance(value, list | tuple):
            return "must be a list"
        if len(value) > items:
            return f"must have at most {items} items, not {len(value)}"
        item = {"ints": "int", "strs": "str", "bools": "bool"}[kind]
        for i, v in enumerate(value):
            bad = _check(item, v, low, bound)
            if bad is not None:
                return f"item {i} {bad}"
        return None
    if kind == "int|ints":
        return _check(
            "ints" if isinstance(value, list | tuple) else "int", value, low, bound, items
        )
    if kind == "obj":
        return None if isinstance(value, Mapping) else "must be an object"
    raise AssertionError(kind)


def _quoted(value: Any) -> str:
    """The hint for a number or boolean written as a string (``"40"``, ``"true"``: YAML reads a
    quoted value as a string, and the library's config would keep it as one and fail)."""
    if not isinstance(value, str):
        return ""
    text = value.strip()
    if text.lower() in ("true", "false") or text.lstrip("+-").replace(".", "", 1).isdigit():
        return f", not the string {value!r}: write it without quotes"
    return f", not the string {value!r}"


def _out_of_range(value: int, low: int, bound: int) -> str:
    if low == 1 and value < 1:
        return f"must be at least 1, not {value} (a size of 0 builds no module)"
    return f"must be between {low} and {bound}, not {value}"


def _problems(
    wire: Mapping[str, tuple[str, ConfigKey]], config: Mapping[str, Any], prefix: str
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for name, value in config.items():
        known = wire.get(name)
        if known is None:
            continue  # a key the memory model does not read: kept and ignored
        spec = known[1]
        if value is None:
            if not spec.nullable:
                problems.append((prefix + name, "must not be null"))
            continue
        bad = _check(spec.kind, value, *_limits(known[0]))
        if bad is not None:
            problems.append((prefix + name, bad))
        elif spec.kind == "obj":
            problems += _problems(spec.inner, value, f"{prefix}{name}.")
    return problems


def _resolve_if_valid(
    wire: Mapping[str, tuple[str, ConfigKey]], config: Mapping[str, Any]
) -> dict[str, Any] | None:
    """:func:`_resolve` of ``config`` in the same pass as its checks; ``None`` at the first key
    with a problem (:func:`_problems` then says which, in the config's order). Scalars of the
    key's own type are checked inline: this runs for every component of every spec parsed."""
    out: dict[str, Any] = {}
    get = config.get
    for name, key, kind, spec, low, bound, items in _plan(wire):
        value = get(name, _MISSING)
        t = type(value)
        if t is int and (kind == "int" or kind == "int|ints"):
            if not low <= value <= bound:
                return None
        elif (t is str and kind == "str") or (t is bool and kind == "bool"):
            pass
        elif value is _MISSING or value is None:
            if value is None and not spec.nullable:
                return None
            if kind == "obj":
                out[key] = _resolve(spec.inner, {})
                continue
            if value is _MISSING:
                value = spec.default
        elif _check(kind, value, low, bound, items) is not None:
            return None
        elif kind == "obj":
            inner = _resolve_if_valid(spec.inner, value)
            if inner is None:
                return None
            out[key] = inner
            continue
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


_Step = tuple[str, str, str, ConfigKey, int, int, int]
_PLANS: Final[dict[int, tuple[Mapping[str, Any], list[_Step]]]] = {}


def _plan(wire: Mapping[str, tuple[str, ConfigKey]]) -> list[_Step]:
    """(camelCase key, snake_case key, kind, key spec, smallest and largest integer, most list
    items) of each key of ``wire``, built once per wire table (the tables are module constants;
    each entry keeps its table alive, so the id stays its own)."""
    hit = _PLANS.get(id(wire))
    if hit is None or hit[0] is not wire:
        steps = [(n, k, c.kind, c, *_limits(k)) for n, (k, c) in wire.items()]
        hit = _PLANS[id(wire)] = (wire, steps)
    return hit[1]


def checked_config(
    cls: str, config: Mapping[str, Any]
) -> tuple[list[tuple[str, str]], dict[str, Any] | None]:
    """:func:`config_problems` and, when there are none, :func:`resolved_config` (``None`` for
    a class gpu-sizer does not know), in one pass over the keys the class reads."""
    known = COMPONENT_CLASSES.get(cls)
    if known is None:
        return [], None
    config = _nested_flat(known, config)
    out = _resolve_if_valid(known.wire, config)
    strays = _strays(cls, known.wire, config, "")
    if out is None:
        return _problems(known.wire, config, "") + strays, None
    refused = strays + _refusals(cls, out)
    return (refused, None) if refused else ([], out)


#: How close (``difflib.SequenceMatcher.ratio``) an unread key must be to a key the class reads
#: to be taken for a misspelling of it: ``numLayer``, ``inChannel``, ``hidenSize`` are (0.94 to
#: 0.95); the closest pair of real constructor arguments of the classes modelled,
#: ``crossAttentionNorm`` and ``crossAttentionDim``, is 0.86.
_NEAR_MISS: Final = 0.9


def _strays(
    cls: str, wire: Mapping[str, tuple[str, ConfigKey]], config: Mapping[str, Any], prefix: str
) -> list[tuple[str, str]]:
    """(key, message) for each key of ``config`` that ``cls`` does not read but that stands for
    one it does (module docstring), nested objects' keys included; empty for the keys of a
    published config.json (a test checks every one gpu-sizer ships)."""
    problems: list[tuple[str, str]] = []
    if not config.keys() <= wire.keys():  # a set operation: most configs have no unread key
        for name in config:
            message = None if name in wire else stray_key(cls, name, prefix)
            if message is not None:
                problems.append((prefix + name, message))
    for name in _nested(cls, prefix):
        value = config.get(name)
        if isinstance(value, Mapping):
            problems += _strays(cls, wire[name][1].inner, value, f"{prefix}{name}.")
    return problems


@lru_cache(maxsize=256)
def _nested(cls: str, prefix: str) -> tuple[str, ...]:
    """The keys of kind ``obj`` of ``cls`` (under nested object ``prefix``)."""
    return tuple(name for name, (_, spec) in _wire(cls, prefix).items() if spec.kind == "obj")


def _wire(cls: str, prefix: str) -> Mapping[str, tuple[str, ConfigKey]]:
    wire = COMPONENT_CLASSES[cls].wire
    for part in filter(None, prefix.split(".")):
        wire = wire[part][1].inner
    return wire


@lru_cache(maxsize=4096)
def stray_key(cls: str, name: str, prefix: str = "") -> str | None:
    """Why ``name``, a camelCase config key of known class ``cls`` that it does not read
    (under nested object ``prefix``, ``visionConfig.``), is refused: it stands for a key the
    class reads (module docstring), so as written the model would be sized with that key's
    default; ``None`` when it is just a key the memory model does not read.

    Cached: a published config repeats the same unread keys in every spec, and this runs on
    every admission. :raises KeyError: ``cls`` is not in :data:`COMPONENT_CLASSES`."""
    known = COMPONENT_CLASSES[cls]
    wire = _wire(cls, prefix)
    aliases = {n: k for a, k in known.aliases.items() for n in (a, to_camel(a))}
    alias = None if prefix else aliases.get(name)
    if alias is not None:
        key = to_camel(alias)
        return (
            f"is another name for {key} in {cls}'s config (transformers 5.24.0 "
            f"attribute_map): the engine loads it as {key}, which gpu-sizer reads under that "
            f"name only; write {key}"
        )
    target, why = _target(wire, name)
    if target is None:
        return None
    default = wire[target][1].default
    shown = "" if wire[target][1].kind == "obj" else f" ({default!r})"
    return (
        f"is not a key {cls} reads{why}: as written it is ignored and {target} takes the class "
        f"default{shown}, not the value given; write {target}"
    )


def _target(wire: Mapping[str, tuple[str, ConfigKey]], name: str) -> tuple[str | None, str]:
    """The key of ``wire`` that unread key ``name`` stands for, and how it differs."""
    camel = to_camel(name)
    if camel != name and camel in wire:
        return camel, f" (spec keys are camelCase: config.json's {name} is {camel} here)"
    folded = {k.lower(): k for k in wire}
    key = folded.get(name.lower().replace("_", ""))
    if key is not None:
        return key, f" (keys are case-sensitive: did you mean {key}?)"
    close = difflib.get_close_matches(name, list(wire), n=1, cutoff=_NEAR_MISS)
    if close:
        return close[0], f" (did you mean {close[0]}?)"
    return None, ""


def config_problems(cls: str, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(camelCase key, message) for each key of ``config`` that ``cls`` reads and that has the
    wrong type (inner keys of a nested object as ``visionConfig.hiddenSize``), or, when the
    types are right, each combination of values the class's library refuses to build
    (:data:`_RULES`); empty for classes gpu-sizer does not know (their config is not read)."""
    return checked_config(cls, config)[0]


# --- values the libraries refuse ---------------------------------------------------------------
#
# Each key alone may be well typed and in range while the combination cannot be built: the
# library raises in the constructor (or, for Wan's rotary embedding, asserts), so the engine
# never starts. Such a config is refused here, naming the key, rather than sized: an estimate of
# a model that cannot exist would admit a workload that fails at load. Each rule cites the check
# it mirrors, in diffusers 0.42.1, transformers 5.24.0 or torch 2.13.
_Rule = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


def _heads_divide(hidden: str, heads: str, prefix: str = "") -> _Rule:
    """``hidden`` must be a multiple of ``heads``: transformers' ``validate_architecture`` of
    ``CLIPTextConfig``, ``CLIPVisionConfig`` and ``LlamaConfig`` ("The hidden size (...) is not
    a multiple of the number of attention heads")."""

    def rule(c: Mapping[str, Any]) -> list[tuple[str, str]]:
        h, n = c[hidden], c[heads]
        if h % n:
            return [
                (
                    prefix + to_camel(hidden),
                    f"{h} must be a multiple of {to_camel(heads)} ({n}): transformers refuses "
                    "a hidden size the attention heads do not divide",
                )
            ]
        return []

    return rule


def _group_norms(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``normNumGroups`` must divide every ``blockOutChannels`` entry: each level's resnets and
    attention normalize its channels with ``nn.GroupNorm(norm_num_groups, channels)``, and
    torch's ``GroupNorm.__init__`` raises "num_channels must be divisible by num_groups"."""
    groups = c["norm_num_groups"]
    if groups is None:
        return []
    bad = [ch for ch in c["block_out_channels"] if ch % groups]
    if bad:
        return [
            (
                "normNumGroups",
                f"{groups} must divide every blockOutChannels entry ({bad[0]} is not a multiple"
                f" of it): torch's GroupNorm refuses it; use a divisor, such as the"
                f" published 32",
            )
        ]
    return []


def _per_level(levels: str, *keys: str, extra: int = 0, at_least: bool = False) -> _Rule:
    """Each list key of ``keys`` must have one item per entry of ``levels`` (plus ``extra``),
    or with ``at_least`` at least that many: the library reads item ``i`` for level ``i``, so a
    shorter list fails to build (``IndexError`` in the encoder and decoder loops), and diffusers'
    ``UNet2DConditionModel._check_config`` refuses any other length of the lists it checks."""

    def rule(c: Mapping[str, Any]) -> list[tuple[str, str]]:
        n = len(c[levels]) + extra
        out = []
        for key in keys:
            value = c[key]
            if isinstance(value, tuple) and (len(value) < n or (not at_least and len(value) > n)):
                per = f"one per {to_camel(levels)} entry" + (f", plus {extra}" if extra > 0 else "")
                if extra < 0:
                    per = f"one fewer than {to_camel(levels)} has"
                need = f"at least {n}" if at_least else str(n)
                out.append((to_camel(key), f"must have {need} items ({per}), not {len(value)}"))
        return out

    return rule


def _vae_levels(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``blockOutChannels`` needs an entry per down block and per up block."""
    n, have = (
        max(len(c["down_block_types"]), len(c["up_block_types"])),
        len(c["block_out_channels"]),
    )
    if have >= n:
        return []
    per = "one per downBlockTypes and upBlockTypes entry"
    return [("blockOutChannels", f"must have at least {n} items ({per}), not {have}")]


def _rope_head_dim(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Wan's ``attentionHeadDim`` must be even: ``WanRotaryPosEmbed`` splits it into temporal,
    height and width parts, and ``get_1d_rotary_pos_embed`` asserts each is even."""
    d = c["attention_head_dim"]
    return [] if d >= 2 and d % 2 == 0 else [("attentionHeadDim", f"must be even, not {d}")]


def _exact_items(key: str, n: int, why: str) -> _Rule:
    """The list ``key`` must have exactly ``n`` items, for the reason ``why`` (the library
    unpacks it, or loops over that many)."""

    def rule(c: Mapping[str, Any]) -> list[tuple[str, str]]:
        have = len(c[key])
        return [] if have == n else [(to_camel(key), f"must have {n} items, not {have}: {why}")]

    return rule


def _non_empty(key: str, why: str) -> _Rule:
    """``key`` must list at least one item: ``why`` the library cannot build without one."""

    def rule(c: Mapping[str, Any]) -> list[tuple[str, str]]:
        return [] if c[key] else [(to_camel(key), f"must have at least 1 item: {why}")]

    return rule


_WAN_VAE_LEVELS: Final = (
    _non_empty(
        "dim_mult",
        "the Wan VAE's encoder takes its last level's width from the loop over dim_mult, which "
        "an empty list never enters (UnboundLocalError at construction)",
    ),
    _per_level("dim_mult", "temperal_downsample", extra=-1, at_least=True),
)


def _rope_axes(axes: str, owner: str) -> _Rule:
    """A 3-axis rotary embedding (frames or text position, height, width) must split the
    attention head exactly: ``owner`` builds one ``get_1d_rotary_pos_embed`` table per axis of
    ``axes`` (each an even size, which that function asserts) and concatenates them, and
    ``apply_rotary_emb`` multiplies every query and key head by the result, so a head of
    another size fails at the first attention with a shape mismatch."""
    ok = _exact_items(axes, 3, f"{owner} builds one rotary table per axis (t, h, w)")

    def rule(c: Mapping[str, Any]) -> list[tuple[str, str]]:
        wrong = ok(c)
        if wrong:
            return wrong
        dims, head, name = c[axes], c["attention_head_dim"], to_camel(axes)
        odd = [d for d in dims if d % 2]
        if odd:
            return [
                (name, f"every item must be even, not {odd[0]}: get_1d_rotary_pos_embed asserts it")
            ]
        if sum(dims) != head:
            split = " + ".join(str(d) for d in dims)
            return [
                (
                    "attentionHeadDim",
                    f"{head} must equal the sum of {name} ({split} = {sum(dims)}): the rotary "
                    "embedding covers the whole attention head, and diffusers fails at the "
                    f"first attention otherwise; set {name} to axes summing to {head}",
                )
            ]
        return []

    return rule


def _llama_heads(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """LlamaConfig's rotary check (transformers ``RotaryEmbeddingConfigMixin``: a fully rotated
    head above 4 must be even) and its grouped-query attention (``repeat_kv`` repeats each of
    ``num_key_value_heads`` heads ``num_attention_heads // num_key_value_heads`` times)."""
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = c["head_dim"] or c["hidden_size"] // max(heads, 1)
    out = []
    if head_dim > 4 and head_dim % 2:
        out.append(("headDim", f"the head dimension {head_dim} must be even (RoPE)"))
    if kv is not None and (kv < 1 or heads % kv):
        out.append(
            (
                "numKeyValueHeads",
                f"{kv} must divide numAttentionHeads ({heads}): the model builds, but its first "
                "forward fails when repeat_kv's key and value heads do not match the queries'",
            )
        )
    return out


def _mochi_transformer(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``MochiTransformer3DModel``: ``attentionHeadDim`` must be even (``MochiAttnProcessor2_0``
    rotates the even and odd halves of each head by ``pos_frequencies`` of ``head_dim // 2``:
    an odd head fails at the first attention), and ``textEmbedDim`` a multiple of the 8 heads
    of ``MochiAttentionPool`` (its ``kv.unflatten(2, (2, 8, D // 8))`` fails otherwise)."""
    out = []
    d = c["attention_head_dim"]
    if d % 2:
        out.append(("attentionHeadDim", f"must be even, not {d}: the rotary embedding pairs it"))
    t = c["text_embed_dim"]
    if t % 8:
        out.append(
            (
                "textEmbedDim",
                f"{t} must be a multiple of 8: MochiAttentionPool splits the text width into 8 "
                "heads and fails at the first forward otherwise",
            )
        )
    return out


def _qwen_image_call(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What ``QwenImageTransformer2DModel.forward`` cannot run as ``QwenImagePipeline`` calls it
    (diffusers 0.42.1 ``transformer_qwenimage.py``): ``guidanceEmbeds`` makes ``forward`` call
    ``time_text_embed(timestep, guidance, hidden_states, additional_t_cond)``, one argument more
    than ``QwenTimestepProjEmbeddings.forward`` takes (a ``TypeError``); ``useAdditionalTCond``
    makes that embedding raise when ``addition_t_cond`` is not given, and the pipeline never
    gives it."""
    out = []
    if c["guidance_embeds"]:
        out.append(
            (
                "guidanceEmbeds",
                "must be false: QwenImageTransformer2DModel builds no guidance embedder, and its "
                "forward passes the guidance to QwenTimestepProjEmbeddings, which takes no such "
                "argument (TypeError at the first denoising step)",
            )
        )
    if c["use_additional_t_cond"]:
        out.append(
            (
                "useAdditionalTCond",
                "must be false for QwenImagePipeline: QwenTimestepProjEmbeddings raises when "
                "addition_t_cond is not given, and the pipeline does not give it",
            )
        )
    return out


def _mochi_vae(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``AutoencoderKLMochi``: ``MochiEncoder3D`` reads ``layers_per_block[i]`` and
    ``add_attention_block[i]`` for each encoder width and ``temporal/spatial_expansions[i]`` for
    each down block, ``MochiDecoder3D`` the same lists from the end for each decoder width, so
    shorter lists fail to build (``IndexError``); every width feeds ``nn.GroupNorm(32, ch)``
    (``MochiChunkedGroupNorm3D``), which torch refuses unless 32 divides it."""
    enc, dec = c["encoder_block_out_channels"], c["decoder_block_out_channels"]
    levels = max(len(enc), len(dec))
    need = {
        "encoder_block_out_channels": 1,
        "decoder_block_out_channels": 1,
        "layers_per_block": levels,
        "add_attention_block": len(enc),
        "temporal_expansions": levels - 1,
        "spatial_expansions": levels - 1,
    }
    out = [
        (to_camel(key), f"must have at least {n} items (one per block width), not {len(c[key])}")
        for key, n in need.items()
        if len(c[key]) < n
    ]
    for key in ("encoder_block_out_channels", "decoder_block_out_channels"):
        bad = [ch for ch in c[key] if ch % 32]
        if bad:
            out.append(
                (
                    to_camel(key),
                    f"every item must be a multiple of 32, not {bad[0]}: each width is "
                    "normalized by nn.GroupNorm(32, channels), which torch refuses otherwise",
                )
            )
    return out


def _qwen2_5_vl_heads(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``Qwen2_5_VLAttention.__init__`` raises when the heads do not divide the text hidden size,
    and ``repeat_kv`` needs ``numKeyValueHeads`` to divide the heads (transformers 5.24
    ``modeling_qwen2_5_vl.py``); ``Qwen2_5_VLRotaryEmbedding.forward`` splits the rotary
    frequencies (half the head) by ``mrope_section``, which gpu-sizer does not read, so only the
    head its default fits (128) is admitted; the vision tower's ``Qwen2_5_VLVisionAttention``
    splits its ``hiddenSize`` into ``numHeads`` heads of ``hiddenSize // numHeads``."""
    text, vision = c["text_config"], c["vision_config"]
    out = _heads_divide("hidden_size", "num_attention_heads", "textConfig.")(text)
    heads, kv = text["num_attention_heads"], text["num_key_value_heads"]
    if kv is not None and heads % kv:
        out.append(
            (
                "textConfig.numKeyValueHeads",
                f"{kv} must divide numAttentionHeads ({heads}): repeat_kv's key and value heads "
                "must match the queries'",
            )
        )
    h = text["hidden_size"]
    if h % heads == 0 and h // heads != 128:
        out.append(
            (
                "textConfig.numAttentionHeads",
                f"{heads} heads make a text head of {h // heads}: gpu-sizer sizes Qwen2.5-VL text "
                "models whose head is 128, the one every published checkpoint has, since "
                "Qwen2_5_VLRotaryEmbedding splits half the head by ropeScaling's mrope_section "
                "(16 + 24 + 24 when not given), a key gpu-sizer does not read, and another head "
                "with that split fails at the first forward; use hiddenSize / numAttentionHeads "
                "= 128",
            )
        )
    out += _heads_divide("hidden_size", "num_heads", "visionConfig.")(vision)
    return out


_CLIP_RULES: Final = (_heads_divide("hidden_size", "num_attention_heads"),)
#: The 2D and video VAEs' encoders loop over ``down_block_types`` and their decoders over
#: ``up_block_types``, reading ``block_out_channels`` by index (a longer list builds; gpu-sizer
#: then reports the component as not sized, since diffusers pairs the lists differently).
_VAE_RULES: Final = (_vae_levels, _group_norms)
#: The rules of each class, run on its resolved config once every key is well typed.
_RULES: Final[dict[str, tuple[_Rule, ...]]] = {
    "UNet2DConditionModel": (
        _per_level(
            "down_block_types",
            "up_block_types",
            "block_out_channels",
            "layers_per_block",
            "cross_attention_dim",
            "attention_head_dim",
            "num_attention_heads",
        ),
        _per_level("down_block_types", "transformer_layers_per_block", at_least=True),
        _group_norms,
    ),
    "AutoencoderKL": _VAE_RULES,
    "AutoencoderKLHunyuanVideo": _VAE_RULES,
    "AutoencoderKLCogVideoX": _VAE_RULES,
    "AutoencoderKLLTXVideo": (
        _per_level(
            "block_out_channels", "spatio_temporal_scaling", "layers_per_block", at_least=True
        ),
        _per_level(
            "decoder_block_out_channels",
            "decoder_spatio_temporal_scaling",
            "upsample_residual",
            "upsample_factor",
            at_least=True,
        ),
        _per_level(
            "decoder_block_out_channels",
            "decoder_layers_per_block",
            "decoder_inject_noise",
            extra=1,
            at_least=True,
        ),
    ),
    "AutoencoderKLWan": _WAN_VAE_LEVELS,
    "AutoencoderKLMochi": (_mochi_vae,),
    "MochiTransformer3DModel": (_mochi_transformer,),
    "WanTransformer3DModel": (
        _exact_items(
            "patch_size",
            3,
            "WanTransformer3DModel patchifies with a (t, h, w) Conv3d kernel and unpacks it as "
            "p_t, p_h, p_w in forward",
        ),
        _rope_head_dim,
    ),
    "FluxTransformer2DModel": (_rope_axes("axes_dims_rope", "FluxPosEmbed"),),
    "QwenImageTransformer2DModel": (
        _rope_axes("axes_dims_rope", "QwenEmbedRope"),
        _qwen_image_call,
    ),
    "AutoencoderKLQwenImage": _WAN_VAE_LEVELS,
    "Qwen2_5_VLForConditionalGeneration": (_qwen2_5_vl_heads,),
    "HunyuanVideoTransformer3DModel": (_rope_axes("rope_axes_dim", "HunyuanVideoRotaryPosEmbed"),),
    "CLIPTextModel": _CLIP_RULES,
    "CLIPTextModelWithProjection": _CLIP_RULES,
    "CLIPVisionModel": _CLIP_RULES,
    "CLIPVisionModelWithProjection": _CLIP_RULES,
    "StableDiffusionSafetyChecker": (
        lambda c: _heads_divide("hidden_size", "num_attention_heads", "visionConfig.")(
            c["vision_config"]
        ),
    ),
    "LlamaModel": (_CLIP_RULES[0], _llama_heads),
}


def _refusals(cls: str, resolved: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [problem for rule in _RULES.get(cls, ()) for problem in rule(resolved)]


def _resolve(
    wire: Mapping[str, tuple[str, ConfigKey]], config: Mapping[str, Any]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (key, spec) in wire.items():
        value = config.get(name, _MISSING)
        if spec.kind == "obj":
            inner = value if isinstance(value, Mapping) else {}
            out[key] = _resolve(spec.inner, inner)
            continue
        if value is _MISSING:
            value = spec.default
        out[key] = tuple(value) if isinstance(value, list) else value
    return out


_MISSING: Final = object()


def resolved_config(cls: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The keys ``cls`` reads (snake_case), from ``config`` (camelCase) or the class default.

    Lists come back as tuples, nested objects as dicts of their own resolved keys. Call only
    for a known class whose config passed :func:`config_problems`.
    """
    known = COMPONENT_CLASSES[cls]
    return _resolve(known.wire, _nested_flat(known, config))


def _nested_flat(known: ComponentClass, config: Mapping[str, Any]) -> Mapping[str, Any]:
    """``config`` with a flat config's top-level keys of ``known.flat_into`` moved into that
    object, as transformers reads it; ``config`` itself when there is nothing to move."""
    into = known.flat_into
    if not into or into in config:
        return config
    inner = known.wire[into][1].inner
    if not any(k in inner for k in config):
        return config
    moved = {k: v for k, v in config.items() if k in inner}
    return {**{k: v for k, v in config.items() if k not in inner}, into: moved}
