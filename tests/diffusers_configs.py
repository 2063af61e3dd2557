"""Published diffusers pipelines: each component's config.json, as the Hub repository holds it.

The one source of these configs for the tests, the examples (tests/examples checks that
examples/*.yaml carry the same values, camelCased) and hack/ scripts. Keys are the config.json's
(snake_case); only the keys that change the module layout are kept, and keys the file leaves to
the class default are left out here too. Sources: the Hub repository named on each entry (its
``<component>/config.json``), cross-checked with the configs that ``diffusers``' own conversion
scripts write (``scripts/convert_wan_to_diffusers.py`` ``get_transformer_config``,
``convert_hunyuan_video_to_diffusers.py`` ``TRANSFORMER_CONFIGS``,
``convert_ltx_to_diffusers.py`` ``get_transformer_config``/``get_vae_config``,
``convert_cogvideox_to_diffusers.py``, ``convert_sd3_to_diffusers.py``,
``convert_flux_to_diffusers.py``) and, for the text encoders, with the ``transformers`` config of
the original checkpoint (openai/clip-vit-large-patch14, laion/CLIP-ViT-bigG-14-laion2B-39B-b160k,
google/t5-v1_1-xxl, google/umt5-xxl, xtuner/llava-llama-3-8b-v1_1-transformers,
laion/CLIP-ViT-H-14-laion2B-s32B-b79K).
"""

from __future__ import annotations

from typing import Any

Config = dict[str, Any]

CLIP_L: Config = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "max_position_embeddings": 77,
    "vocab_size": 49408,
    "projection_dim": 768,
}
CLIP_BIGG: Config = {
    "hidden_size": 1280,
    "intermediate_size": 5120,
    "num_hidden_layers": 32,
    "num_attention_heads": 20,
    "max_position_embeddings": 77,
    "vocab_size": 49408,
    "projection_dim": 1280,
}
T5_XXL: Config = {
    "d_model": 4096,
    "d_ff": 10240,
    "d_kv": 64,
    "num_heads": 64,
    "num_layers": 24,
    "feed_forward_proj": "gated-gelu",
    "relative_attention_num_buckets": 32,
    "vocab_size": 32128,
}
UMT5_XXL: Config = {**T5_XXL, "vocab_size": 256384}
CLIP_VIT_H: Config = {
    "hidden_size": 1280,
    "intermediate_size": 5120,
    "num_hidden_layers": 32,
    "num_attention_heads": 16,
    "image_size": 224,
    "patch_size": 14,
    "projection_dim": 1024,
}
LLAVA_LLAMA3_8B: Config = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128320,
}

#: CompVis/stable-diffusion-safety-checker (SD 1.x's safety_checker/config.json, a CLIPConfig:
#: only the vision tower is built).
SD_SAFETY_CHECKER: Config = {
    "projection_dim": 768,
    "vision_config": {
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "patch_size": 14,
    },
}

SD_VAE: Config = {
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "latent_channels": 4,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "sample_size": 512,
}
SDXL_VAE: Config = {**SD_VAE, "sample_size": 1024}
#: SD3's and Flux's 16-channel VAE: no quant convolutions.
VAE_16CH: Config = {
    **SD_VAE,
    "latent_channels": 16,
    "sample_size": 1024,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
}

SD15_UNET: Config = {"cross_attention_dim": 768, "sample_size": 64}
SDXL_UNET: Config = {
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256,
    "attention_head_dim": [5, 10, 20],
    "block_out_channels": [320, 640, 1280],
    "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "projection_class_embeddings_input_dim": 2816,
    "sample_size": 128,
    "transformer_layers_per_block": [1, 2, 10],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "use_linear_projection": True,
}
SD35_LARGE: Config = {
    "sample_size": 128,
    "patch_size": 2,
    "in_channels": 16,
    "num_layers": 38,
    "attention_head_dim": 64,
    "num_attention_heads": 38,
    "joint_attention_dim": 4096,
    "caption_projection_dim": 2432,
    "pooled_projection_dim": 2048,
    "out_channels": 16,
    "pos_embed_max_size": 192,
    "qk_norm": "rms_norm",
}
SD3_MEDIUM: Config = {
    "sample_size": 128,
    "patch_size": 2,
    "in_channels": 16,
    "num_layers": 24,
    "attention_head_dim": 64,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "caption_projection_dim": 1536,
    "pooled_projection_dim": 2048,
    "out_channels": 16,
    "pos_embed_max_size": 192,
}
FLUX_DEV: Config = {
    "patch_size": 1,
    "in_channels": 64,
    "num_layers": 19,
    "num_single_layers": 38,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "pooled_projection_dim": 768,
    "guidance_embeds": True,
}
FLUX_SCHNELL: Config = {**FLUX_DEV, "guidance_embeds": False}

