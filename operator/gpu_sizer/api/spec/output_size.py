"""The output size a diffusers pipeline really runs at, or the reason it refuses to run. Pure.

A ``pipe(height=..., width=..., num_frames=...)`` call either refuses a size (``check_inputs``
raises ``ValueError``, or a later step fails on mismatched shapes) or quietly changes it (a
warning, or integer division in ``prepare_latents`` or the image processor). A refused size is a
spec error, since the workload would never start; a changed size is what the GPU really holds,
so the estimate sizes that one and says so.

Read from ``diffusers`` 0.42.1, the version the memory model follows
(``diffusers/pipelines/<family>/pipeline_<name>.py``), per class in :data:`SIZE_RULES`:

- ``StableDiffusionPipeline``, ``StableDiffusionXLPipeline``: ``check_inputs`` raises unless
  height and width are divisible by 8 (a literal 8, whatever the VAE);
- ``StableDiffusionImg2ImgPipeline``, ``StableDiffusionXLImg2ImgPipeline``: the output is the
  input image as ``image_processor.preprocess(image)`` resizes it:
  ``VaeImageProcessor.get_default_height_width`` rounds each side down to a multiple of the
  VAE's scale factor (``2 ** (len(vae.config.block_out_channels) - 1)``, 8);
- ``StableDiffusion3Pipeline``, ``StableDiffusion3Img2ImgPipeline``: ``check_inputs`` raises
  unless divisible by ``vae_scale_factor * patch_size`` (the transformer's, 2): 16;
- ``FluxPipeline``, ``FluxImg2ImgPipeline``: ``check_inputs`` only warns ("Dimensions will be
  resized accordingly"); ``prepare_latents`` (and the img2img ``image_processor``, built with
  ``vae_scale_factor * 2``) round each side down to a multiple of ``vae_scale_factor * 2``, 16;
- ``WanPipeline``, ``WanImageToVideoPipeline``: ``check_inputs`` raises unless divisible by 16;
  ``__call__`` then rounds ``num_frames`` to ``num_frames // t * t + 1`` (``t`` the VAE's
  ``scale_factor_temporal``, 4) with a warning, and each side down to a multiple of
  ``vae.config.scale_factor_spatial * transformer.config.patch_size[1]`` (16 for Wan 2.1 and
  the 14B Wan 2.2 models, 32 for Wan 2.2 TI2V-5B's 16x VAE);
- ``HunyuanVideoPipeline``: ``check_inputs`` raises unless divisible by 16; its transformer's
  ``forward`` patchifies the latents with floor division (``height // p``) and unpatchifies
  that many patches, so a latent side ``patch_size`` does not divide comes back shorter and
  the scheduler step fails: sides must also be multiples of ``spatial_compression_ratio *
  patch_size`` (16 as published);
- Wan and HunyuanVideo do the same with the latent frames (``num_frames // p_t``) and nothing
  pads them, so latent frames ``(num_frames - 1) // t + 1`` that the temporal patch (Wan's
  ``patch_size[0]``, HunyuanVideo's ``patch_size_t``; 1 as published) does not divide are
  refused;
- ``CogVideoXPipeline``, ``CogVideoXImageToVideoPipeline``: ``check_inputs`` raises unless
  divisible by 8; a side divisible by 8 but not by ``vae_scale_factor_spatial * patch_size``
  (16) gives an odd latent side, which ``CogVideoXTransformer3DModel.forward`` patchifies with
  floor division and unpatchifies one latent row or column short, so the scheduler step fails
  on mismatched shapes at the first step: refused as well. CogVideoX 1.5 (the transformer's
  ``patch_size_t`` 2) pads the latent frames to a multiple of ``patch_size_t`` in ``__call__``
  (``num_frames += additional_frames * vae_scale_factor_temporal``) and drops the padding
  before the decode;
- ``LTXPipeline``, ``LTXImageToVideoPipeline``: ``check_inputs`` raises unless divisible by 32.
- ``MochiPipeline``: ``check_inputs`` raises unless divisible by 8; ``prepare_latents`` divides
  by the literal ``vae_spatial_scale_factor`` 8 and ``MochiTransformer3DModel.forward``
  patchifies the latent with floor division (``height // p``) but reshapes its output to the
  full latent side, so a side that is a multiple of 8 but not of ``8 * patch_size`` (16) fails
  at the first step: refused. ``prepare_latents`` takes ``(num_frames - 1) // 6 + 1`` latent
  frames (the literal ``vae_temporal_scale_factor`` 6) and the VAE decodes ``(latent - 1) * 6
  + 1`` frames (``drop_last_temporal_frames``): a count other than ``6 k + 1`` runs as the
  ``6 k + 1`` below it.
- ``QwenImagePipeline``: ``check_inputs`` only warns; ``prepare_latents`` rounds each side down
  to a multiple of ``vae_scale_factor * 2`` (``2 ** len(vae.temperal_downsample)``, 8, times
  the 2 x 2 packing: 16), and the decoded image has that size.

HunyuanVideo, CogVideoX and LTX-Video encode ``(num_frames - 1) // t + 1`` latent frames
(``t`` the VAE's temporal compression: HunyuanVideo's and CogVideoX's
``temporal_compression_ratio``, 4; LTX-Video's ``patch_size_t * 2 ** sum(spatio_temporal_scaling)``,
8) and their causal VAEs decode ``(latent - 1) * t + 1`` frames: a ``num_frames`` that is not of
that form runs, and comes out, as the largest one below it (LTX-Video's 160 as 153). CogVideoX's
VAE decodes an even latent count as ``latent * t`` frames (``_decode`` takes the latents in
pairs, and its time upsampling doubles every frame of an even batch), more than were asked: 53
frames come out as 56.

The text length is refused the same way: the SD3 and Flux pipelines' ``check_inputs`` raise
when ``max_sequence_length`` is greater than 512 (``QwenImagePipeline``'s when it is greater than
1024).

Divisors read from component configs fall back to the defaults each pipeline's ``__init__``
uses when the component is absent (``... if getattr(self, "vae", None) else 8``). Where a
divisor holds the denoiser's patch side and no side at or below the size asked is a multiple of
it, while the sides would run under the published patch side (2), the refusal names the
component's ``patchSize``, not the size: the patchify ``Conv`` cannot run on a latent smaller
than its kernel, and a larger size is seldom the fix the user meant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from gpu_sizer.api.spec.generation import Pipeline

__all__ = ["SIZE_RULES", "OutputSize", "SizeRule", "output_size", "size_step"]

_VERSION: Final = "diffusers 0.42.1"


def _config(pipeline: Pipeline, name: str) -> dict[str, Any] | None:
    c = pipeline.component(name)
    if c is None or not c.known:
        return None
    return c.resolved_config()


def _vae_scale(pipeline: Pipeline) -> int:
    """``2 ** (len(vae.config.block_out_channels) - 1)``, 8 without a VAE (SD, SDXL, SD3, Flux,
    CogVideoX ``__init__``)."""
    vae = _config(pipeline, "vae")
    channels = vae.get("block_out_channels") if vae is not None else None
    return 2 ** (len(channels) - 1) if channels else 8


def _patched(pipeline: Pipeline) -> tuple[int, str, int] | None:
    """Where the denoiser's spatial patch size is set: (index in ``pipeline.components``, the
    component's name, the patch side in latent pixels), ``None`` where no denoiser config sets
    ``patch_size``. Wan's is a (t, h, w) triple, whose h is read."""
    for i, c in enumerate(pipeline.components):
        if c.name not in ("transformer", "transformer_2") or not c.known:
            continue
        p = c.resolved_config().get("patch_size")
        if p is not None:
            return i, c.name, int(p[1]) if isinstance(p, tuple | list) else int(p)
    return None


