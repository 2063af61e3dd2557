"""A pipeline whose denoiser does not take the width of the embeddings its text (or image)
encoder produces (each component valid alone) is refused naming the denoiser's key, never
sized: diffusers loads it and fails at the first forward with a shape mismatch.

The oracle is diffusers 0.42.1 and transformers themselves, on the CPU: a tiny encoder's output
is as wide as the config key the rule reads, and a tiny pipeline of each class called with
prompt embeddings of that width runs exactly when gpu-sizer accepts the pair. Every published
folder and example passes the check (test_published_pipelines_run.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from tests import diffusers_configs as published
from tests.budget.diffusion.test_latent_channels import CASES, _scheduler

from gpu_sizer.api import InvalidWorkload, parse_spec
from gpu_sizer.api.spec.generation import Pipeline
from gpu_sizer.api.spec.text_width import TEXT_RULES, text_problems
from gpu_sizer.budget.diffusion.pipelines import PIPELINES

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")


def _pipeline(cls: str, parts: list[tuple[str, str, dict[str, Any]]]) -> Pipeline:
    doc = {
        "class": cls,
        "components": [
            {"name": n, "class": c, "config": published.camel(cfg)} for n, c, cfg in parts
        ],
    }
    return Pipeline.model_validate(doc)


def _published(repo: str, cls: str | None = None, **overrides: dict[str, Any]) -> Pipeline:
    """``repo``'s published components (under ``cls``), each named one's config updated."""
    own, parts = published.PIPELINES[repo]
    return _pipeline(cls or own, [(n, c, {**cfg, **overrides.get(n, {})}) for n, c, cfg in parts])


def test_every_pipeline_class_has_a_text_rule() -> None:
    assert set(TEXT_RULES) == set(PIPELINES)


@pytest.mark.parametrize("repo", sorted(published.PIPELINES))
def test_every_published_pipeline_passes(repo: str) -> None:
    assert text_problems(_published(repo)) == []


@pytest.mark.parametrize(
    ("repo", "cls"),
    [
        ("stable-diffusion-v1-5/stable-diffusion-v1-5", "StableDiffusionImg2ImgPipeline"),
        ("stabilityai/stable-diffusion-xl-base-1.0", "StableDiffusionXLImg2ImgPipeline"),
        ("stabilityai/stable-diffusion-3.5-large", "StableDiffusion3Img2ImgPipeline"),
        ("black-forest-labs/FLUX.1-dev", "FluxImg2ImgPipeline"),
        ("THUDM/CogVideoX-5b", "CogVideoXImageToVideoPipeline"),
        ("Lightricks/LTX-Video", "LTXImageToVideoPipeline"),
    ],
)
def test_the_image_to_image_siblings_of_published_pipelines_pass(repo: str, cls: str) -> None:
    assert text_problems(_published(repo, cls)) == []


#: (repo, component, config override, the refused path's key, the width that runs)
_MISMATCHES = [
    ("Wan-AI/Wan2.1-T2V-14B-Diffusers", "transformer", {"text_dim": 2048}, "textDim", 4096),
    ("Wan-AI/Wan2.1-T2V-14B-Diffusers", "text_encoder", {"d_model": 2048}, "textDim", 2048),
    ("Wan-AI/Wan2.2-T2V-A14B-Diffusers", "transformer_2", {"text_dim": 1024}, "textDim", 4096),
    ("Wan-AI/Wan2.1-I2V-14B-720P-Diffusers", "transformer", {"image_dim": 1024}, "imageDim", 1280),
    (
        "stable-diffusion-v1-5/stable-diffusion-v1-5",
        "unet",
        {"cross_attention_dim": 1024},
        "crossAttentionDim",
        768,
    ),
    (
        "stable-diffusion-v1-5/stable-diffusion-v1-5",
        "unet",
        {"encoder_hid_dim": 1024},
        "encoderHidDim",
        768,
    ),
    (
        "stabilityai/stable-diffusion-xl-base-1.0",
        "unet",
        {"cross_attention_dim": 1280},
        "crossAttentionDim",
        2048,
    ),
    (
        "stabilityai/stable-diffusion-xl-base-1.0",
        "text_encoder_2",
        {"projection_dim": 1024},
        "projectionClassEmbeddingsInputDim",
        2560,
    ),
    (
        "stabilityai/stable-diffusion-3.5-large",
        "transformer",
        {"joint_attention_dim": 2048},
        "jointAttentionDim",
        4096,
    ),
    (
        "stabilityai/stable-diffusion-3.5-large",
        "transformer",
        {"pooled_projection_dim": 1280},
        "pooledProjectionDim",
        2048,
    ),
    (
        "black-forest-labs/FLUX.1-dev",
        "transformer",
        {"joint_attention_dim": 2048},
        "jointAttentionDim",
        4096,
    ),
    (
        "black-forest-labs/FLUX.1-dev",
        "text_encoder",
        {"hidden_size": 1152},
        "pooledProjectionDim",
        1152,
    ),
    (
        "hunyuanvideo-community/HunyuanVideo",
        "transformer",
        {"text_embed_dim": 2048},
        "textEmbedDim",
        4096,
    ),
    (
        "hunyuanvideo-community/HunyuanVideo",
        "text_encoder_2",
        {"hidden_size": 1152},
        "pooledProjectionDim",
        1152,
    ),
    ("THUDM/CogVideoX-5b", "transformer", {"text_embed_dim": 2048}, "textEmbedDim", 4096),
    ("Lightricks/LTX-Video", "text_encoder", {"d_model": 2048}, "captionChannels", 2048),
]


@pytest.mark.parametrize(("repo", "name", "override", "key", "fix"), _MISMATCHES)
def test_each_mismatch_is_refused_naming_the_key(
    repo: str, name: str, override: dict[str, Any], key: str, fix: int
) -> None:
    pipeline = _published(repo, **{name: override})
    [(path, message)] = text_problems(pipeline)
    assert path.endswith(f".config.{key}")
    index = int(path.split("[")[1].split("]")[0])
    assert pipeline.components[index].name != name or key in published.camel(override)
    assert f"use {key} {fix}, or the " in message
    assert "diffusers 0.42.1 " + pipeline.class_name + "." in message


def test_sdxl_refiner_takes_text_encoder_2_alone_with_the_aesthetic_score() -> None:
    """stabilityai/stable-diffusion-xl-refiner-1.0: no text_encoder, a 1280-wide cross
    attention and 5 time ids (requires_aesthetics_score) of 256 + projection_dim 1280."""
    unet = {
        **published.SDXL_UNET,
        "cross_attention_dim": 1280,
        "projection_class_embeddings_input_dim": 2560,
    }
    parts = [
        ("text_encoder_2", "CLIPTextModelWithProjection", published.CLIP_BIGG),
        ("unet", "UNet2DConditionModel", unet),
    ]
    doc = {
        "class": "StableDiffusionXLImg2ImgPipeline",
        "config": {"requiresAestheticsScore": True},
        "components": [
            {"name": n, "class": c, "config": published.camel(cfg)} for n, c, cfg in parts
        ],
    }
    assert text_problems(Pipeline.model_validate(doc)) == []
    doc["config"] = {}
    [(path, message)] = text_problems(Pipeline.model_validate(doc))
    assert path == "components[1].config.projectionClassEmbeddingsInputDim"
    assert "use projectionClassEmbeddingsInputDim 2816" in message


def test_the_spec_is_refused_naming_the_key_the_widths_the_source_and_the_fix() -> None:
    _, parts = published.PIPELINES["Wan-AI/Wan2.1-T2V-14B-Diffusers"]
    comps = [
        {
            "name": n,
            "class": c,
            "config": published.camel({**cfg, "text_dim": 2048} if n == "transformer" else cfg),
        }
        for n, c, cfg in parts
    ]
    spec = {
        "model": {
            "name": "Wan-AI/Wan2.1-T2V-14B-Diffusers",
            "pipeline": {"class": "WanPipeline", "components": comps},
        }
    }
    with pytest.raises(InvalidWorkload) as e:
        parse_spec(spec)
    [problem] = [p for p in e.value.problems if "components" in p.path]
    assert problem.path == "spec.model.pipeline.components[1].config.textDim"
    assert problem.message == (
        "WanPipeline hands transformer (WanTransformer3DModel) embeddings 4096 wide, from "
        "text_encoder's (UMT5EncoderModel) dModel 4096 (diffusers 0.42.1 "
        "WanPipeline._get_t5_prompt_embeds (last_hidden_state)); transformer's textDim 2048 "
        "fails at the first forward with a shape mismatch; use textDim 4096, or the text "
        "encoder this transformer was trained with"
    )


# --- the oracle ------------------------------------------------------------------------------

_CLIP = {
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "vocab_size": 32,
    "max_position_embeddings": 8,
}
_T5 = {"d_model": 8, "d_ff": 16, "d_kv": 4, "num_heads": 2, "num_layers": 1, "vocab_size": 32}


def _encode(cls: str, config: dict[str, Any]) -> dict[str, int]:
    """The widths of a tiny ``cls``'s outputs the pipelines read."""
    torch.manual_seed(0)
    if cls.startswith("CLIPVision"):
        model = getattr(transformers, cls)(transformers.CLIPVisionConfig(**config))
        out = model(
            torch.randn(1, 3, config["image_size"], config["image_size"]), output_hidden_states=True
        )
        return {"hidden_states[-2]": out.hidden_states[-2].shape[-1]}
    ids = torch.tensor([[1, 2, 3]])
    if cls.startswith("CLIP"):
        model = getattr(transformers, cls)(transformers.CLIPTextConfig(**config))
        out = model(ids, output_hidden_states=True)
        widths = {"[0]": out[0].shape[-1], "hidden_states[-2]": out.hidden_states[-2].shape[-1]}
        if hasattr(out, "pooler_output"):
            widths["pooler_output"] = out.pooler_output.shape[-1]
        return widths
    config_cls = transformers.UMT5Config if cls.startswith("UMT5") else transformers.T5Config
    model = getattr(transformers, cls)(config_cls(**config))
    return {
        "[0]": model(ids)[0].shape[-1],
        "last_hidden_state": model(ids).last_hidden_state.shape[-1],
    }


