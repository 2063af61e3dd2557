"""Synthetic image and video generation: the pipeline's own classes, one call's phases.

Each component of ``spec.model.pipeline`` is built by the library that runs it (``diffusers``
0.42.1 ``ModelMixin.from_config``; ``transformers`` 5.24 from its config class) with randomly
initialised weights of the published shapes, in the spec's dtype. The run then does what one
pipeline call does, phase by phase (the estimate's phases, ``budget/diffusion/estimate.py``):

- ``text-encode``: every text encoder on random token ids of the lengths the pipeline class
  encodes (``budget/diffusion/pipelines.py`` ``text_tokens``); the image encoder on one random
  image, and the VAE encode of the conditioning input for image-to-image and image-to-video;
- ``denoise``: one denoiser forward at the spec's latent size (twice the batch when the pipeline
  batches classifier-free guidance; two forwards when it runs them in turn), every denoiser of
  the pipeline in turn (Wan 2.2's two experts);
- ``vae-decode``: ``vae.decode`` of random latents of the final size (``enable_tiling`` /
  ``enable_slicing`` as the spec says).

One step suffices: a denoising step frees what it allocated, so the peak of the first is the
peak of every step. Inputs are random tensors of the shapes each family's pipeline passes
(the pipeline files named in :func:`denoiser_inputs`); the scheduler and tokenizers hold no
device memory and are not built. Offload ``None`` keeps every component on the device; ``Model``
moves each model to the device for its phase and back, as ``enable_model_cpu_offload``'s hooks
do; ``device: Cpu`` components run on the CPU. The other modes are refused before anything is
built (:func:`gpu_sizer.probe.support.synthetic_unsupported_reason`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from pydantic.alias_generators import to_snake

from gpu_sizer.api import ComponentDevice, GPUWorkloadSpec, PipelineComponent, PipelineOffload
from gpu_sizer.api.components import COMPONENT_CLASSES, Role
from gpu_sizer.api.spec.output_size import output_size
from gpu_sizer.budget.diffusion.decode import latent_geometry
from gpu_sizer.budget.diffusion.pipelines import PIPELINES, Encodes, Guidance
from gpu_sizer.probe.memory import Recorder

__all__ = ["GenerationFigures", "denoiser_inputs", "run_generation"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class GenerationFigures:
    """What the run built: parameters and weight bytes of every component."""

    parameter_count: int
    weights_bytes: int
    notes: list[str] = field(default_factory=list)


def _snake(config: dict[str, Any]) -> dict[str, Any]:
    return {to_snake(k): _snake(v) if isinstance(v, dict) else v for k, v in config.items()}


def _build(c: PipelineComponent, dtype: torch.dtype) -> Any:
    """``c``'s library model from its config (snake_case keys), on the CPU, in ``dtype``."""
    import diffusers
    import transformers

    known = COMPONENT_CLASSES[c.class_name]
    config = _snake(c.config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if known.library == "transformers":
            cls = getattr(transformers, c.class_name)
            model = cls(cls.config_class(**config))
        elif known.library == "stable_diffusion":
            from diffusers.pipelines.stable_diffusion.safety_checker import (
                StableDiffusionSafetyChecker,
            )

            model = StableDiffusionSafetyChecker(transformers.CLIPConfig(**config))
        else:
            model = getattr(diffusers, c.class_name).from_config(config)
    if known.library != "diffusers":
        # transformers' from_pretrained (modeling_utils.py _get_dtype_plan): the model arrives
        # in torch_dtype except _keep_in_fp32_modules (T5's wo) when that dtype is float16,
        # matched by regex search on the parameter names, as the estimate counts them
        import re

        model = model.to(dtype)
        keep = tuple(getattr(model, "_keep_in_fp32_modules", None) or ())
        if dtype == torch.float16 and keep:
            for name, p in model.named_parameters():
                if any(re.search(k, name) for k in keep):
                    p.data = p.data.to(torch.float32)
        return model.eval()
    # diffusers ModelMixin.from_pretrained (modeling_utils.py, load_model_dict_into_meta): the
    # checkpoint's tensors arrive in torch_dtype except _keep_in_fp32_modules; buffers made in
    # __init__ and not saved (non-persistent: rotary tables) keep the float32 they were made in
    keep = tuple(getattr(model, "_keep_in_fp32_modules", None) or ())
    for name, p in model.named_parameters():
        if not any(k in name.split(".") for k in keep):
            p.data = p.data.to(dtype)
    for module in model.modules():
        for b, t in module._buffers.items():
            if t is not None and b not in module._non_persistent_buffers_set:
                module._buffers[b] = t.to(dtype)
    return model.eval()


def _config(model: Any) -> dict[str, Any]:
    """Every config key of a built model, the class defaults filled in (snake_case)."""
    config = model.config
    return dict(config.to_dict() if hasattr(config, "to_dict") else config)


def _size(model: Any) -> tuple[int, int]:
    tensors = [*model.parameters(), *model.buffers()]
    params = sum(p.numel() for p in model.parameters())
    return params, sum(t.numel() * t.element_size() for t in tensors)


def denoiser_inputs(
    cls: str,
    config: dict[str, Any],
    batch: int,
    frames: int,
    height: int,
    width: int,
    text: int,
    dtype: torch.dtype,
    device: torch.device,
) -> dict[str, Any]:
    """The keyword arguments the pipeline passes to one denoiser forward, as random tensors.

    ``height`` and ``width`` are latent cells, ``frames`` latent frames, ``text`` the text
    tokens the denoiser attends to; ``config`` is the resolved config (snake_case). Shapes from
    the ``__call__`` of the pipeline of each family in ``diffusers`` 0.42.1:
    ``pipeline_stable_diffusion(_xl).py`` (``sample``, ``encoder_hidden_states``, SDXL's
    ``added_cond_kwargs``), ``pipeline_stable_diffusion_3.py``, ``pipeline_flux.py`` (packed
    2x2 latents, ``img_ids``/``txt_ids``), ``pipeline_wan(_i2v).py``,
    ``pipeline_hunyuan_video.py``, ``pipeline_cogvideox.py`` (``[B, F, C, H, W]``, rotary tables),
    ``pipeline_ltx.py`` (packed tokens with ``num_frames``/``height``/``width``),
    ``pipeline_mochi.py`` (``[B, C, F, H, W]``, a boolean prompt mask) and
    ``pipeline_qwenimage.py`` (packed 2x2 latents with ``img_shapes``).
    """

    def r(*shape: int, dt: torch.dtype = dtype) -> torch.Tensor:
        return torch.randn(*shape, dtype=dt, device=device)

    t = torch.full((batch,), 500.0, device=device)
    ch = int(config["in_channels"])
    if cls == "UNet2DConditionModel":
        out: dict[str, Any] = {
            "sample": r(batch, ch, height, width),
            "timestep": t,
            "encoder_hidden_states": r(batch, text, int(config["cross_attention_dim"])),
        }
        if config.get("addition_embed_type") == "text_time":
            pooled = int(config["projection_class_embeddings_input_dim"]) - 6 * int(
                config["addition_time_embed_dim"]
            )
            out["added_cond_kwargs"] = {"text_embeds": r(batch, pooled), "time_ids": r(batch, 6)}
        return out
    if cls == "SD3Transformer2DModel":
        return {
            "hidden_states": r(batch, ch, height, width),
            "encoder_hidden_states": r(batch, text, int(config["joint_attention_dim"])),
            "pooled_projections": r(batch, int(config["pooled_projection_dim"])),
            "timestep": t,
        }
    if cls == "FluxTransformer2DModel":
        n = (height // 2) * (width // 2)
        out = {
            "hidden_states": r(batch, n, ch),
            "encoder_hidden_states": r(batch, text, int(config["joint_attention_dim"])),
            "pooled_projections": r(batch, int(config["pooled_projection_dim"])),
            "timestep": t / 1000,
            "img_ids": torch.zeros(n, 3, device=device),
            "txt_ids": torch.zeros(text, 3, device=device),
        }
        if config.get("guidance_embeds"):
            out["guidance"] = torch.full((batch,), 3.5, device=device)
        return out
    if cls == "QwenImageTransformer2DModel":
        # pipeline_qwenimage.py: 2x2-packed latents, img_shapes per sample, timestep / 1000
        n = (height // 2) * (width // 2)
        return {
            "hidden_states": r(batch, n, ch),
            "encoder_hidden_states": r(batch, text, int(config["joint_attention_dim"])),
            "timestep": t / 1000,
            "img_shapes": [[(1, height // 2, width // 2)]] * batch,
        }
    if cls == "WanTransformer3DModel":
        out = {
            "hidden_states": r(batch, ch, frames, height, width),
            "timestep": t,
            "encoder_hidden_states": r(batch, text, int(config["text_dim"])),
        }
        if config.get("image_dim"):
            out["encoder_hidden_states_image"] = r(batch, 257, int(config["image_dim"]))
        return out
    if cls == "HunyuanVideoTransformer3DModel":
        return {
            "hidden_states": r(batch, ch, frames, height, width),
            "timestep": t,
            "encoder_hidden_states": r(batch, text, int(config["text_embed_dim"])),
            "encoder_attention_mask": torch.ones(batch, text, device=device),
            "pooled_projections": r(batch, int(config["pooled_projection_dim"])),
            "guidance": torch.full((batch,), 6000.0, device=device),
        }
    if cls == "CogVideoXTransformer3DModel":
        out = {
            "hidden_states": r(batch, frames, ch, height, width),
            "encoder_hidden_states": r(batch, text, int(config["text_embed_dim"])),
            "timestep": t,
        }
        if config.get("use_rotary_positional_embeddings"):
            p = int(config["patch_size"])
            tokens = frames * (height // p) * (width // p)
            head = int(config["attention_head_dim"])
            out["image_rotary_emb"] = (
                r(tokens, head, dt=torch.float32),
                r(tokens, head, dt=torch.float32),
            )
        return out
    if cls == "LTXVideoTransformer3DModel":
        return {
            "hidden_states": r(batch, frames * height * width, ch),
            "encoder_hidden_states": r(batch, text, int(config["caption_channels"])),
            "timestep": t,
            "encoder_attention_mask": torch.ones(batch, text, device=device),
            "num_frames": frames,
            "height": height,
            "width": width,
        }
    if cls == "MochiTransformer3DModel":
        return {
            "hidden_states": r(batch, ch, frames, height, width),
            "encoder_hidden_states": r(batch, text, int(config["text_embed_dim"])),
            "timestep": t,
            "encoder_attention_mask": torch.ones(batch, text, dtype=torch.bool, device=device),
        }
    raise KeyError(cls)


def run_generation(
    spec: GPUWorkloadSpec, dtype: torch.dtype, device: torch.device, recorder: Recorder
) -> GenerationFigures:
    """Run one synthetic pipeline call, recording ``load``, ``text-encode``, ``denoise`` and
    ``vae-decode``.

    :raises gpu_sizer.probe.memory.OutOfMemory: an allocation failed (phase and size inside).
    :raises gpu_sizer.probe.memory.DeadlineExceeded: the deadline passed between phases.
    """
    gen, pipeline = spec.generation, spec.model.pipeline
    assert gen is not None and pipeline is not None
    kind = PIPELINES[pipeline.class_name]
    cpu = torch.device("cpu")
    notes = [
        "synthetic generation: random weights and inputs of the pipeline's shapes, one "
        "denoising step (every step has the same peak), schedulers and tokenizers not built"
    ]
    # the shapes the pipeline's __call__ really runs (Flux rounds sides, Wan numFrames)
    runs = output_size(pipeline, gen.task.video, gen.height, gen.width, gen.num_frames)
    if (runs.height, runs.width, runs.num_frames) != (gen.height, gen.width, gen.num_frames):
        gen = gen.model_copy(
            update={"height": runs.height, "width": runs.width, "num_frames": runs.num_frames}
        )
    notes += runs.notes
    comps = pipeline.components
    offload = {c.name: c.offload or gen.offload for c in comps}

    def home(c: PipelineComponent) -> torch.device:
        if c.device is ComponentDevice.Cpu or offload[c.name] is PipelineOffload.Model:
            return cpu
        return device

    def run_on(c: PipelineComponent) -> torch.device:
        return cpu if c.device is ComponentDevice.Cpu else device

    models: dict[str, Any] = {}
    dtypes = {c.name: _DTYPES[(c.dtype or spec.model.dtype).value] for c in comps}
    params = weights = 0
    with recorder.phase("load"):
        for c in comps:
            model = _build(c, dtypes[c.name])
            p, b = _size(model)
            params, weights = params + p, weights + b
            models[c.name] = model.to(home(c))
    configs = {name: _config(model) for name, model in models.items()}
    roles = {c.name: COMPONENT_CLASSES[c.class_name].role for c in comps}
    by_name = {c.name: c for c in comps}

    def enter(name: str) -> tuple[Any, torch.device]:
        c = by_name[name]
        model = models[name]
        where = run_on(c)
        if home(c) != where:
            model.to(where)
        return model, where

    def leave(name: str) -> None:
        c = by_name[name]
        if home(c) != run_on(c):
            models[name].to(home(c))

    batch = gen.batch_size
    vae_name = next((c.name for c in comps if roles[c.name] is Role.Vae), None)
    assert vae_name is not None
    vae_cfg = configs[vae_name]
    s, tf, latent_ch = latent_geometry(by_name[vae_name].class_name, vae_cfg)
    video = gen.task.value.endswith("Video")
    frames = (gen.num_frames - 1) // tf + 1 if video else 1
    lh, lw = gen.height // s, gen.width // s

    with torch.no_grad(), recorder.phase("text-encode"):
        for c in comps:
            if roles[c.name] is Role.TextEncoder:
                model, where = enter(c.name)
                tokens = kind.text_tokens.get(c.name, 77) + kind.template_tokens.get(c.name, 0)
                # Qwen2.5-VL's vocabulary is in its text_config
                te = configs[c.name].get("text_config") or configs[c.name]
                vocab = int(te["vocab_size"])
                ids = torch.randint(0, vocab, (batch, tokens), device=where)
                if c.class_name == "Qwen2_5_VLForConditionalGeneration":
                    # as QwenImagePipeline._get_qwen_prompt_embeds calls it
                    model(input_ids=ids, output_hidden_states=True)
                else:
                    model(input_ids=ids)
                del ids
                leave(c.name)
            elif roles[c.name] is Role.ImageEncoder:
                model, where = enter(c.name)
                size = int(configs[c.name]["image_size"])
                pixels = torch.randn(batch, 3, size, size, device=where, dtype=dtypes[c.name])
                # as the pipeline's encode_image calls it: every layer's hidden states kept
                model(pixel_values=pixels, output_hidden_states=True)
                del pixels
                leave(c.name)
        if kind.encodes is not Encodes.Nothing:
            model, where = enter(vae_name)
            vdt = dtypes[vae_name]
            if kind.encodes is Encodes.Video:
                pixels = torch.randn(batch, 3, gen.num_frames, gen.height, gen.width, device=where)
            else:
                pixels = torch.randn(batch, 3, gen.height, gen.width, device=where)
            model.encode(pixels.to(vdt))
            del pixels
            leave(vae_name)
    recorder.check_deadline()

    cfg = gen.classifier_free_guidance
    passes = 2 if cfg and kind.guidance is Guidance.Sequential else 1
    dbatch = batch * (2 if cfg and kind.guidance is Guidance.Batched else 1)
    text = kind.denoiser_tokens
    if gen.max_sequence_length is not None and kind.sequence_length is not None:
        text = text - kind.sequence_length + gen.max_sequence_length
    with torch.no_grad(), recorder.phase("denoise"):
        for c in comps:
            if roles[c.name] is not Role.Denoiser:
                continue
            model, where = enter(c.name)
            ddt = dtypes[c.name]
            for _ in range(passes):
                inputs = denoiser_inputs(
                    c.class_name, configs[c.name], dbatch, frames, lh, lw, text, ddt, where
                )
                model(**inputs, return_dict=False)
                del inputs
            leave(c.name)
    recorder.check_deadline()

    with torch.no_grad(), recorder.phase("vae-decode"):
        model, where = enter(vae_name)
        if gen.vae_tiling:
            model.enable_tiling()
        if gen.vae_slicing:
            model.enable_slicing()
        vdt = dtypes[vae_name]
        if kind.upcast_vae and vdt == torch.float16 and vae_cfg.get("force_upcast", True):
            model.to(torch.float32)
            vdt = torch.float32
            notes.append("the float16 VAE decodes in float32 (force_upcast), as the pipeline does")
        # AutoencoderKLQwenImage decodes [B, C, 1, H, W] for an image (QwenImagePipeline)
        five = video or by_name[vae_name].class_name == "AutoencoderKLQwenImage"
        shape = (batch, latent_ch, frames, lh, lw) if five else (batch, latent_ch, lh, lw)
        model.decode(torch.randn(*shape, device=where, dtype=vdt), return_dict=False)
        leave(vae_name)
    return GenerationFigures(parameter_count=params, weights_bytes=weights, notes=notes)