def _patch(pipeline: Pipeline, default: int) -> int:
    """The denoiser's spatial patch size (``transformer.config.patch_size``), ``default``
    where its config does not set one."""
    found = _patched(pipeline)
    return default if found is None else found[2]


def _wan_vae(pipeline: Pipeline, key: str, default: int) -> int:
    vae = _config(pipeline, "vae")
    value = vae.get(key) if vae is not None else None
    return int(value) if value else default


def _fixed(divisor: int) -> Callable[[Pipeline], int]:
    return lambda _pipeline: divisor


def _sd3(pipeline: Pipeline) -> int:
    return _vae_scale(pipeline) * _patch(pipeline, 2)


def _flux(pipeline: Pipeline) -> int:
    return _vae_scale(pipeline) * 2


def _qwen_image(pipeline: Pipeline) -> int:
    """``QwenImagePipeline``: ``vae_scale_factor`` is ``2 ** len(vae.temperal_downsample)`` (8
    without a VAE), and its latents are packed in 2 x 2 patches."""
    vae = _config(pipeline, "vae")
    steps = vae.get("temperal_downsample") if vae is not None else None
    return (2 ** len(steps) if steps is not None else 8) * 2


def _wan_multiple(pipeline: Pipeline) -> int:
    return _wan_vae(pipeline, "scale_factor_spatial", 8) * _patch(pipeline, 2)


