"""What each diffusers pipeline class does with its components during one call. Pure.

Read from the ``__call__`` and ``encode_prompt`` of each pipeline in ``diffusers`` 0.42.1
(``diffusers/pipelines/<family>/pipeline_<name>.py``):

- ``offload_sequence``: the class's ``model_cpu_offload_seq``: under
  ``enable_model_cpu_offload`` each model is moved to the GPU when its ``forward`` runs and the
  previous one in this chain is moved back (``accelerate`` ``cpu_offload_with_hook`` with
  ``prev_module_hook``), so one model of the chain is resident at a time;
- ``guidance``: ``Batched`` pipelines concatenate the unconditional and conditional inputs into
  one denoiser call (``torch.cat([latents] * 2)``: SD, SDXL, SD3, CogVideoX, LTX-Video, Mochi);
  ``Sequential`` ones call the denoiser twice (Wan's ``noise_uncond = current_model(...)``,
  Flux's, HunyuanVideo's and Qwen-Image's ``true_cfg_scale`` path, which runs when a negative
  prompt is given and ``true_cfg_scale > 1``);
- ``text_tokens``: the tokens each text encoder encodes (CLIP's 77; the ``max_sequence_length``
  default of the call for T5, UMT5 and Llama; HunyuanVideo's Llama also encodes its prompt
  template's ``crop_start`` tokens, 95, before cropping them);
- ``denoiser_tokens``: the text tokens the denoiser attends to (SD3 concatenates CLIP's 77 with
  T5's; Flux and HunyuanVideo feed only the T5/Llama sequence, CLIP gives the pooled vector);
  QwenImagePipeline's Qwen2.5-VL encodes its prompt template's 34 system tokens
  (``prompt_template_encode_start_idx``) and up to ``tokenizer_max_length`` (1024) prompt
  tokens, then drops the template's tokens: the denoiser sees at most ``max_sequence_length``
  (512) of them, a cut made after the encoder ran, so ``maxSequenceLength`` does not shorten
  the encode;
- ``upcast_vae``: SDXL decodes in float32 when the VAE is float16 and its config says
  ``force_upcast`` (``StableDiffusionXLPipeline.upcast_vae``);
- ``encodes``: what image-to-image and image-to-video calls put through the VAE encoder first
  (``Image``: the input image; ``Video``: Wan's conditioning video, the image followed by
  ``num_frames - 1`` zero frames, ``WanImageToVideoPipeline.prepare_latents``);
- ``encode_order``: the text encoders one ``encode_prompt`` call runs, in order (SD3:
  ``_get_clip_prompt_embeds`` twice, then ``_get_t5_prompt_embeds``; Flux and HunyuanVideo: the
  CLIP pooled embedding after/before the T5/Llama sequence as their ``encode_prompt`` does); the
  negative prompt repeats the same order when guidance runs (``negative_prompt or ""``);
- ``signature``: the ``__init__`` arguments diffusers' loader matches ``model_index.json``
  against (``DiffusionPipeline._get_signature_keys``): the components, and the options with
  their defaults (``boundary_ratio``, ``requires_safety_checker``...);
- ``exclude_from_offload``: ``_exclude_from_cpu_offload``: components that
  ``enable_model_cpu_offload`` and ``enable_sequential_cpu_offload`` move to the GPU once and
  keep there (SD's safety checker);
- ``after_decode``: models run on the decoded output (SD's ``run_safety_checker``).

``tests/budget/diffusion/test_pipelines.py`` checks ``offload_sequence``, ``signature`` and
``exclude_from_offload`` against the diffusers 0.42.1 classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from gpu_sizer.api import GenerationTask

__all__ = ["PIPELINES", "Encodes", "Guidance", "PipelineKind"]

T2I, I2I = GenerationTask.TextToImage, GenerationTask.ImageToImage
T2V, I2V = GenerationTask.TextToVideo, GenerationTask.ImageToVideo


class Guidance(StrEnum):
    """How classifier-free guidance runs the denoiser."""

    Batched = "Batched"
    Sequential = "Sequential"


class Encodes(StrEnum):
    """What the VAE encodes before denoising."""

    Nothing = "Nothing"
    Image = "Image"
    Video = "Video"


@dataclass(frozen=True)
class PipelineKind:
    """One pipeline class's behaviour (see the module docstring)."""

    tasks: tuple[GenerationTask, ...]
    offload_sequence: tuple[str, ...]
    guidance: Guidance
    text_tokens: dict[str, int]
    denoiser_tokens: int
    sequence_length: int | None = None
    upcast_vae: bool = False
    encodes: Encodes = Encodes.Nothing
    template_tokens: dict[str, int] = field(default_factory=dict)
    encode_order: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    exclude_from_offload: tuple[str, ...] = ()
    after_decode: tuple[str, ...] = ()


