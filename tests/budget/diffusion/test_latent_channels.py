"""A pipeline whose denoiser does not take or give the latents its class hands it (each
component valid alone) is refused naming the denoiser's key, never sized: diffusers loads it and
fails at the first denoising step or at the decode.

The oracle is diffusers 0.42.1 itself: a tiny pipeline of each class is called on the CPU
(``prompt_embeds`` given, so no tokenizer or text encoder is needed) for a grid of channel
counts, and gpu-sizer must refuse exactly the ones whose call raises. Every published folder
and example passes the check (test_published_pipelines_run.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from tests import diffusers_configs as published
from tests.budget.diffusion.conftest import TINY_WAN, tiny_wan_vae

from gpu_sizer.api import InvalidWorkload, parse_spec
from gpu_sizer.api.spec.generation import Pipeline
from gpu_sizer.api.spec.latent_channels import CHANNEL_RULES, channel_problems
from gpu_sizer.budget.diffusion.pipelines import PIPELINES

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

#: Small enough to call a whole pipeline on the CPU in a few milliseconds.
_FLUX = {
    "num_layers": 1,
    "num_single_layers": 1,
    "attention_head_dim": 8,
    "num_attention_heads": 2,
    "joint_attention_dim": 16,
    "pooled_projection_dim": 8,
    "axes_dims_rope": [2, 2, 4],
}
_COGVIDEOX = {
    "num_attention_heads": 2,
    "attention_head_dim": 8,
    "num_layers": 1,
    "text_embed_dim": 16,
    "time_embed_dim": 8,
    "sample_width": 2,
    "sample_height": 2,
    "sample_frames": 5,
    "max_text_seq_length": 3,
}
_LTX = {
    "num_attention_heads": 2,
    "attention_head_dim": 8,
    "cross_attention_dim": 16,
    "num_layers": 1,
    "caption_channels": 16,
}
_SD3 = {
    "sample_size": 4,
    "num_layers": 1,
    "attention_head_dim": 8,
    "num_attention_heads": 2,
    "joint_attention_dim": 16,
    "caption_projection_dim": 16,
    "pooled_projection_dim": 8,
    "pos_embed_max_size": 8,
}
_UNET = {
    "block_out_channels": [8, 8],
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "cross_attention_dim": 16,
    "attention_head_dim": 2,
    "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
    "sample_size": 8,
}
_KL = {"block_out_channels": [8], "norm_num_groups": 4, "layers_per_block": 1}
_KL_FLUX = {**_KL, "shift_factor": 0.0}
_COGVIDEOX_VAE = {
    "block_out_channels": [8, 8, 8, 8],
    "norm_num_groups": 2,
    "layers_per_block": 1,
    "temporal_compression_ratio": 4,
}
_LTX_VAE = {
    "block_out_channels": [8, 8, 8, 8],
    "decoder_block_out_channels": [8, 8, 8, 8],
    "layers_per_block": [1, 1, 1, 1, 1],
    "decoder_layers_per_block": [1, 1, 1, 1, 1],
}


def _image() -> Any:
    from PIL import Image

    return Image.new("RGB", (16, 16))


def _embeds(tokens: int = 3, width: int = 16) -> Any:
    return torch.randn(1, tokens, width)


#: The tiny Wan transformer without its channels, which each case sets.
_WAN = {k: v for k, v in TINY_WAN.items() if k not in ("in_channels", "out_channels")}

#: Per pipeline class: (denoiser class, its tiny config, VAE class, its tiny config for ``c``
#: latent channels, the VAE's latent-channel key, the pipeline's other __init__ arguments, the
#: call's arguments). Each is called with one step, no guidance.
Case = tuple[str, dict[str, Any], str, Callable[[int], dict[str, Any]], dict[str, Any], Any]
CASES: dict[str, Case] = {
    "WanPipeline": (
        "WanTransformer3DModel",
        _WAN,
        "AutoencoderKLWan",
        tiny_wan_vae,
        {},
        lambda: {"prompt_embeds": _embeds(), "height": 16, "width": 16, "num_frames": 5},
    ),
    "WanImageToVideoPipeline": (
        "WanTransformer3DModel",
        _WAN,
        "AutoencoderKLWan",
        tiny_wan_vae,
        {"image_encoder": None, "image_processor": None},
        lambda: {
            "image": _image(),
            "prompt_embeds": _embeds(),
            "height": 16,
            "width": 16,
            "num_frames": 5,
        },
    ),
    "FluxPipeline": (
        "FluxTransformer2DModel",
        _FLUX,
        "AutoencoderKL",
        lambda c: {**_KL_FLUX, "latent_channels": c},
        {"text_encoder_2": None, "tokenizer_2": None},
        lambda: {
            "prompt_embeds": _embeds(),
            "pooled_prompt_embeds": torch.randn(1, 8),
            "height": 8,
            "width": 8,
        },
    ),
    "StableDiffusion3Pipeline": (
        "SD3Transformer2DModel",
        _SD3,
        "AutoencoderKL",
        lambda c: {**_KL_FLUX, "latent_channels": c},
        {
            "text_encoder_2": None,
            "tokenizer_2": None,
            "text_encoder_3": None,
            "tokenizer_3": None,
        },
        lambda: {
            "prompt_embeds": _embeds(),
            "pooled_prompt_embeds": torch.randn(1, 8),
            "height": 16,
            "width": 16,
        },
    ),
    "CogVideoXPipeline": (
        "CogVideoXTransformer3DModel",
        _COGVIDEOX,
        "AutoencoderKLCogVideoX",
        lambda c: {**_COGVIDEOX_VAE, "latent_channels": c},
        {},
        lambda: {"prompt_embeds": _embeds(), "height": 16, "width": 16, "num_frames": 5},
    ),
    "CogVideoXImageToVideoPipeline": (
        "CogVideoXTransformer3DModel",
        _COGVIDEOX,
        "AutoencoderKLCogVideoX",
        lambda c: {**_COGVIDEOX_VAE, "latent_channels": c},
        {},
        lambda: {
            "image": _image(),
            "prompt_embeds": _embeds(),
            "height": 16,
            "width": 16,
            "num_frames": 5,
        },
    ),
    "LTXPipeline": (
        "LTXVideoTransformer3DModel",
        _LTX,
        "AutoencoderKLLTXVideo",
        lambda c: {**_LTX_VAE, "latent_channels": c},
        {},
        lambda: {
            "prompt_embeds": _embeds(),
            "prompt_attention_mask": torch.ones(1, 3),
            "height": 32,
            "width": 32,
            "num_frames": 9,
        },
    ),
    "StableDiffusionPipeline": (
        "UNet2DConditionModel",
        _UNET,
        "AutoencoderKL",
        lambda c: {**_KL, "latent_channels": c},
        {"safety_checker": None, "feature_extractor": None, "requires_safety_checker": False},
        lambda: {"prompt_embeds": _embeds(), "height": 8, "width": 8},
    ),
}


def _scheduler(cls: str) -> Any:
    if cls == "StableDiffusionPipeline":
        return diffusers.PNDMScheduler(skip_prk_steps=True, steps_offset=1)
    if cls.startswith("CogVideoX"):
        return diffusers.CogVideoXDDIMScheduler()
    return diffusers.FlowMatchEulerDiscreteScheduler()


def _diffusers_runs(cls: str, denoiser: dict[str, Any], vae: dict[str, Any]) -> bool:
    """Whether a one-step call of a tiny ``cls`` with these configs completes."""
    d_cls, _, v_cls, _, extra, call = CASES[cls]
    name = "unet" if d_cls == "UNet2DConditionModel" else "transformer"
    torch.manual_seed(0)
    pipe = getattr(diffusers, cls)(
        **{
            name: getattr(diffusers, d_cls)(**denoiser),
            "vae": getattr(diffusers, v_cls)(**vae),
            "scheduler": _scheduler(cls),
            "text_encoder": None,
            "tokenizer": None,
            **extra,
        }
    )
    pipe.set_progress_bar_config(disable=True)
    try:
        pipe(**call(), num_inference_steps=1, guidance_scale=1.0, output_type="pt")
    except (RuntimeError, ValueError):
        return False
    return True


def _ours(cls: str, denoiser: dict[str, Any], vae: dict[str, Any]) -> list[str]:
    """The spec paths gpu-sizer refuses a pipeline of these configs at."""
    d_cls, _, v_cls, _, _, _ = CASES[cls]
    name = "unet" if d_cls == "UNet2DConditionModel" else "transformer"
    doc = {
        "class": cls,
        "components": [
            {"name": name, "class": d_cls, "config": published.camel(denoiser)},
            {"name": "vae", "class": v_cls, "config": published.camel(vae)},
        ],
    }
    return [path for path, _ in channel_problems(Pipeline.model_validate(doc))]


_GRID = [
    (cls, in_channels, out_channels)
    for cls in CASES
    for in_channels, out_channels in itertools.product((4, 8, 12, 16), (None, 4, 16))
]


@pytest.mark.parametrize(("cls", "in_channels", "out_channels"), _GRID)
def test_refused_exactly_when_diffusers_fails_to_run_the_pipeline(
    cls: str, in_channels: int, out_channels: int | None
) -> None:
    """``out_channels`` ``None``: the key left out (the class's default, ``in_channels`` for
    most, a number for CogVideoX, LTX-Video and the UNet)."""
    _, tiny, _, vae_of, _, _ = CASES[cls]
    denoiser = {**tiny, "in_channels": in_channels}
    if out_channels is not None:
        denoiser["out_channels"] = out_channels
    vae = vae_of(4)
    refused = _ours(cls, denoiser, vae)
    assert all(p.endswith(("inChannels", "outChannels")) for p in refused), refused
    assert _diffusers_runs(cls, denoiser, vae) == (not refused), refused


@pytest.mark.parametrize(("patch", "patch_t"), [(1, 1), (2, 1), (1, 2)])
def test_ltx_patch_sizes_other_than_one_are_refused_as_diffusers_fails(
    patch: int, patch_t: int
) -> None:
    denoiser = {**_LTX, "in_channels": 4, "out_channels": 4}
    denoiser |= {"patch_size": patch, "patch_size_t": patch_t}
    vae = CASES["LTXPipeline"][3](4)
    refused = _ours("LTXPipeline", denoiser, vae)
    assert _diffusers_runs("LTXPipeline", denoiser, vae) == (not refused), refused
    expected = [] if patch == 1 else ["components[0].config.patchSize"]
    expected += [] if patch_t == 1 else ["components[0].config.patchSizeT"]
    assert refused == expected


def test_wan_image_to_video_with_expand_timesteps_takes_the_latent_channels() -> None:
    """Wan 2.2 TI2V blends the condition into the latents instead of concatenating it."""
    doc = {
        "class": "WanImageToVideoPipeline",
        "config": {"expandTimesteps": True},
        "components": [
            {
                "name": "transformer",
                "class": "WanTransformer3DModel",
                "config": {"inChannels": 48, "outChannels": 48},
            },
            {"name": "vae", "class": "AutoencoderKLWan", "config": {"zDim": 48}},
        ],
    }
    assert channel_problems(Pipeline.model_validate(doc)) == []
    doc["config"] = {}
    [(path, message)] = channel_problems(Pipeline.model_validate(doc))
    assert path == "components[0].config.inChannels"
    assert "use inChannels 100" in message


def test_the_spec_is_refused_naming_the_key_the_channels_the_source_and_the_fix() -> None:
    doc = {
        "class": "FluxPipeline",
        "components": [
            {
                "name": "transformer",
                "class": "FluxTransformer2DModel",
                "config": {"inChannels": 16},
            },
            {"name": "vae", "class": "AutoencoderKL", "config": {"latentChannels": 16}},
        ],
    }
    spec = {"model": {"name": "black-forest-labs/FLUX.1-dev", "pipeline": doc}}
    with pytest.raises(InvalidWorkload) as e:
        parse_spec(spec)
    [problem] = [p for p in e.value.problems if "components" in p.path]
    assert problem.path == "spec.model.pipeline.components[0].config.inChannels"
    assert "feeds transformer (FluxTransformer2DModel) 64 channels" in problem.message
    assert "diffusers 0.42.1 FluxPipeline.prepare_latents" in problem.message
    assert problem.message.endswith(
        "inChannels 16 fails at the first denoising step; use inChannels 64, or the vae this "
        "transformer was trained with"
    )


def test_every_pipeline_class_has_a_channel_rule() -> None:
    assert set(CHANNEL_RULES) == set(PIPELINES)