def _wan_frames(pipeline: Pipeline, frames: int) -> tuple[int, str]:
    t = _wan_vae(pipeline, "scale_factor_temporal", 4)
    return max(frames // t * t + 1, 1), (
        f"num_frames - 1 must be divisible by {t}: __call__ rounds it to num_frames // {t} * "
        f"{t} + 1"
    )


def _decoded(frames: int, t: int) -> tuple[int, str]:
    """The frames a causal VAE of temporal compression ``t`` decodes from the latent frames
    ``frames`` encode to, and why they differ (empty when they do not)."""
    latent = (frames - 1) // t + 1
    ran = (latent - 1) * t + 1
    return ran, (
        ""
        if ran == frames
        else (
            f"__call__ makes (num_frames - 1) // {t} + 1 = {latent} latent frames and the VAE "
            f"decodes (latent - 1) x {t} + 1 of them"
        )
    )


def _hunyuan_frames(pipeline: Pipeline, frames: int) -> tuple[int, str]:
    return _decoded(frames, _wan_vae(pipeline, "temporal_compression_ratio", 4))


def _ltx_frames(pipeline: Pipeline, frames: int) -> tuple[int, str]:
    """``AutoencoderKLLTXVideo.temporal_compression_ratio``: ``patch_size_t * 2 **
    sum(spatio_temporal_scaling)`` (8 as published); 8 without a VAE."""
    vae, t = _config(pipeline, "vae"), 8
    if vae is not None:
        scaling = vae.get("spatio_temporal_scaling") or ()
        t = int(vae.get("patch_size_t") or 1) * 2 ** sum(1 for s in scaling if s)
    return _decoded(frames, t)


def _cogvideox_frames(pipeline: Pipeline, frames: int) -> tuple[int, str]:
    vae, t = _config(pipeline, "vae"), 4
    if vae is not None and vae.get("temporal_compression_ratio"):
        t = int(vae["temporal_compression_ratio"])
    transformer = _config(pipeline, "transformer")
    p_t = transformer.get("patch_size_t") if transformer is not None else None
    latent = (frames - 1) // t + 1
    if not p_t or latent % p_t == 0:
        if latent % 2:
            return _decoded(frames, t)
        # AutoencoderKLCogVideoX._decode runs the latents in batches of 2 (the first takes an
        # odd one more), and its time upsampling doubles every frame of an even batch
        return latent * t, (
            f"__call__ makes (num_frames - 1) // {t} + 1 = {latent} latent frames, an even "
            f"count, which AutoencoderKLCogVideoX._decode decodes in pairs of {2 * t} frames "
            f"each: {latent * t} frames"
        )
    frames = (latent - 1) * t + 1
    return frames + (p_t - latent % p_t) * t, (
        f"CogVideoX 1.5's patch_size_t {p_t}: __call__ pads the {latent} latent frames to a "
        f"multiple of {p_t} for the denoiser and drops the padding before the decode, which is "
        "sized padded too, an upper bound"
    )


def _cogvideox(pipeline: Pipeline) -> int:
    return _vae_scale(pipeline) * _patch(pipeline, 2)


def _hunyuan(pipeline: Pipeline) -> int:
    """``check_inputs``' 16, and a latent side ``HunyuanVideoTransformer3DModel.forward``
    patchifies whole: the VAE's ``spatial_compression_ratio`` times ``patch_size``."""
    spatial = _wan_vae(pipeline, "spatial_compression_ratio", 8)
    return math.lcm(16, spatial * _patch(pipeline, 2))


