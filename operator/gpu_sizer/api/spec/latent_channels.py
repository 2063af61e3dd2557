"""The latent channels a diffusers pipeline passes between its components, or why it fails. Pure.

Each component's ``config.json`` is valid alone, but a pipeline runs them together: the
denoiser takes the latents the pipeline draws or the VAE encodes, its output is combined with
those latents by the scheduler step, and the VAE decodes the result. A denoiser whose
``in_channels`` or ``out_channels`` do not match what the pipeline hands it builds and loads,
then fails at the first denoising step (a convolution or linear layer of the wrong width, or a
scheduler step on tensors of different shapes), or at the decode after the whole run: the
workload never produces an output, so such a pipeline is a spec error, not something to size.

Read from ``diffusers`` 0.42.1 (``diffusers/pipelines/<family>/pipeline_<name>.py``), per
class in :data:`CHANNEL_RULES`; ``c`` is the VAE's latent channels (``latent_channels``;
``z_dim`` for ``AutoencoderKLWan`` and ``AutoencoderKLQwenImage``):

- ``StableDiffusion[XL]Pipeline``: ``__call__`` draws ``unet.config.in_channels`` latent
  channels and ``vae.decode`` takes ``c``; the img2img pipelines feed the unet ``vae.encode``'s
  ``c`` channels: ``in_channels == c``;
- ``StableDiffusion3[Img2Img]Pipeline``, ``HunyuanVideoPipeline``, ``CogVideoXPipeline``,
  ``LTX[ImageToVideo]Pipeline``, ``WanPipeline``: the same with the ``transformer``
  (``num_channels_latents = self.transformer.config.in_channels``; Wan 2.2 for ``transformer_2``
  too, which runs on the same latents): ``in_channels == c``;
- ``MochiPipeline``: the same (``num_channels_latents = self.transformer.config.in_channels``;
  ``AutoencoderKLMochi`` decodes ``latent_channels``): ``in_channels == c``;
- ``Flux[Img2Img]Pipeline``: ``num_channels_latents = transformer.config.in_channels // 4`` and
  ``_pack_latents`` folds each 2x2 latent patch into ``4 c`` features for ``x_embedder``, a
  ``Linear(in_channels)``: ``in_channels == 4 c``;
- ``QwenImagePipeline``: ``num_channels_latents = transformer.config.in_channels // 4`` and
  ``_pack_latents`` folds each 2x2 latent patch into ``4 c`` features for ``img_in``, a
  ``Linear(in_channels)``: ``in_channels == 4 c`` (64 for its 16-channel VAE, whose latent
  channels are ``z_dim``); its ``proj_out`` gives ``patch_size ** 2 * out_channels`` features
  per token, which the scheduler step combines with the ``4 c`` packed latents;
- ``CogVideoXImageToVideoPipeline``: ``latent_channels = transformer.config.in_channels // 2``,
  then ``torch.cat([latents, image_latents], dim=2)``: ``in_channels == 2 c``;
- ``WanImageToVideoPipeline``: ``prepare_latents`` draws ``vae.config.z_dim`` channels and
  ``__call__`` concatenates them with the condition, ``vae_scale_factor_temporal`` mask
  channels and the encoded image's ``c``: ``in_channels == 2 c + scale_factor_temporal`` (36
  for Wan 2.1); with the pipeline option ``expand_timesteps`` (Wan 2.2 TI2V) the condition is
  blended into the latents instead: ``in_channels == c``.

The denoiser's output (``out_channels``; ``None`` means ``in_channels``, as each of these
classes' ``__init__`` resolves it) must have the latents' channels, ``c`` (``4 c`` packed for
Flux), for the scheduler step. LTX-Video's pipelines also pack the latents with the
transformer's ``patch_size`` and ``patch_size_t`` (``_pack_latents``) into
``in_channels * patch_size ** 2 * patch_size_t`` features while its ``proj_in`` is a
``Linear(in_channels)``: both must be 1.

A pipeline whose VAE or denoiser is left out or of a class gpu-sizer does not size is not
checked (nothing is known of its channels).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.api.spec.generation import Pipeline, PipelineComponent

__all__ = ["CHANNEL_RULES", "ChannelRule", "channel_problems"]

_VERSION: Final = "diffusers 0.42.1"

#: The config key holding a VAE class's latent channels.
_LATENT_KEYS: Final = {"AutoencoderKLWan": "z_dim", "AutoencoderKLQwenImage": "z_dim"}


def _same(c: int, _pipeline: Pipeline) -> tuple[int, str]:
    return c, "the latents"


@dataclass(frozen=True)
class ChannelRule:
    """What one pipeline class feeds its denoisers.

    ``denoisers``: the component names that denoise the latents; ``inputs``: from the VAE's
    latent channels and the pipeline, the channels the pipeline hands the denoiser and how they
    are made up (words); ``packed``: the factor the latents are packed by before the denoiser
    (Flux's 2x2: 4), which its output keeps; ``source``: the diffusers function that builds the
    denoiser's input; ``unit_patches``: the denoiser's patch sizes must be 1 (LTX-Video).
    """

    source: str
    denoisers: tuple[str, ...] = ("transformer",)
    inputs: Callable[[int, Pipeline], tuple[int, str]] = _same
    packed: int = 1
    unit_patches: bool = False
    #: the denoiser's output per token is ``patch_size ** 2 * out_channels`` (Qwen-Image's
    #: ``proj_out``), which must be the packed latents' features
    patched_output: bool = False


def _wan_i2v(c: int, pipeline: Pipeline) -> tuple[int, str]:
    if pipeline.config.get("expandTimesteps") is True:
        return c, "the latents with the condition blended in (expandTimesteps)"
    vae = pipeline.component("vae")
    t = 4
    if vae is not None and vae.known:
        t = int(vae.resolved_config().get("scale_factor_temporal") or 4)
    return 2 * c + t, (
        f"{t} mask channels (one per frame the vae folds in time, its scaleFactorTemporal), "
        "the latents and the encoded image, concatenated"
    )


def _doubled(c: int, _pipeline: Pipeline) -> tuple[int, str]:
    return 2 * c, "the latents and the encoded image, concatenated"


def _packed(c: int, _pipeline: Pipeline) -> tuple[int, str]:
    return 4 * c, "the latents packed 2x2 (4 features per latent channel)"


_UNET = ChannelRule("__call__ (num_channels_latents = unet.config.in_channels)", ("unet",))
_UNET_I2I = ChannelRule("prepare_latents (vae.encode)", ("unet",))
_TRANSFORMER = ChannelRule("__call__ (num_channels_latents = transformer.config.in_channels)")
_FLUX = ChannelRule("prepare_latents and _pack_latents", inputs=_packed, packed=4)
_LTX = ChannelRule("prepare_latents and _pack_latents", unit_patches=True)
_QWEN_IMAGE = ChannelRule(
    "prepare_latents and _pack_latents", inputs=_packed, packed=4, patched_output=True
)

#: Per pipeline class (``model_index.json`` ``_class_name``), what its ``__call__`` feeds the
#: denoiser in diffusers 0.42.1; the module docstring gives each rule's source. Every class of
#: :data:`gpu_sizer.budget.diffusion.pipelines.PIPELINES` has one (a test checks it).
CHANNEL_RULES: Final[dict[str, ChannelRule]] = {
    "StableDiffusionPipeline": _UNET,
    "StableDiffusionImg2ImgPipeline": _UNET_I2I,
    "StableDiffusionXLPipeline": _UNET,
    "StableDiffusionXLImg2ImgPipeline": _UNET_I2I,
    "StableDiffusion3Pipeline": _TRANSFORMER,
    "StableDiffusion3Img2ImgPipeline": ChannelRule("prepare_latents (vae.encode)"),
    "FluxPipeline": _FLUX,
    "FluxImg2ImgPipeline": _FLUX,
    "WanPipeline": ChannelRule(
        "__call__ (num_channels_latents = transformer.config.in_channels)",
        ("transformer", "transformer_2"),
    ),
    "WanImageToVideoPipeline": ChannelRule(
        "prepare_latents and __call__ (torch.cat([latents, condition], dim=1))",
        ("transformer", "transformer_2"),
        inputs=_wan_i2v,
    ),
    "HunyuanVideoPipeline": _TRANSFORMER,
    "CogVideoXPipeline": _TRANSFORMER,
    "CogVideoXImageToVideoPipeline": ChannelRule(
        "__call__ (latent_channels = transformer.config.in_channels // 2)", inputs=_doubled
    ),
    "LTXPipeline": _LTX,
    "LTXImageToVideoPipeline": _LTX,
    "MochiPipeline": _TRANSFORMER,
    "QwenImagePipeline": _QWEN_IMAGE,
}


def _sized(pipeline: Pipeline, name: str) -> tuple[int, PipelineComponent, dict[str, Any]] | None:
    for i, c in enumerate(pipeline.components):
        if c.name == name:
            return (i, c, c.resolved_config()) if c.known else None
    return None


def channel_problems(pipeline: Pipeline) -> list[tuple[str, str]]:
    """(spec path relative to the pipeline, message) for each denoiser setting of ``pipeline``
    that does not match the latents its class hands it (see the module docstring); empty when
    they match or when the class, its VAE or the denoiser is not one gpu-sizer sizes. Never
    raises."""
    rule = CHANNEL_RULES.get(pipeline.class_name)
    vae = _sized(pipeline, "vae")
    if rule is None or vae is None:
        return []
    key = _LATENT_KEYS.get(vae[1].class_name, "latent_channels")
    c = vae[2].get(key)
    if not isinstance(c, int):
        return []
    cls = pipeline.class_name
    expected, how = rule.inputs(c, pipeline)
    out = c * rule.packed
    problems: list[tuple[str, str]] = []
    for name in rule.denoisers:
        found = _sized(pipeline, name)
        if found is None:
            continue
        i, component, config = found
        where = f"components[{i}].config"
        got = config.get("in_channels")
        if isinstance(got, int) and got != expected:
            problems.append(
                (
                    f"{where}.inChannels",
                    f"{cls} feeds {name} ({component.class_name}) {expected} channels, {how}, "
                    f"with the vae's ({vae[1].class_name}) {c} latent channels ({_VERSION} "
                    f"{cls}.{rule.source}); inChannels {got} fails at the first denoising "
                    f"step; use inChannels {expected}, or the vae this {name} was trained with",
                )
            )
        produced, unset = config.get("out_channels"), ""
        if produced is None and got == expected:
            # unset follows inChannels; when that is wrong its own problem is reported
            produced, unset = got, f" (unset, so inChannels {got})"
        if rule.patched_output and isinstance(produced, int):
            p = config.get("patch_size")
            if isinstance(p, int) and p * p * produced != out:
                problems.append(
                    (
                        f"{where}.outChannels",
                        f"{cls}'s scheduler step combines {name}'s output, patchSize^2 x "
                        f"outChannels features per token ({p * p} x {produced}), with the "
                        f"{out}-feature packed latents, which the vae ({vae[1].class_name}) "
                        f"decodes as {c} channels ({_VERSION} {cls}.__call__ and "
                        f"_unpack_latents); it fails at the first denoising step; use "
                        f"patchSize 2 and outChannels {c}",
                    )
                )
            continue
        if isinstance(produced, int) and produced != out:
            problems.append(
                (
                    f"{where}.outChannels",
                    f"{cls}'s scheduler step combines {name}'s output with the {out}-channel "
                    f"latents, which the vae ({vae[1].class_name}) decodes as {c} channels "
                    f"({_VERSION} {cls}.__call__); outChannels {produced}{unset} fails at the "
                    f"first denoising step; use outChannels {out}",
                )
            )
        if rule.unit_patches:
            for patch in ("patch_size", "patch_size_t"):
                p = config.get(patch)
                if isinstance(p, int) and p != 1:
                    camel = "patchSize" if patch == "patch_size" else "patchSizeT"
                    problems.append(
                        (
                            f"{where}.{camel}",
                            f"{cls} packs the latents into inChannels x patchSize^2 x "
                            f"patchSizeT features ({_VERSION} {cls}._pack_latents) and "
                            f"{component.class_name}'s proj_in takes inChannels: {camel} {p} "
                            f"fails at the first denoising step; use {camel} 1",
                        )
                    )
    return problems
