"""Pipeline settings that each validate but that diffusers cannot run together. Pure.

Read from ``diffusers`` 0.42.1:

- **Wan 2.2's experts.** ``WanPipeline.__call__`` and ``WanImageToVideoPipeline.__call__`` pick
  the denoiser per timestep: ``transformer`` when ``boundary_ratio`` is null or ``t >=
  boundary_ratio * num_train_timesteps``, ``transformer_2`` otherwise, and call it without
  checking that it is there. A pipeline missing the expert its ``boundaryRatio`` sends a
  timestep to fails at that step (``'NoneType' object has no attribute 'cache_context'``)
  after the earlier steps ran, so it is refused rather than sized as the expert that is
  there. The timesteps stay below ``num_train_timesteps``, so a ratio of 1 never runs
  ``transformer`` (the published low-noise-only setting, ``transformer=None,
  boundary_ratio=1.0``), and a ratio of 0 never runs ``transformer_2``.
- **Offload modes.** ``DiffusionPipeline.enable_model_cpu_offload`` and
  ``enable_sequential_cpu_offload`` hook every component and raise ``ValueError`` when any
  component has group offloading (``_maybe_raise_error_if_group_offload_active``), and
  ``apply_group_offloading`` raises when a module already carries accelerate's offload hooks
  (``hooks/group_offloading.py``, ``_raise_error_if_accelerate_model_or_sequential_hook_present``):
  ``Group`` cannot be mixed with ``Model`` or ``Sequential`` in either order.
- **Ulysses degree.** Ulysses sequence parallelism trades the sequence split for a head split
  with an all-to-all: diffusers' ``TemplatedUlyssesAttention.forward``
  (``models/attention_dispatch.py``) reshapes each query, key and value to ``(world_size,
  H // world_size)`` heads, so a degree that does not divide a running denoiser's
  ``num_attention_heads`` fails at the first attention (xDiT's and the Wan and HunyuanVideo
  repositories' Ulysses attention split heads the same way).
- **Sequence parallelism at all.** ``ModelMixin.enable_parallelism`` applies the model's
  ``_cp_plan``, and raises when the class has none: only the Flux, Wan, LTX-Video and Qwen-Image
  transformers of the modelled classes can be split over a Ulysses or ring degree.
- **The classes.** A denoiser or VAE of another sized class than the one the pipeline's
  ``__init__`` annotates (see :data:`PIPELINE_CLASSES`).
"""

from __future__ import annotations

from typing import Final

from gpu_sizer.api.components import COMPONENT_CLASSES, Role
from gpu_sizer.api.spec.generation import ComponentDevice, Pipeline, PipelineOffload

__all__ = [
    "CONTEXT_PARALLEL",
    "ENCODER_CLASSES",
    "PIPELINE_CLASSES",
    "class_mismatches",
    "context_parallel_problems",
    "device_problems",
    "expert_problems",
    "offload_conflict",
    "ulysses_problems",
]

_VERSION: Final = "diffusers 0.42.1"
_WAN: Final = ("WanPipeline", "WanImageToVideoPipeline")
_HOOKED: Final = (PipelineOffload.Model, PipelineOffload.Sequential)
_DENOISER_NAMES: Final = ("unet", "transformer", "transformer_2", "prior")


_SD: Final = {"unet": "UNet2DConditionModel", "vae": "AutoencoderKL"}
_SD3: Final = {"transformer": "SD3Transformer2DModel", "vae": "AutoencoderKL"}
_FLUX: Final = {"transformer": "FluxTransformer2DModel", "vae": "AutoencoderKL"}
_WAN_CLASSES: Final = {
    "transformer": "WanTransformer3DModel",
    "transformer_2": "WanTransformer3DModel",
    "vae": "AutoencoderKLWan",
}
_COGVIDEOX: Final = {"transformer": "CogVideoXTransformer3DModel", "vae": "AutoencoderKLCogVideoX"}
_LTX: Final = {"transformer": "LTXVideoTransformer3DModel", "vae": "AutoencoderKLLTXVideo"}