def test_the_encoder_outputs_are_as_wide_as_the_keys_the_rules_read() -> None:
    """CLIP: hidden states and pooler_output are hidden_size wide, the projected text embeds
    projection_dim; T5/UMT5: d_model; the CLIP vision tower's hidden states hidden_size."""
    assert _encode("CLIPTextModel", {**_CLIP, "projection_dim": 4}) == {
        "[0]": 8,
        "hidden_states[-2]": 8,
        "pooler_output": 8,
    }
    widths = _encode("CLIPTextModelWithProjection", {**_CLIP, "projection_dim": 4})
    assert widths == {"[0]": 4, "hidden_states[-2]": 8}  # no pooler_output: Flux cannot use it
    assert _encode("T5EncoderModel", _T5) == {"[0]": 8, "last_hidden_state": 8}
    assert _encode("UMT5EncoderModel", _T5) == {"[0]": 8, "last_hidden_state": 8}
    vision = {**_CLIP, "image_size": 8, "patch_size": 4, "projection_dim": 4}
    vision.pop("vocab_size")
    vision.pop("max_position_embeddings")
    assert _encode("CLIPVisionModelWithProjection", vision) == {"hidden_states[-2]": 8}


#: Per class of the latent-channels oracle: the encoder whose output is ``prompt_embeds``, its
#: class and width key, and the denoiser's key (16 in the tiny configs).
_TEXT = {
    "WanPipeline": ("text_encoder", "UMT5EncoderModel", "d_model", "text_dim"),
    "WanImageToVideoPipeline": ("text_encoder", "UMT5EncoderModel", "d_model", "text_dim"),
    "FluxPipeline": ("text_encoder_2", "T5EncoderModel", "d_model", "joint_attention_dim"),
    "StableDiffusion3Pipeline": (
        "text_encoder_3",
        "T5EncoderModel",
        "d_model",
        "joint_attention_dim",
    ),
    "CogVideoXPipeline": ("text_encoder", "T5EncoderModel", "d_model", "text_embed_dim"),
    "CogVideoXImageToVideoPipeline": (
        "text_encoder",
        "T5EncoderModel",
        "d_model",
        "text_embed_dim",
    ),
    "LTXPipeline": ("text_encoder", "T5EncoderModel", "d_model", "caption_channels"),
    "StableDiffusionPipeline": (
        "text_encoder",
        "CLIPTextModel",
        "hidden_size",
        "cross_attention_dim",
    ),
}
#: The CLIPs that make the pooled embeddings (8 wide, the tiny pooled_projection_dim).
_POOLED = {
    "FluxPipeline": [("text_encoder", "CLIPTextModel", {**_CLIP, "projection_dim": 8})],
    "StableDiffusion3Pipeline": [
        ("text_encoder", "CLIPTextModelWithProjection", {**_CLIP, "projection_dim": 4}),
        ("text_encoder_2", "CLIPTextModelWithProjection", {**_CLIP, "projection_dim": 4}),
    ],
}