def _wan_frame_patch(pipeline: Pipeline) -> tuple[int, int]:
    t = _config(pipeline, "transformer")
    p = t.get("patch_size") if t is not None else None
    p_t = int(p[0]) if isinstance(p, tuple | list) and p else 1
    return _wan_vae(pipeline, "scale_factor_temporal", 4), p_t


def _hunyuan_frame_patch(pipeline: Pipeline) -> tuple[int, int]:
    t = _config(pipeline, "transformer")
    p_t = t.get("patch_size_t") if t is not None else None
    return _wan_vae(pipeline, "temporal_compression_ratio", 4), int(p_t or 1)


@dataclass(frozen=True)
class SizeRule:
    """What one pipeline class does with ``height``/``width`` (pixels) and ``num_frames``.

    ``refuse``: the divisor a side must be a multiple of, or the call fails; ``round``: the
    multiple each side is then rounded down to; ``frames``: the frame count the denoiser runs
    for a ``num_frames``, and why; ``frame_patch``: (the VAE's temporal compression, the
    denoiser's temporal patch) where the denoiser patchifies the latent frames with floor
    division and nothing pads them; ``max_text``: the largest ``max_sequence_length``
    ``check_inputs`` takes (tokens); ``source``: the diffusers
    function that refuses or rounds, ``round_source`` the one that rounds when both apply. Each
    callable reads the pipeline's component configs.
    """

    source: str
    refuse: Callable[[Pipeline], int] | None = None
    round: Callable[[Pipeline], int] | None = None
    frames: Callable[[Pipeline, int], tuple[int, str]] | None = None
    round_source: str = ""
    max_text: int | None = None
    frame_patch: Callable[[Pipeline], tuple[int, int]] | None = None


_SD = SizeRule("check_inputs", refuse=_fixed(8))
_SD_I2I = SizeRule(
    "image_processor.preprocess (VaeImageProcessor.get_default_height_width)", round=_vae_scale
)
_SD3 = SizeRule("check_inputs", refuse=_sd3, max_text=512)
_FLUX = SizeRule("prepare_latents (check_inputs warns)", round=_flux, max_text=512)
_FLUX_I2I = SizeRule("image_processor.preprocess (check_inputs warns)", round=_flux, max_text=512)
_WAN = SizeRule(
    "check_inputs",
    refuse=_fixed(16),
    round=_wan_multiple,
    frames=_wan_frames,
    round_source="__call__",
    frame_patch=_wan_frame_patch,
)
_COGVIDEOX = SizeRule(
    "check_inputs (8) and CogVideoXTransformer3DModel.forward's unpatchify (an odd latent side)",
    refuse=_cogvideox,
    frames=_cogvideox_frames,
)


def _mochi(pipeline: Pipeline) -> int:
    """``check_inputs``' 8 (``vae_spatial_scale_factor``, a literal) times the transformer's
    ``patch_size`` (see the module docstring)."""
    return 8 * _patch(pipeline, 2)


def _mochi_frames(_pipeline: Pipeline, frames: int) -> tuple[int, str]:
    """``prepare_latents``' literal ``vae_temporal_scale_factor`` 6, whatever the VAE."""
    return _decoded(frames, 6)


#: Per pipeline class (``model_index.json`` ``_class_name``), the size rule of its ``__call__``
#: in diffusers 0.42.1; the module docstring gives each rule's source. Every class of
#: :data:`gpu_sizer.budget.diffusion.pipelines.PIPELINES` has one (a test checks it).
SIZE_RULES: Final[dict[str, SizeRule]] = {
    "StableDiffusionPipeline": _SD,
    "StableDiffusionImg2ImgPipeline": _SD_I2I,
    "StableDiffusionXLPipeline": _SD,
    "StableDiffusionXLImg2ImgPipeline": _SD_I2I,
    "StableDiffusion3Pipeline": _SD3,
    "StableDiffusion3Img2ImgPipeline": _SD3,
    "FluxPipeline": _FLUX,
    "FluxImg2ImgPipeline": _FLUX_I2I,
    "WanPipeline": _WAN,
    "WanImageToVideoPipeline": _WAN,
    "HunyuanVideoPipeline": SizeRule(
        "check_inputs (16) and HunyuanVideoTransformer3DModel.forward's unpatchify (a latent "
        "side not divisible by patch_size)",
        refuse=_hunyuan,
        frames=_hunyuan_frames,
        frame_patch=_hunyuan_frame_patch,
    ),
    "CogVideoXPipeline": _COGVIDEOX,
    "CogVideoXImageToVideoPipeline": _COGVIDEOX,
    "LTXPipeline": SizeRule("check_inputs", refuse=_fixed(32), frames=_ltx_frames),
    "LTXImageToVideoPipeline": SizeRule("check_inputs", refuse=_fixed(32), frames=_ltx_frames),
    "MochiPipeline": SizeRule(
        "check_inputs (8) and MochiTransformer3DModel.forward's unpatchify (a latent side not "
        "divisible by patch_size)",
        refuse=_mochi,
        frames=_mochi_frames,
    ),
    "QwenImagePipeline": SizeRule(
        "prepare_latents (check_inputs warns)", round=_qwen_image, max_text=1024
    ),
}