#: Per pipeline class, the class its ``__init__`` annotates for each denoiser and VAE
#: (diffusers 0.42.1; a test reads the annotations). The memory model, the latent-channel and
#: the text-width rules read a component as that class; a sized class in its place is one the
#: pipeline's ``__call__`` was not written for.
PIPELINE_CLASSES: Final[dict[str, dict[str, str]]] = {
    "StableDiffusionPipeline": _SD,
    "StableDiffusionImg2ImgPipeline": _SD,
    "StableDiffusionXLPipeline": _SD,
    "StableDiffusionXLImg2ImgPipeline": _SD,
    "StableDiffusion3Pipeline": _SD3,
    "StableDiffusion3Img2ImgPipeline": _SD3,
    "FluxPipeline": _FLUX,
    "FluxImg2ImgPipeline": _FLUX,
    "WanPipeline": _WAN_CLASSES,
    "WanImageToVideoPipeline": _WAN_CLASSES,
    "HunyuanVideoPipeline": {
        "transformer": "HunyuanVideoTransformer3DModel",
        "vae": "AutoencoderKLHunyuanVideo",
    },
    "CogVideoXPipeline": _COGVIDEOX,
    "CogVideoXImageToVideoPipeline": _COGVIDEOX,
    "LTXPipeline": _LTX,
    "LTXImageToVideoPipeline": _LTX,
    "MochiPipeline": {"transformer": "MochiTransformer3DModel", "vae": "AutoencoderKLMochi"},
    "QwenImagePipeline": {
        "transformer": "QwenImageTransformer2DModel",
        "vae": "AutoencoderKLQwenImage",
    },
}


_CLIP_T5: Final = {"text_encoder": "CLIPTextModel", "text_encoder_2": "T5EncoderModel"}
_SD_ENC: Final = {"text_encoder": "CLIPTextModel", "image_encoder": "CLIPVisionModelWithProjection"}
_SDXL_ENC: Final = {**_SD_ENC, "text_encoder_2": "CLIPTextModelWithProjection"}
_SD3_ENC: Final = {
    "text_encoder": "CLIPTextModelWithProjection",
    "text_encoder_2": "CLIPTextModelWithProjection",
    "text_encoder_3": "T5EncoderModel",
    "image_encoder": "SiglipVisionModel",
}
_FLUX_ENC: Final = {**_CLIP_T5, "image_encoder": "CLIPVisionModelWithProjection"}
_T5_ENC: Final = {"text_encoder": "T5EncoderModel"}

#: Per pipeline class, the class its ``__init__`` annotates for each text and image encoder
#: (diffusers 0.42.1; a test reads the annotations). An encoder is checked by family only
#: (:data:`_FAMILY`): the published Wan 2.1 I2V folder gives a CLIPVisionModelWithProjection
#: where the annotation says CLIPVisionModel, and a T5 loads where a UMT5 is named.
ENCODER_CLASSES: Final[dict[str, dict[str, str]]] = {
    "StableDiffusionPipeline": _SD_ENC,
    "StableDiffusionImg2ImgPipeline": _SD_ENC,
    "StableDiffusionXLPipeline": _SDXL_ENC,
    "StableDiffusionXLImg2ImgPipeline": _SDXL_ENC,
    "StableDiffusion3Pipeline": _SD3_ENC,
    "StableDiffusion3Img2ImgPipeline": _SD3_ENC,
    "FluxPipeline": _FLUX_ENC,
    "FluxImg2ImgPipeline": _FLUX_ENC,
    "WanPipeline": {"text_encoder": "UMT5EncoderModel"},
    "WanImageToVideoPipeline": {
        "text_encoder": "UMT5EncoderModel",
        "image_encoder": "CLIPVisionModel",
    },
    "HunyuanVideoPipeline": {"text_encoder": "LlamaModel", "text_encoder_2": "CLIPTextModel"},
    "CogVideoXPipeline": _T5_ENC,
    "CogVideoXImageToVideoPipeline": _T5_ENC,
    "LTXPipeline": _T5_ENC,
    "LTXImageToVideoPipeline": _T5_ENC,
    "MochiPipeline": _T5_ENC,
    "QwenImagePipeline": {"text_encoder": "Qwen2_5_VLForConditionalGeneration"},
}
#: Encoder families: a class of another family gives the pipeline other outputs, widths and a
#: tokenizer of another vocabulary.
_FAMILY: Final = {
    "CLIPTextModel": "CLIP",
    "CLIPTextModelWithProjection": "CLIP",
    "CLIPVisionModel": "CLIP",
    "CLIPVisionModelWithProjection": "CLIP",
    "SiglipVisionModel": "SigLIP",
    "T5EncoderModel": "T5",
    "UMT5EncoderModel": "T5",
    "LlamaModel": "Llama",
    "Qwen2_5_VLForConditionalGeneration": "Qwen2.5-VL",
}