WAN21_T2V_1_3B: Config = {
    "patch_size": [1, 2, 2],
    "num_attention_heads": 12,
    "attention_head_dim": 128,
    "in_channels": 16,
    "out_channels": 16,
    "text_dim": 4096,
    "freq_dim": 256,
    "ffn_dim": 8960,
    "num_layers": 30,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
}
WAN21_T2V_14B: Config = {
    **WAN21_T2V_1_3B,
    "num_attention_heads": 40,
    "ffn_dim": 13824,
    "num_layers": 40,
}
WAN21_I2V_14B: Config = {
    **WAN21_T2V_14B,
    "in_channels": 36,
    "image_dim": 1280,
    "added_kv_proj_dim": 5120,
}
WAN21_VAE: Config = {
    "base_dim": 96,
    "z_dim": 16,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
}

HUNYUAN_VIDEO: Config = {
    "in_channels": 16,
    "out_channels": 16,
    "num_attention_heads": 24,
    "attention_head_dim": 128,
    "num_layers": 20,
    "num_single_layers": 40,
    "num_refiner_layers": 2,
    "mlp_ratio": 4.0,
    "patch_size": 2,
    "patch_size_t": 1,
    "qk_norm": "rms_norm",
    "guidance_embeds": True,
    "text_embed_dim": 4096,
    "pooled_projection_dim": 768,
}
HUNYUAN_VIDEO_VAE: Config = {
    "block_out_channels": [128, 256, 512, 512],
    "latent_channels": 16,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "spatial_compression_ratio": 8,
    "temporal_compression_ratio": 4,
}

COGVIDEOX_5B: Config = {
    "num_attention_heads": 48,
    "attention_head_dim": 64,
    "num_layers": 42,
    "in_channels": 16,
    "out_channels": 16,
    "time_embed_dim": 512,
    "text_embed_dim": 4096,
    "sample_height": 60,
    "sample_width": 90,
    "sample_frames": 49,
    "patch_size": 2,
    "use_rotary_positional_embeddings": True,
}
COGVIDEOX_VAE: Config = {
    "block_out_channels": [128, 256, 256, 512],
    "latent_channels": 16,
    "layers_per_block": 3,
    "norm_num_groups": 32,
    "temporal_compression_ratio": 4,
}

#: genmo/mochi-1-preview's transformer/config.json and vae/config.json (every key it sets that
#: changes the layout; tests/budget/diffusion/hub/genmo--mochi-1-preview holds the files).
MOCHI_1_PREVIEW: Config = {
    "patch_size": 2,
    "num_attention_heads": 24,
    "attention_head_dim": 128,
    "num_layers": 48,
    "pooled_projection_dim": 1536,
    "in_channels": 12,
    "out_channels": None,
    "text_embed_dim": 4096,
    "time_embed_dim": 256,
    "activation_fn": "swiglu",
}
MOCHI_VAE: Config = {
    "in_channels": 15,
    "out_channels": 3,
    "encoder_block_out_channels": [64, 128, 256, 384],
    "decoder_block_out_channels": [128, 256, 512, 768],
    "latent_channels": 12,
    "layers_per_block": [3, 3, 4, 6, 3],
    "temporal_expansions": [1, 2, 3],
    "spatial_expansions": [2, 2, 2],
    "add_attention_block": [False, True, True, True, True],
}

LTX_VIDEO_090: Config = {
    "in_channels": 128,
    "out_channels": 128,
    "patch_size": 1,
    "patch_size_t": 1,
    "num_attention_heads": 32,
    "attention_head_dim": 64,
    "cross_attention_dim": 2048,
    "num_layers": 28,
    "caption_channels": 4096,
}
LTX_VIDEO_090_VAE: Config = {
    "latent_channels": 128,
    "block_out_channels": [128, 256, 512, 512],
    "layers_per_block": [4, 3, 3, 3, 4],
    "spatio_temporal_scaling": [True, True, True, False],
    "patch_size": 4,
    "patch_size_t": 1,
}