@dataclass(frozen=True)
class OutputSize:
    """The size a call runs at (pixels, frames), the refusals as (spec path relative to the
    GPUWorkload spec, message) pairs, and a note per size the pipeline changes."""

    height: int
    width: int
    num_frames: int
    refused: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _valid(value: int, divisor: int) -> str:
    lower = value // divisor * divisor
    options = [v for v in (lower, lower + divisor) if v >= max(divisor, 8)]
    return " or ".join(str(v) for v in options)


_DEFAULT_PATCH: Final = 2


def _patch_blamed(
    pipeline: Pipeline,
    divisor: int,
    sides: dict[str, int],
    why: str,
) -> tuple[str, str] | None:
    """The refusal to report at the denoiser's ``patchSize`` instead of at the sides, or
    ``None``.

    ``divisor`` (pixels) is the VAE's compression times the patch side. A side below it has no
    valid size at or under the one asked; when every such side is at least the divisor of the
    patch side the published checkpoints of these classes use (2), the configured patch (a Wan
    ``patchSize`` (1, 1000, 1000), say) is what is wrong, and blaming the height would send the
    user to an 8000-pixel video. The other sides' refusals are then left out: they follow from
    the same patch. ``why``: how the pipeline fails, with its source."""
    found = _patched(pipeline)
    if found is None or found[2] <= _DEFAULT_PATCH or divisor % found[2]:
        return None
    i, name, p = found
    scale = divisor // p
    d0 = scale * _DEFAULT_PATCH
    small = {k: v for k, v in sides.items() if v < divisor}
    if not small or any(v < d0 for v in small.values()):
        return None
    asked = " and ".join(f"{k} {v}" for k, v in small.items())
    verb = "are" if len(small) > 1 else "is"
    return (
        f"model.pipeline.components[{i}].config.patchSize",
        f"{pipeline.class_name} {why}: sides must be multiples of {divisor} pixels, the vae's "
        f"{scale}x compression times {name}'s ({pipeline.components[i].class_name}) patch "
        f"side {p}, and {asked} {verb} smaller, so nothing at or below the size asked runs; "
        f"published checkpoints use patch side {_DEFAULT_PATCH}; use the patchSize of the "
        f"checkpoint the weights come from, or sides of {divisor} pixels or more",
    )