def class_mismatches(pipeline: Pipeline) -> list[tuple[int, str, str]]:
    """(index in ``pipeline.components``, message, fix) for each denoiser or VAE of a class
    gpu-sizer sizes that is not the class the pipeline's ``__init__`` annotates for it (an
    ``AutoencoderKL`` as a Wan pipeline's ``vae``), and each encoder of another family than the
    annotated one (a T5 as Qwen-Image's Qwen2.5-VL). ``DiffusionPipeline.from_pretrained`` only
    logs "Expected types for vae" and loads it; whether the call then runs, and what it holds,
    depends on which config attributes of the expected class it reads, which is not modelled.
    A class gpu-sizer does not size is left to the estimate's own report. Never raises."""
    expected = PIPELINE_CLASSES.get(pipeline.class_name)
    if expected is None:
        return []
    encoders = ENCODER_CLASSES.get(pipeline.class_name, {})
    out: list[tuple[int, str, str]] = []
    for i, c in enumerate(pipeline.components):
        want = expected.get(c.name)
        if want is None and c.name in encoders:
            want = encoders[c.name]
            if _FAMILY.get(c.class_name, c.class_name) == _FAMILY.get(want):
                continue
        if want is None or c.class_name == want or c.class_name not in COMPONENT_CLASSES:
            continue
        out.append(
            (
                i,
                f"{pipeline.class_name} takes {c.name} as a {want} ({_VERSION} "
                f'{pipeline.class_name}.__init__; from_pretrained warns "Expected types for '
                f'{c.name}" and loads the {c.class_name} anyway), and its __call__ reads the '
                f"{want} config: a {c.class_name} there is not modelled",
                f"use class {want} with the checkpoint's {c.name}/config.json",
            )
        )
    return out


def device_problems(pipeline: Pipeline) -> list[tuple[str, str]]:
    """(spec path relative to the pipeline, message) for each denoiser with ``device: Cpu``:
    the ``__call__`` puts the latents on ``_execution_device``, the GPU the rest runs on, and a
    CPU denoiser's forward then fails on tensors of two devices. ``device: Cpu`` is for a text
    encoder whose embeddings are made apart (Wan's ``--t5_cpu``). Never raises."""
    out: list[tuple[str, str]] = []
    for i, c in enumerate(pipeline.components):
        known = COMPONENT_CLASSES.get(c.class_name)
        role = known.role if known is not None else None
        if c.device is ComponentDevice.Cpu and (
            role is Role.Denoiser or (known is None and c.name in _DENOISER_NAMES)
        ):
            out.append(
                (
                    f"components[{i}].device",
                    f"{c.name} ({c.class_name}) cannot run on the CPU beside a GPU pipeline: "
                    f"{pipeline.class_name}.__call__ hands it latents on the execution device "
                    f"and its forward fails on tensors of two devices ({_VERSION} "
                    "DiffusionPipeline._execution_device); use device Gpu (offload Model, Group "
                    "or Sequential keep it on the GPU only while it runs)",
                )
            )
    return out


def expert_problems(pipeline: Pipeline) -> list[tuple[str, str]]:
    """(spec path relative to the pipeline, message) for each Wan expert that a timestep of
    the call is sent to but that the pipeline lacks; empty for other classes. Never raises."""
    cls = pipeline.class_name
    if cls not in _WAN:
        return []
    ratio = pipeline.config.get("boundaryRatio")
    if ratio is not None and not isinstance(ratio, int | float):
        return []  # the pipeline options' own check reports it
    names = {c.name for c in pipeline.components}
    where = f"{_VERSION} {cls}.__call__"
    problems: list[tuple[str, str]] = []
    if "transformer" not in names and (ratio is None or ratio < 1):
        when = (
            "every timestep (boundaryRatio null)"
            if ratio is None
            else (f"timesteps t >= boundaryRatio x num_train_timesteps ({ratio} x 1000)")
        )
        problems.append(
            (
                "components",
                f"{cls} runs transformer (the high-noise expert) for {when}, and this pipeline "
                f"has none: the call fails at its first such step ({where}); add the "
                "transformer component, or set config.boundaryRatio 1.0 to run transformer_2 "
                "alone",
            )
        )
    if "transformer_2" not in names and ratio is not None and ratio > 0:
        problems.append(
            (
                "components",
                f"{cls} runs transformer_2 (the low-noise expert) for timesteps t < "
                f"boundaryRatio x num_train_timesteps ({ratio} x 1000), and this pipeline has "
                f"none: the call fails at the first such step ({where}); add the "
                "transformer_2 component, or set config.boundaryRatio null to run "
                "transformer alone",
            )
        )
    return problems


