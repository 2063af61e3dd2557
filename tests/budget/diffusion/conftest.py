"""Building diffusers and transformers components from published configs on the meta device."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")

#: transformers config class of each transformers component class.
CONFIG_CLASSES = {
    "CLIPTextModel": "CLIPTextConfig",
    "CLIPTextModelWithProjection": "CLIPTextConfig",
    "CLIPVisionModel": "CLIPVisionConfig",
    "CLIPVisionModelWithProjection": "CLIPVisionConfig",
    "T5EncoderModel": "T5Config",
    "UMT5EncoderModel": "UMT5Config",
    "LlamaModel": "LlamaConfig",
    "Qwen2_5_VLForConditionalGeneration": "Qwen2_5_VLConfig",
    "StableDiffusionSafetyChecker": "CLIPConfig",
}


def model_class(cls: str) -> Any:
    """The library class of ``cls`` (SD's safety checker lives in a diffusers pipeline module)."""
    if cls == "StableDiffusionSafetyChecker":
        from diffusers.pipelines.stable_diffusion.safety_checker import (
            StableDiffusionSafetyChecker,
        )

        return StableDiffusionSafetyChecker
    return getattr(transformers if cls in CONFIG_CLASSES else diffusers, cls)


def build_on_meta(cls: str, config: dict[str, Any], dtype: Any = None) -> Any:
    """The library's own model of ``cls`` from ``config`` (snake_case), without memory."""
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        if cls in CONFIG_CLASSES:
            model = model_class(cls)(getattr(transformers, CONFIG_CLASSES[cls])(**config))
        else:
            model = model_class(cls).from_config(config)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()


#: Tiny configs (snake_case) small enough to run a real forward, or a whole pipeline, on the CPU
#: in milliseconds: the oracles of the refusal tests call diffusers with them.
TINY_WAN: dict[str, Any] = {
    "num_attention_heads": 2,
    "attention_head_dim": 12,
    "in_channels": 4,
    "out_channels": 4,
    "text_dim": 16,
    "freq_dim": 16,
    "ffn_dim": 32,
    "num_layers": 1,
}
TINY_HUNYUAN: dict[str, Any] = {
    "in_channels": 4,
    "out_channels": 4,
    "num_attention_heads": 2,
    "attention_head_dim": 8,
    "num_layers": 1,
    "num_single_layers": 1,
    "num_refiner_layers": 1,
    "text_embed_dim": 16,
    "pooled_projection_dim": 8,
}


def tiny_wan_vae(z_dim: int = 4) -> dict[str, Any]:
    """A tiny ``AutoencoderKLWan`` config with ``z_dim`` latent channels."""
    return {
        "base_dim": 8,
        "dim_mult": [1, 1, 1, 1],
        "num_res_blocks": 1,
        "z_dim": z_dim,
        "latents_mean": [0.0] * z_dim,
        "latents_std": [1.0] * z_dim,
    }