_SD_SEQ = ("text_encoder", "image_encoder", "unet", "vae")
_SDXL_SEQ = ("text_encoder", "text_encoder_2", "image_encoder", "unet", "vae")
_SD3_SEQ = (
    "text_encoder",
    "text_encoder_2",
    "text_encoder_3",
    "image_encoder",
    "transformer",
    "vae",
)
_FLUX_SEQ = ("text_encoder", "text_encoder_2", "image_encoder", "transformer", "vae")

_BASE: Final[dict[str, PipelineKind]] = {
    "StableDiffusionPipeline": PipelineKind(
        (T2I,), _SD_SEQ, Guidance.Batched, {"text_encoder": 77}, 77
    ),
    "StableDiffusionImg2ImgPipeline": PipelineKind(
        (I2I,), _SD_SEQ, Guidance.Batched, {"text_encoder": 77}, 77, encodes=Encodes.Image
    ),
    "StableDiffusionXLPipeline": PipelineKind(
        (T2I,),
        _SDXL_SEQ,
        Guidance.Batched,
        {"text_encoder": 77, "text_encoder_2": 77},
        77,
        upcast_vae=True,
    ),
    "StableDiffusionXLImg2ImgPipeline": PipelineKind(
        (I2I,),
        _SDXL_SEQ,
        Guidance.Batched,
        {"text_encoder": 77, "text_encoder_2": 77},
        77,
        upcast_vae=True,
        encodes=Encodes.Image,
    ),
    "StableDiffusion3Pipeline": PipelineKind(
        (T2I,),
        _SD3_SEQ,
        Guidance.Batched,
        {"text_encoder": 77, "text_encoder_2": 77, "text_encoder_3": 256},
        77 + 256,
        sequence_length=256,
    ),
    "StableDiffusion3Img2ImgPipeline": PipelineKind(
        (I2I,),
        _SD3_SEQ,
        Guidance.Batched,
        {"text_encoder": 77, "text_encoder_2": 77, "text_encoder_3": 256},
        77 + 256,
        sequence_length=256,
        encodes=Encodes.Image,
    ),
    "FluxPipeline": PipelineKind(
        (T2I,),
        _FLUX_SEQ,
        Guidance.Sequential,
        {"text_encoder": 77, "text_encoder_2": 512},
        512,
        sequence_length=512,
    ),
    "FluxImg2ImgPipeline": PipelineKind(
        (I2I,),
        _FLUX_SEQ,
        Guidance.Sequential,
        {"text_encoder": 77, "text_encoder_2": 512},
        512,
        sequence_length=512,
        encodes=Encodes.Image,
    ),
    "WanPipeline": PipelineKind(
        (T2V,),
        ("text_encoder", "transformer", "transformer_2", "vae"),
        Guidance.Sequential,
        {"text_encoder": 226},
        226,
        sequence_length=226,
    ),
    "WanImageToVideoPipeline": PipelineKind(
        (I2V,),
        ("text_encoder", "image_encoder", "transformer", "transformer_2", "vae"),
        Guidance.Sequential,
        {"text_encoder": 512},
        512,
        sequence_length=512,
        encodes=Encodes.Video,
    ),
    "HunyuanVideoPipeline": PipelineKind(
        (T2V,),
        ("text_encoder", "text_encoder_2", "transformer", "vae"),
        Guidance.Sequential,
        {"text_encoder": 256, "text_encoder_2": 77},
        256,
        sequence_length=256,
        template_tokens={"text_encoder": 95},
    ),
    "CogVideoXPipeline": PipelineKind(
        (T2V,),
        ("text_encoder", "transformer", "vae"),
        Guidance.Batched,
        {"text_encoder": 226},
        226,
        sequence_length=226,
    ),
    "CogVideoXImageToVideoPipeline": PipelineKind(
        (I2V,),
        ("text_encoder", "transformer", "vae"),
        Guidance.Batched,
        {"text_encoder": 226},
        226,
        sequence_length=226,
        encodes=Encodes.Image,
    ),
    "LTXPipeline": PipelineKind(
        (T2V,),
        ("text_encoder", "transformer", "vae"),
        Guidance.Batched,
        {"text_encoder": 128},
        128,
        sequence_length=128,
    ),
    "LTXImageToVideoPipeline": PipelineKind(
        (I2V,),
        ("text_encoder", "transformer", "vae"),
        Guidance.Batched,
        {"text_encoder": 128},
        128,
        sequence_length=128,
        encodes=Encodes.Image,
    ),
    "MochiPipeline": PipelineKind(
        (T2V,),
        ("text_encoder", "transformer", "vae"),
        Guidance.Batched,
        {"text_encoder": 256},
        256,
        sequence_length=256,
    ),
    "QwenImagePipeline": PipelineKind(
        (T2I,),
        ("text_encoder", "transformer", "vae"),
        Guidance.Sequential,
        {"text_encoder": 1024},
        512,
        sequence_length=512,
        template_tokens={"text_encoder": 34},
    ),
}