def offload_conflict(pipeline: Pipeline, offload: PipelineOffload) -> tuple[int, str] | None:
    """(index in ``pipeline.components``, message) for the first component whose offload
    mode (its own, else the pipeline's ``offload``) diffusers refuses beside another's:
    ``Group`` with ``Model`` or ``Sequential``; ``None`` when they can run together. Never
    raises."""
    modes = [
        (i, c.name, c.offload or offload)
        for i, c in enumerate(pipeline.components)
        if c.device is not ComponentDevice.Cpu
    ]
    hooked = [(n, m) for _, n, m in modes if m in _HOOKED]
    grouped = [(i, n) for i, n, m in modes if m is PipelineOffload.Group]
    if not hooked or not grouped:
        return None
    i, name = grouped[0]
    other, mode = hooked[0]
    call = (
        "enable_model_cpu_offload"
        if mode is PipelineOffload.Model
        else ("enable_sequential_cpu_offload")
    )
    return (
        i,
        f"{name} is group-offloaded while {other} has offload {mode.value}: diffusers' {call} "
        "refuses a pipeline with a group-offloaded component, and group offloading refuses a "
        f"module that already has accelerate's offload hooks ({_VERSION} "
        "DiffusionPipeline._maybe_raise_error_if_group_offload_active, "
        "hooks/group_offloading.py); use one of Group or Model/Sequential for every component "
        "on the GPU, or offload None for the others",
    )


#: Denoiser classes that set ``ModelMixin._cp_plan`` in diffusers 0.42.1 (a test reads the
#: attribute): ``enable_parallelism`` raises for any other ("`cp_plan` must be provided either as
#: an argument or set in the model's `_cp_plan` attribute", ``modeling_utils.py``), so Ulysses and
#: ring sequence parallelism run only on these.
CONTEXT_PARALLEL: Final = frozenset(
    {
        "FluxTransformer2DModel",
        "WanTransformer3DModel",
        "LTXVideoTransformer3DModel",
        "QwenImageTransformer2DModel",
    }
)


def context_parallel_problems(pipeline: Pipeline, degree: int) -> list[str]:
    """A message for each sized denoiser that cannot be split over a sequence-parallel
    ``degree`` (``ulyssesDegree x ringDegree``) > 1: its class has no ``_cp_plan``
    (:data:`CONTEXT_PARALLEL`); empty at degree 1. Never raises."""
    if degree <= 1:
        return []
    return [
        f"{c.name} ({c.class_name}) has no _cp_plan in {_VERSION}: enable_parallelism "
        f"refuses to split it over {degree} GPUs (ModelMixin.enable_parallelism raises "
        '"`cp_plan` must be provided"); set ulyssesDegree and ringDegree to 1 (sequence '
        "parallelism runs on Flux, Wan, LTX-Video and Qwen-Image transformers)"
        for c in pipeline.components
        if (known := COMPONENT_CLASSES.get(c.class_name)) is not None
        and known.role is Role.Denoiser
        and c.class_name not in CONTEXT_PARALLEL
    ]


def ulysses_problems(pipeline: Pipeline, degree: int) -> list[str]:
    """A message (about ``spec.generation.parallelism.ulyssesDegree``) for each sized denoiser whose
    ``num_attention_heads`` the Ulysses ``degree`` does not divide; empty at degree 1. A
    UNet's heads differ per level and are not checked. Never raises."""
    if degree <= 1:
        return []
    problems: list[str] = []
    for c in pipeline.components:
        known = COMPONENT_CLASSES.get(c.class_name)
        if known is None or known.role is not Role.Denoiser:
            continue
        heads = c.resolved_config().get("num_attention_heads")
        if not isinstance(heads, int) or heads % degree == 0:
            continue
        # the degrees one node of up to 8 GPUs holds
        fits = [d for d in range(2, 9) if heads % d == 0]
        use = " or ".join(str(d) for d in fits) if fits else "1"
        problems.append(
            f"ulyssesDegree {degree} does not divide {c.name}'s ({c.class_name}) {heads} "
            f"attention heads: Ulysses attention splits the heads over the {degree} GPUs and "
            f"fails at the first attention otherwise ({_VERSION} "
            "TemplatedUlyssesAttention.forward); set spec.generation.parallelism.ulyssesDegree "
            f"to {use} (ringDegree splits the sequence without the heads)"
        )
    return problems
