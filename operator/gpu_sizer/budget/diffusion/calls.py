"""The model forwards one diffusers pipeline call makes, in order. Pure.

Read from the ``__call__`` of each pipeline class in ``diffusers`` 0.42.1
(``pipelines/<family>/pipeline_<name>.py``):

1. ``encode_prompt``: the text encoders in the class's order (``PipelineKind.encode_order``)
   for the prompt, then again for the negative prompt when guidance runs (every class encodes
   ``negative_prompt or ""``; SDXL skips it only when ``force_zeros_for_empty_prompt`` and no
   negative prompt is given, which the spec does not say, so the encode is counted: it can only
   add co-resident encoders under model offload);
2. Wan 2.1 image-to-video's ``encode_image`` (when the transformer has an ``image_dim``), then
   the VAE encode of the conditioning input (``prepare_latents``: image-to-image's image,
   image-to-video's conditioning video);
3. the denoising loop: each denoiser that runs. Wan 2.2's ``WanPipeline``/
   ``WanImageToVideoPipeline`` run ``transformer`` for timesteps ``t >= boundary_ratio *
   num_train_timesteps`` and ``transformer_2`` below, so with ``boundary_ratio`` null only
   ``transformer`` runs, with ``transformer`` absent only ``transformer_2`` (the published
   low-noise-only setting passes ``transformer=None, boundary_ratio=1.0``), and both otherwise,
   high-noise first;
4. the VAE decode, then what runs on the decoded output (SD's ``run_safety_checker``).

Which weights are on the GPU during each step is :mod:`gpu_sizer.budget.diffusion.residency`'s
business.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.budget.diffusion.pipelines import Encodes, PipelineKind

__all__ = ["DENOISE", "TEXT_ENCODE", "VAE_DECODE", "Step", "call_steps", "denoisers_that_run"]

TEXT_ENCODE: Final = "TextEncode"
DENOISE: Final = "Denoise"
VAE_DECODE: Final = "VaeDecode"

_WAN: Final = ("WanPipeline", "WanImageToVideoPipeline")


@dataclass(frozen=True)
class Step:
    """One model forward of the call: its phase, the component that runs and what it does
    (``prompt``, ``negative prompt``, ``image``, ``encode``, ``denoise``, ``decode``,
    ``safety check``)."""

    phase: str
    component: str
    what: str


def denoisers_that_run(
    pipeline_class: str, denoisers: Sequence[str], options: Mapping[str, Any]
) -> list[str]:
    """The denoisers a call runs, in order (see the module docstring for Wan 2.2's experts)."""
    if pipeline_class not in _WAN:
        return list(denoisers)
    ratio = options.get("boundaryRatio")
    out: list[str] = []
    # timesteps t >= ratio * num_train_timesteps run the high-noise expert; they stay below
    # num_train_timesteps, so a ratio of 1 never runs it
    if "transformer" in denoisers and (ratio is None or ratio < 1):
        out.append("transformer")
    if "transformer_2" in denoisers and ratio is not None and ratio > 0:
        out.append("transformer_2")
    return out


def call_steps(
    pipeline_class: str,
    kind: PipelineKind | None,
    present: Mapping[str, str],
    *,
    guidance: bool,
    image_conditioned: bool,
    options: Mapping[str, Any],
) -> list[Step]:
    """The forwards of one call of ``pipeline_class`` over the ``present`` components
    (name -> role: ``TextEncoder``, ``ImageEncoder``, ``Denoiser``, ``Vae``,
    ``SafetyChecker``).

    :param guidance: classifier-free guidance runs (the negative prompt is encoded).
    :param image_conditioned: the denoiser takes CLIP image embeddings (Wan 2.1 I2V's
        ``image_dim``): ``encode_image`` runs.
    """

    def named(role: str) -> list[str]:
        return [n for n, r in present.items() if r == role]

    encoders = named("TextEncoder")
    order = [n for n in kind.encode_order if n in encoders] if kind is not None else []
    order += [n for n in encoders if n not in order]
    steps = [Step(TEXT_ENCODE, n, "prompt") for n in order]
    if guidance:
        steps += [Step(TEXT_ENCODE, n, "negative prompt") for n in order]
    if image_conditioned:
        steps += [Step(TEXT_ENCODE, n, "image") for n in named("ImageEncoder")]
    vaes = named("Vae")
    if kind is not None and kind.encodes is not Encodes.Nothing and vaes:
        steps.append(Step(TEXT_ENCODE, vaes[0], "encode"))
    for name in denoisers_that_run(pipeline_class, named("Denoiser"), options):
        steps.append(Step(DENOISE, name, "denoise"))
    if vaes:
        steps.append(Step(VAE_DECODE, vaes[0], "decode"))
    after: Collection[str] = kind.after_decode if kind is not None else ()
    steps += [Step(VAE_DECODE, n, "safety check") for n in named("SafetyChecker") if n in after]
    return steps