def _runs(cls: str, prompt_width: int, pooled_width: int = 8) -> bool:
    d_cls, tiny, v_cls, vae_of, extra, call = CASES[cls]
    name = "unet" if d_cls == "UNet2DConditionModel" else "transformer"
    in_channels = {"FluxPipeline": 16, "CogVideoXImageToVideoPipeline": 8}.get(cls, 4)
    if cls == "WanImageToVideoPipeline":
        in_channels = 12
    out = {} if cls == "FluxPipeline" else {"out_channels": 4}  # the latents' 4 channels
    torch.manual_seed(0)
    pipe = getattr(diffusers, cls)(
        **{
            name: getattr(diffusers, d_cls)(**tiny, in_channels=in_channels, **out),
            "vae": getattr(diffusers, v_cls)(**vae_of(4)),
            "scheduler": _scheduler(cls),
            "text_encoder": None,
            "tokenizer": None,
            **extra,
        }
    )
    pipe.set_progress_bar_config(disable=True)
    args = call()
    args["prompt_embeds"] = torch.randn(1, 3, prompt_width)
    if "pooled_prompt_embeds" in args:
        args["pooled_prompt_embeds"] = torch.randn(1, pooled_width)
    try:
        pipe(**args, num_inference_steps=1, guidance_scale=1.0, output_type="pt")
    except (RuntimeError, ValueError):
        return False
    return True