def output_size(
    pipeline: Pipeline,
    video: bool,
    height: int,
    width: int,
    num_frames: int,
    max_sequence_length: int | None = None,
) -> OutputSize:
    """What ``pipeline``'s class does with a call at ``height`` x ``width`` pixels and
    ``num_frames`` frames (read only when ``video``), and ``max_sequence_length`` text tokens
    (``None``: the call's default). A class without a rule (one the memory model does not know)
    runs the size as given. Never raises."""
    cls = pipeline.class_name
    rule = SIZE_RULES.get(cls)
    out = OutputSize(height, width, num_frames)
    if rule is None:
        return out
    where = f"{_VERSION} {cls}.{rule.source}"
    rounds = f"{_VERSION} {cls}.{rule.round_source or rule.source}"
    sides = {"height": height, "width": width}
    if rule.refuse is not None:
        d = rule.refuse(pipeline)
        blamed = _patch_blamed(pipeline, d, sides, f"refuses ({where})")
        if blamed is not None:
            out.refused.append(blamed)
        for name, value in sides.items():
            if value % d and blamed is None:
                out.refused.append(
                    (
                        f"generation.{name}",
                        f"{cls} refuses {name} {value}: height and width must be divisible "
                        f"by {d} ({where}); use {name} {_valid(value, d)}",
                    )
                )
    if rule.max_text is not None and (max_sequence_length or 0) > rule.max_text:
        out.refused.append(
            (
                "generation.maxSequenceLength",
                f"{cls} refuses maxSequenceLength {max_sequence_length}: at most "
                f"{rule.max_text} tokens ({_VERSION} {cls}.check_inputs); use "
                f"maxSequenceLength {rule.max_text} or less",
            )
        )
    if out.refused:
        return out
    h, w, frames = height, width, num_frames
    if rule.round is not None:
        m = rule.round(pipeline)
        h, w = height // m * m, width // m * m
        blamed = _patch_blamed(pipeline, m, sides, f"rounds sides to nothing ({rounds})")
        if blamed is not None:
            out.refused.append(blamed)
        for name, value, ran in (("height", height, h), ("width", width, w)):
            if ran == 0 and blamed is None:
                out.refused.append(
                    (
                        f"generation.{name}",
                        f"{cls} rounds {name} {value} down to a multiple of {m} ({rounds}): 0 "
                        f"pixels, nothing to generate; use {name} {m} or more",
                    )
                )
        if (h, w) != (height, width):
            out.notes.append(
                f"{cls} rounds {height}x{width} (height x width) down to multiples of {m} "
                f"({rounds}): sized at {h}x{w}"
            )
    if video and rule.frames is not None:
        frames, why = rule.frames(pipeline, num_frames)
        if frames != num_frames:
            out.notes.append(
                f"{cls} runs numFrames {num_frames} as {frames} ({why}; {_VERSION} "
                f"{cls}.__call__): sized at {frames} frames"
            )
    if video and rule.frame_patch is not None:
        refused = _frames_unpatched(pipeline, rule.frame_patch, num_frames, frames)
        if refused is not None:
            out.refused.append(refused)
    if out.refused:
        return OutputSize(height, width, num_frames, out.refused)
    return OutputSize(h, w, frames, [], out.notes)


def _frames_unpatched(
    pipeline: Pipeline,
    frame_patch: Callable[[Pipeline], tuple[int, int]],
    asked: int,
    frames: int,
) -> tuple[str, str] | None:
    """The refusal of ``asked`` frames, run as ``frames``, when the denoiser's temporal patch
    does not divide the ``(frames - 1) // t + 1`` latent frames: the forward patchifies with
    floor division and unpatchifies fewer frames than it was given, so the first scheduler
    step fails on mismatched shapes (Wan and HunyuanVideo's ``forward``, diffusers 0.42.1;
    the published checkpoints' temporal patch is 1). ``None`` when it divides."""
    t, p_t = frame_patch(pipeline)
    latent = (frames - 1) // t + 1
    if p_t <= 1 or latent % p_t == 0:
        return None
    lower = latent // p_t * p_t
    options = [(n - 1) * t + 1 for n in (lower, lower + p_t) if n >= p_t]
    denoiser = pipeline.component("transformer")
    cls = denoiser.class_name if denoiser is not None else "the transformer"
    ran = "" if frames == asked else f" (run as {frames})"
    key = "patchSize" if cls == "WanTransformer3DModel" else "patchSizeT"
    return (
        "generation.numFrames",
        f"{pipeline.class_name} encodes numFrames {asked}{ran} as {latent} latent frames "
        f"((numFrames - 1) // {t} + 1), which {cls}'s temporal patch {p_t} does not divide: "
        f"its forward patchifies them with floor division and returns {lower} frames, so the "
        f"first scheduler step fails ({_VERSION} {cls}.forward); use numFrames "
        f"{' or '.join(str(n) for n in options)}, or the {key} of the checkpoint the weights "
        "come from (temporal patch 1 in published ones)",
    )


def size_step(pipeline: Pipeline) -> int:
    """Pixels between two sides ``pipeline``'s class runs as given (neither refused nor
    rounded): the larger of its refusal divisor and its rounding multiple, 8 for a class
    without a rule. Both are powers of two in every rule, so the larger is a multiple of the
    other."""
    rule = SIZE_RULES.get(pipeline.class_name)
    if rule is None:
        return 8
    return max(f(pipeline) for f in (rule.refuse, rule.round, _fixed(8)) if f is not None)