_SD = (
    "vae",
    "text_encoder",
    "tokenizer",
    "unet",
    "scheduler",
    "safety_checker",
    "feature_extractor",
    "image_encoder",
)
_SDXL = (
    "vae",
    "text_encoder",
    "text_encoder_2",
    "tokenizer",
    "tokenizer_2",
    "unet",
    "scheduler",
    "image_encoder",
    "feature_extractor",
)
_SD3 = (
    "transformer",
    "scheduler",
    "vae",
    "text_encoder",
    "tokenizer",
    "text_encoder_2",
    "tokenizer_2",
    "text_encoder_3",
    "tokenizer_3",
    "image_encoder",
    "feature_extractor",
)
_FLUX = (
    "scheduler",
    "vae",
    "text_encoder",
    "tokenizer",
    "text_encoder_2",
    "tokenizer_2",
    "transformer",
    "image_encoder",
    "feature_extractor",
)
_WAN = ("tokenizer", "text_encoder", "vae", "scheduler", "transformer", "transformer_2")
_WAN_OPTIONS = {"boundary_ratio": None, "expand_timesteps": False}
_ONE_TE = ("scheduler", "vae", "text_encoder", "tokenizer", "transformer")
_SDXL_OPTIONS = {"force_zeros_for_empty_prompt": True, "add_watermarker": None}
_SD_EXTRA: dict[str, Any] = {
    "encode_order": ("text_encoder",),
    "components": _SD,
    "options": {"requires_safety_checker": True},
    "exclude_from_offload": ("safety_checker",),
    "after_decode": ("safety_checker",),
}
_SDXL_EXTRA: dict[str, Any] = {
    "encode_order": ("text_encoder", "text_encoder_2"),
    "components": _SDXL,
    "options": _SDXL_OPTIONS,
}
_SD3_EXTRA: dict[str, Any] = {
    "encode_order": ("text_encoder", "text_encoder_2", "text_encoder_3"),
    "components": _SD3,
}
_FLUX_EXTRA: dict[str, Any] = {
    "encode_order": ("text_encoder", "text_encoder_2"),
    "components": _FLUX,
}
_ONE_EXTRA: dict[str, Any] = {"encode_order": ("text_encoder",), "components": _ONE_TE}

#: Per class: the call order, signature and offload exclusions read from diffusers 0.42.1
#: (``__init__``, ``encode_prompt``, ``_exclude_from_cpu_offload``, ``run_safety_checker``).
_EXTRA: Final[dict[str, dict[str, Any]]] = {
    "StableDiffusionPipeline": _SD_EXTRA,
    "StableDiffusionImg2ImgPipeline": _SD_EXTRA,
    "StableDiffusionXLPipeline": _SDXL_EXTRA,
    "StableDiffusionXLImg2ImgPipeline": {
        **_SDXL_EXTRA,
        "options": {"requires_aesthetics_score": False, **_SDXL_OPTIONS},
    },
    "StableDiffusion3Pipeline": _SD3_EXTRA,
    "StableDiffusion3Img2ImgPipeline": _SD3_EXTRA,
    "FluxPipeline": _FLUX_EXTRA,
    "FluxImg2ImgPipeline": _FLUX_EXTRA,
    "WanPipeline": {"encode_order": ("text_encoder",), "components": _WAN, "options": _WAN_OPTIONS},
    "WanImageToVideoPipeline": {
        "encode_order": ("text_encoder",),
        "components": (*_WAN[:4], "image_processor", "image_encoder", *_WAN[4:]),
        "options": _WAN_OPTIONS,
    },
    "HunyuanVideoPipeline": {
        "encode_order": ("text_encoder", "text_encoder_2"),
        "components": (
            "text_encoder",
            "tokenizer",
            "transformer",
            "vae",
            "scheduler",
            "text_encoder_2",
            "tokenizer_2",
        ),
    },
    "CogVideoXPipeline": {
        "encode_order": ("text_encoder",),
        "components": ("tokenizer", "text_encoder", "vae", "transformer", "scheduler"),
    },
    "CogVideoXImageToVideoPipeline": {
        "encode_order": ("text_encoder",),
        "components": ("tokenizer", "text_encoder", "vae", "transformer", "scheduler"),
    },
    "QwenImagePipeline": {
        "encode_order": ("text_encoder",),
        "components": ("scheduler", "vae", "text_encoder", "tokenizer", "transformer"),
    },
    "LTXPipeline": _ONE_EXTRA,
    "LTXImageToVideoPipeline": _ONE_EXTRA,
    "MochiPipeline": {**_ONE_EXTRA, "options": {"force_zeros_for_empty_prompt": False}},
}

#: Pipeline classes by ``model_index.json`` ``_class_name``. ``sequence_length`` is the call's
#: ``max_sequence_length`` default (applied to the encoders listed with it in ``text_tokens``
#: when ``spec.generation.maxSequenceLength`` overrides it).
PIPELINES: Final[dict[str, PipelineKind]] = {
    name: replace(kind, **_EXTRA[name]) for name, kind in _BASE.items()
}