QWEN_IMAGE: Config = {
    "patch_size": 2,
    "in_channels": 64,
    "out_channels": 16,
    "num_layers": 60,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 3584,
    "guidance_embeds": False,
    "axes_dims_rope": [16, 56, 56],
}
QWEN_IMAGE_VAE: Config = {
    "base_dim": 96,
    "z_dim": 16,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
}
#: Qwen-Image's text encoder (Qwen/Qwen-Image text_encoder/config.json: Qwen2.5-VL-7B-Instruct,
#: the language model and the vision tower as nested configs).
QWEN2_5_VL_7B: Config = {
    "tie_word_embeddings": False,
    "text_config": {
        "vocab_size": 152064,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
    },
    "vision_config": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "in_channels": 3,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "spatial_merge_size": 2,
        "out_hidden_size": 3584,
    },
}

#: Pipelines by Hub repository: (pipeline class, [(component name, class, config)]).
PIPELINES: dict[str, tuple[str, list[tuple[str, str, Config]]]] = {
    "stable-diffusion-v1-5/stable-diffusion-v1-5": (
        "StableDiffusionPipeline",
        [
            ("text_encoder", "CLIPTextModel", CLIP_L),
            ("unet", "UNet2DConditionModel", SD15_UNET),
            ("vae", "AutoencoderKL", SD_VAE),
            ("safety_checker", "StableDiffusionSafetyChecker", SD_SAFETY_CHECKER),
        ],
    ),
    "stabilityai/stable-diffusion-xl-base-1.0": (
        "StableDiffusionXLPipeline",
        [
            ("text_encoder", "CLIPTextModel", CLIP_L),
            ("text_encoder_2", "CLIPTextModelWithProjection", CLIP_BIGG),
            ("unet", "UNet2DConditionModel", SDXL_UNET),
            ("vae", "AutoencoderKL", SDXL_VAE),
        ],
    ),
    "stabilityai/stable-diffusion-3.5-large": (
        "StableDiffusion3Pipeline",
        [
            ("text_encoder", "CLIPTextModelWithProjection", CLIP_L),
            ("text_encoder_2", "CLIPTextModelWithProjection", CLIP_BIGG),
            ("text_encoder_3", "T5EncoderModel", T5_XXL),
            ("transformer", "SD3Transformer2DModel", SD35_LARGE),
            ("vae", "AutoencoderKL", VAE_16CH),
        ],
    ),
    "stabilityai/stable-diffusion-3-medium-diffusers": (
        "StableDiffusion3Pipeline",
        [
            ("text_encoder", "CLIPTextModelWithProjection", CLIP_L),
            ("text_encoder_2", "CLIPTextModelWithProjection", CLIP_BIGG),
            ("text_encoder_3", "T5EncoderModel", T5_XXL),
            ("transformer", "SD3Transformer2DModel", SD3_MEDIUM),
            ("vae", "AutoencoderKL", VAE_16CH),
        ],
    ),
    "black-forest-labs/FLUX.1-dev": (
        "FluxPipeline",
        [
            ("text_encoder", "CLIPTextModel", CLIP_L),
            ("text_encoder_2", "T5EncoderModel", T5_XXL),
            ("transformer", "FluxTransformer2DModel", FLUX_DEV),
            ("vae", "AutoencoderKL", VAE_16CH),
        ],
    ),
    "black-forest-labs/FLUX.1-schnell": (
        "FluxPipeline",
        [
            ("text_encoder", "CLIPTextModel", CLIP_L),
            ("text_encoder_2", "T5EncoderModel", T5_XXL),
            ("transformer", "FluxTransformer2DModel", FLUX_SCHNELL),
            ("vae", "AutoencoderKL", VAE_16CH),
        ],
    ),
    "Wan-AI/Wan2.1-T2V-1.3B-Diffusers": (
        "WanPipeline",
        [
            ("text_encoder", "UMT5EncoderModel", UMT5_XXL),
            ("transformer", "WanTransformer3DModel", WAN21_T2V_1_3B),
            ("vae", "AutoencoderKLWan", WAN21_VAE),
        ],
    ),
    "Wan-AI/Wan2.1-T2V-14B-Diffusers": (
        "WanPipeline",
        [
            ("text_encoder", "UMT5EncoderModel", UMT5_XXL),
            ("transformer", "WanTransformer3DModel", WAN21_T2V_14B),
            ("vae", "AutoencoderKLWan", WAN21_VAE),
        ],
    ),
    "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers": (
        "WanImageToVideoPipeline",
        [
            ("text_encoder", "UMT5EncoderModel", UMT5_XXL),
            ("image_encoder", "CLIPVisionModelWithProjection", CLIP_VIT_H),
            ("transformer", "WanTransformer3DModel", WAN21_I2V_14B),
            ("vae", "AutoencoderKLWan", WAN21_VAE),
        ],
    ),
    "Wan-AI/Wan2.2-T2V-A14B-Diffusers": (
        "WanPipeline",
        [
            ("text_encoder", "UMT5EncoderModel", UMT5_XXL),
            ("transformer", "WanTransformer3DModel", WAN21_T2V_14B),
            ("transformer_2", "WanTransformer3DModel", WAN21_T2V_14B),
            ("vae", "AutoencoderKLWan", WAN21_VAE),
        ],
    ),
    "hunyuanvideo-community/HunyuanVideo": (
        "HunyuanVideoPipeline",
        [
            ("text_encoder", "LlamaModel", LLAVA_LLAMA3_8B),
            ("text_encoder_2", "CLIPTextModel", CLIP_L),
            ("transformer", "HunyuanVideoTransformer3DModel", HUNYUAN_VIDEO),
            ("vae", "AutoencoderKLHunyuanVideo", HUNYUAN_VIDEO_VAE),
        ],
    ),
    "THUDM/CogVideoX-5b": (
        "CogVideoXPipeline",
        [
            ("text_encoder", "T5EncoderModel", T5_XXL),
            ("transformer", "CogVideoXTransformer3DModel", COGVIDEOX_5B),
            ("vae", "AutoencoderKLCogVideoX", COGVIDEOX_VAE),
        ],
    ),
    "Lightricks/LTX-Video": (
        "LTXPipeline",
        [
            ("text_encoder", "T5EncoderModel", T5_XXL),
            ("transformer", "LTXVideoTransformer3DModel", LTX_VIDEO_090),
            ("vae", "AutoencoderKLLTXVideo", LTX_VIDEO_090_VAE),
        ],
    ),
    "genmo/mochi-1-preview": (
        "MochiPipeline",
        [
            ("text_encoder", "T5EncoderModel", T5_XXL),
            ("transformer", "MochiTransformer3DModel", MOCHI_1_PREVIEW),
            ("vae", "AutoencoderKLMochi", MOCHI_VAE),
        ],
    ),
    "Qwen/Qwen-Image": (
        "QwenImagePipeline",
        [
            ("text_encoder", "Qwen2_5_VLForConditionalGeneration", QWEN2_5_VL_7B),
            ("transformer", "QwenImageTransformer2DModel", QWEN_IMAGE),
            ("vae", "AutoencoderKLQwenImage", QWEN_IMAGE_VAE),
        ],
    ),
}

#: Pipeline options of model_index.json (the entries that are not components), by repository.
OPTIONS: dict[str, Config] = {
    "stable-diffusion-v1-5/stable-diffusion-v1-5": {"requires_safety_checker": True},
    "stabilityai/stable-diffusion-xl-base-1.0": {"force_zeros_for_empty_prompt": True},
    "Wan-AI/Wan2.2-T2V-A14B-Diffusers": {"boundary_ratio": 0.875, "expand_timesteps": False},
}

#: Every (class, config) pair above once, for the oracle tests.
COMPONENTS: dict[str, tuple[str, Config]] = {
    f"{repo}:{name}": (cls, config)
    for repo, (_, parts) in PIPELINES.items()
    for name, cls, config in parts
}


def camel(config: Config) -> Config:
    """The config's keys camelCased (nested objects too), as
    spec.model.pipeline.components[].config holds them."""
    from pydantic.alias_generators import to_camel

    return {to_camel(k): camel(v) if isinstance(v, dict) else v for k, v in config.items()}