def _ours(
    cls: str, width: int, pooled: list[tuple[str, str, dict[str, Any]]] | None = None
) -> list[str]:
    d_cls, tiny, *_ = CASES[cls]
    encoder, e_cls, key, _ = _TEXT[cls]
    name = "unet" if d_cls == "UNet2DConditionModel" else "transformer"
    base = _CLIP if e_cls.startswith("CLIP") else _T5
    parts = [
        (encoder, e_cls, {**base, key: width}),
        *(pooled if pooled is not None else _POOLED.get(cls, [])),
        (name, d_cls, tiny),
    ]
    return [path for path, _ in text_problems(_pipeline(cls, parts))]


@pytest.mark.parametrize(("cls", "width"), [(c, w) for c in _TEXT for w in (16, 24)])
def test_refused_exactly_when_the_denoiser_fails_on_the_encoders_width(
    cls: str, width: int
) -> None:
    refused = _ours(cls, width)
    assert _runs(cls, width) == (not refused), refused
    key = published.camel({_TEXT[cls][3]: 0})
    assert refused == (
        []
        if width == 16
        else [f"components[{len(_POOLED.get(cls, [])) + 1}].config.{next(iter(key))}"]
    )


@pytest.mark.parametrize("width", [8, 12])
def test_flux_pooled_width_is_the_clip_hidden_size(width: int) -> None:
    clip = [("text_encoder", "CLIPTextModel", {**_CLIP, "hidden_size": width, "projection_dim": 8})]
    refused = _ours("FluxPipeline", 16, clip)
    assert _runs("FluxPipeline", 16, width) == (not refused), refused
    assert refused == ([] if width == 8 else ["components[2].config.pooledProjectionDim"])


@pytest.mark.parametrize("projection", [4, 6])
def test_sd3_pooled_width_is_both_clip_projections(projection: int) -> None:
    clips = [
        ("text_encoder", "CLIPTextModelWithProjection", {**_CLIP, "projection_dim": 4}),
        ("text_encoder_2", "CLIPTextModelWithProjection", {**_CLIP, "projection_dim": projection}),
    ]
    refused = _ours("StableDiffusion3Pipeline", 16, clips)
    assert _runs("StableDiffusion3Pipeline", 16, 4 + projection) == (not refused), refused
    assert refused == ([] if projection == 4 else ["components[3].config.pooledProjectionDim"])
