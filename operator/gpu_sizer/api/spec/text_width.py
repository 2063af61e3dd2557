"""The width of the text (and image) embeddings a diffusers pipeline hands its denoiser, or why
it fails. Pure.

Each component's ``config.json`` is valid alone, but the pipeline feeds the text encoder's output
to the denoiser: the denoiser's first layer that takes the prompt embeddings (a
``nn.Linear(in_features)``, a cross-attention's key/value projection, a ``LayerNorm``) is built
for the width in its config. A text encoder of another width builds and loads, then the first
forward fails with a shape mismatch (or, for the SDXL UNet's added time embedding, with
``_get_add_time_ids``' ``ValueError``): the workload never produces an output, so such a
pipeline is a spec error, not something to size.

Read from ``diffusers`` 0.42.1 (``diffusers/pipelines/<family>/pipeline_<name>.py`` and the
denoiser's ``__init__``), per class in :data:`TEXT_RULES`:

- ``StableDiffusion[Img2Img]Pipeline``: ``encode_prompt`` takes ``text_encoder(...)[0]``, the
  last hidden state (``hidden_size`` wide; with ``clip_skip`` an earlier hidden state, as wide);
  every cross-attention block of the ``UNet2DConditionModel`` projects it with
  ``cross_attention_dim`` (a per-block list: down block ``i`` takes entry ``i``, the mid block
  the last, up block ``i`` the reversed list's ``i``), or, with ``encoder_hid_dim`` (type
  ``text_proj``, the default when it is set), ``encoder_hid_proj`` is a
  ``Linear(encoder_hid_dim)``: ``cross_attention_dim`` (or ``encoder_hid_dim``) ``==
  hidden_size``. Other ``encoder_hid_dim_type`` values (image projections) are not checked.
- ``StableDiffusionXL[Img2Img]Pipeline``: ``encode_prompt`` concatenates (``torch.concat(...,
  dim=-1)``) ``hidden_states[-2]`` of ``text_encoder`` and ``text_encoder_2`` (only
  ``text_encoder_2`` when ``text_encoder`` is left out, as the refiner does): the width is the
  sum of their ``hidden_size``, checked as above; with ``addition_embed_type`` ``text_time``,
  ``_get_add_time_ids`` raises unless ``projection_class_embeddings_input_dim ==
  addition_time_embed_dim * n + text_encoder_2.projection_dim``, ``n`` the time ids (6: original
  size, crop, target size; 5 for the img2img pipeline with ``requires_aesthetics_score``).
- ``StableDiffusion3[Img2Img]Pipeline``: ``_get_t5_prompt_embeds`` takes ``text_encoder_3(...)
  [0]`` (``d_model`` wide) and ``encode_prompt`` pads the concatenated CLIP hidden states to
  that width (``torch.nn.functional.pad``, which crops when negative, so the CLIP widths never
  fail) and concatenates them on the token axis for ``context_embedder``, a
  ``Linear(joint_attention_dim)``: ``joint_attention_dim == text_encoder_3.d_model`` (with
  ``text_encoder_3`` left out the pipeline draws zeros of ``joint_attention_dim``: not checked);
  ``_get_clip_prompt_embeds`` pools with ``prompt_embeds[0]``, the projected text embeddings of
  ``CLIPTextModelWithProjection``, and ``encode_prompt`` concatenates both for
  ``time_text_embed``'s ``Linear(pooled_projection_dim)``: ``pooled_projection_dim ==
  text_encoder.projection_dim + text_encoder_2.projection_dim``.
- ``Flux[Img2Img]Pipeline``: ``_get_t5_prompt_embeds`` takes ``text_encoder_2(...)[0]``:
  ``joint_attention_dim == text_encoder_2.d_model`` (``context_embedder``); ``_get_clip_prompt_
  embeds`` takes the CLIP's ``pooler_output``, the final hidden state of the end token,
  ``hidden_size`` wide (not ``projection_dim``: no projection is applied):
  ``pooled_projection_dim == text_encoder.hidden_size``.
- ``WanPipeline``, ``WanImageToVideoPipeline``: ``_get_t5_prompt_embeds`` takes the UMT5's
  ``last_hidden_state`` for ``condition_embedder.text_embedder``, a ``Linear(text_dim)``: ``text_dim
  == text_encoder.d_model``, for ``transformer`` and ``transformer_2`` (Wan 2.2's second expert
  takes the same embeddings). For image-to-video, when ``transformer.config.image_dim`` is set,
  ``encode_image`` takes the image encoder's ``hidden_states[-2]`` for ``image_embedder`` (a
  ``LayerNorm(image_dim)``): ``image_dim == image_encoder.hidden_size``.
- ``HunyuanVideoPipeline``: ``_get_llama_prompt_embeds`` takes the Llama's
  ``hidden_states[-3]`` for ``context_embedder``'s token refiner, a ``Linear(text_embed_dim)``:
  ``text_embed_dim == text_encoder.hidden_size``; ``_get_clip_prompt_embeds`` takes
  ``text_encoder_2``'s ``pooler_output``: ``pooled_projection_dim == text_encoder_2.hidden_size``.
- ``CogVideoX[ImageToVideo]Pipeline``: ``_get_t5_prompt_embeds`` takes ``text_encoder(...)[0]``
  for ``patch_embed.text_proj``, a ``Linear(text_embed_dim)``: ``text_embed_dim ==
  text_encoder.d_model``.
- ``LTX[ImageToVideo]Pipeline``: ``_get_t5_prompt_embeds`` takes ``text_encoder(...)[0]`` for
  ``caption_projection``, a ``Linear(caption_channels)``: ``caption_channels ==
  text_encoder.d_model``.
- ``MochiPipeline``: ``_get_t5_prompt_embeds`` takes ``text_encoder(...)[0]`` for
  ``time_embed.caption_proj`` and ``time_embed.pooler`` (``Linear(text_embed_dim)`` each):
  ``text_embed_dim == text_encoder.d_model``.
- ``QwenImagePipeline``: ``_get_qwen_prompt_embeds`` takes the Qwen2.5-VL's
  ``hidden_states[-1]`` (``text_config.hidden_size`` wide) for ``txt_norm`` and ``txt_in``, an
  ``RMSNorm`` and a ``Linear`` of ``joint_attention_dim``: ``joint_attention_dim ==
  text_encoder.text_config.hidden_size``.

Every class of :data:`gpu_sizer.budget.diffusion.pipelines.PIPELINES` has a rule; none is left
out. A width whose encoder or denoiser is left out of the spec or of a class gpu-sizer does not
size is not checked (nothing is known of it); neither is an encoder of a class the pipeline
cannot call at all (that fails otherwise, not by width).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from pydantic.alias_generators import to_camel as _to_camel

from gpu_sizer.api.spec.generation import Pipeline

__all__ = ["TEXT_RULES", "TextRule", "Width", "text_problems"]

#: the few config keys the rules read, camelCased once (pydantic's to_camel runs regexes)
_camel: Final = cache(_to_camel)

_VERSION: Final = "diffusers 0.42.1"


@dataclass(frozen=True)
class Width:
    """One width the pipeline hands a denoiser: ``key`` (snake_case config key of
    ``denoiser``) must be ``expected``; ``made``: the encoders' keys and values it comes from
    (words); ``source``: the diffusers function that builds it; ``encoder``: what to change
    instead of the key (``text encoder``, ``image encoder``)."""

    denoiser: str
    key: str
    expected: int
    made: str
    source: str
    encoder: str = "text encoder"


@dataclass(frozen=True)
class TextRule:
    """What one pipeline class hands its denoisers: ``widths`` lists the checks that can be
    made from the pipeline's known components (see the module docstring)."""

    widths: Callable[[Pipeline], list[Width]]


def _config(pipeline: Pipeline, name: str) -> tuple[str, dict[str, Any]] | None:
    c = pipeline.component(name)
    if c is None or not c.known:
        return None
    return c.class_name, c.resolved_config()


def _value(pipeline: Pipeline, name: str, key: str) -> tuple[int, str] | None:
    """``name``'s ``key`` and how the message names it, or ``None`` when not known."""
    found = _config(pipeline, name)
    if found is None:
        return None
    v = found[1].get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    return v, f"{name}'s ({found[0]}) {_camel(key)} {v}"


def _same(
    encoder: str, key: str, denoisers: tuple[str, ...], dkey: str, source: str
) -> Callable[[Pipeline], list[Width]]:
    def widths(pipeline: Pipeline) -> list[Width]:
        got = _value(pipeline, encoder, key)
        if got is None:
            return []
        return [Width(d, dkey, got[0], got[1], source) for d in denoisers]

    return widths


def _both(*parts: Callable[[Pipeline], list[Width]]) -> Callable[[Pipeline], list[Width]]:
    def widths(pipeline: Pipeline) -> list[Width]:
        return [w for part in parts for w in part(pipeline)]

    return widths


_CROSS_ATTN_MID: Final = ("UNetMidBlock2DCrossAttn", "UNetMidBlock2DSimpleCrossAttn")


def _unet_cross(width: int, made: str, source: str, config: dict[str, Any]) -> list[Width]:
    """The UNet keys that take the prompt embeddings (see the module docstring)."""
    hid, hid_type = config.get("encoder_hid_dim"), config.get("encoder_hid_dim_type")
    if hid is not None:
        if hid_type in (None, "text_proj") and isinstance(hid, int):
            return [Width("unet", "encoder_hid_dim", width, made, source)]
        return []
    cross = config.get("cross_attention_dim")
    if isinstance(cross, int):
        return [Width("unet", "cross_attention_dim", width, made, source)]
    down = list(config.get("down_block_types") or ())
    up = list(config.get("up_block_types") or ())
    if not isinstance(cross, list | tuple) or len(cross) != len(down) or len(up) != len(down):
        return []
    used = [i for i, b in enumerate(down) if "CrossAttn" in str(b)]
    used += [len(down) - 1 - i for i, b in enumerate(up) if "CrossAttn" in str(b)]
    if config.get("mid_block_type") in _CROSS_ATTN_MID:
        used.append(len(down) - 1)
    if any(cross[i] != width for i in used):
        return [Width("unet", "cross_attention_dim", width, made, source)]
    return []


def _sd(pipeline: Pipeline) -> list[Width]:
    got, unet = _value(pipeline, "text_encoder", "hidden_size"), _config(pipeline, "unet")
    if got is None or unet is None:
        return []
    return _unet_cross(*got, "encode_prompt (text_encoder(...)[0], its last hidden state)", unet[1])


def _sdxl(aesthetics: bool) -> Callable[[Pipeline], list[Width]]:
    def widths(pipeline: Pipeline) -> list[Width]:
        unet, second = _config(pipeline, "unet"), _value(pipeline, "text_encoder_2", "hidden_size")
        if unet is None or second is None:
            return []
        out: list[Width] = []
        first = _value(pipeline, "text_encoder", "hidden_size")
        parts: list[tuple[int, str]] = [second]  # text_encoder left out: text_encoder_2 alone
        if pipeline.component("text_encoder") is not None:
            parts = [first, second] if first is not None else []
        if parts:
            width = sum(v for v, _ in parts)
            made = " + ".join(words for _, words in parts)
            if len(parts) > 1:
                made = f"{made}, concatenated"
            source = "encode_prompt (torch.concat of each CLIP's hidden_states[-2], dim=-1)"
            out += _unet_cross(width, made, source, unet[1])
        config = unet[1]
        time_dim = config.get("addition_time_embed_dim")
        projection = _value(pipeline, "text_encoder_2", "projection_dim")
        if (
            config.get("addition_embed_type") == "text_time"
            and isinstance(time_dim, int)
            and isinstance(config.get("projection_class_embeddings_input_dim"), int)
            and projection is not None
        ):
            n = 5 if aesthetics and pipeline.config.get("requiresAestheticsScore") is True else 6
            made = (
                f"{n} time ids of the unet's additionTimeEmbedDim {time_dim} and "
                f"{projection[1]} (its pooled text embeddings), concatenated"
            )
            out.append(
                Width(
                    "unet",
                    "projection_class_embeddings_input_dim",
                    n * time_dim + projection[0],
                    made,
                    "_get_add_time_ids",
                )
            )
        return out

    return widths


def _sd3(pipeline: Pipeline) -> list[Width]:
    out = _same(
        "text_encoder_3",
        "d_model",
        ("transformer",),
        "joint_attention_dim",
        "_get_t5_prompt_embeds (text_encoder_3(...)[0]) and encode_prompt (the CLIP embeddings "
        "padded to its width)",
    )(pipeline)
    first = _value(pipeline, "text_encoder", "projection_dim")
    second = _value(pipeline, "text_encoder_2", "projection_dim")
    if first is not None and second is not None:
        out.append(
            Width(
                "transformer",
                "pooled_projection_dim",
                first[0] + second[0],
                f"{first[1]} + {second[1]}, concatenated",
                "_get_clip_prompt_embeds (prompt_embeds[0], the projected text embeddings) and "
                "encode_prompt (torch.cat, dim=-1)",
            )
        )
    return out


_T5: Final = "_get_t5_prompt_embeds (text_encoder(...)[0])"

_FLUX = TextRule(
    _both(
        _same(
            "text_encoder_2",
            "d_model",
            ("transformer",),
            "joint_attention_dim",
            "_get_t5_prompt_embeds (text_encoder_2(...)[0])",
        ),
        _same(
            "text_encoder",
            "hidden_size",
            ("transformer",),
            "pooled_projection_dim",
            "_get_clip_prompt_embeds (pooler_output, not projected)",
        ),
    )
)
_WAN_TEXT = _same(
    "text_encoder",
    "d_model",
    ("transformer", "transformer_2"),
    "text_dim",
    "_get_t5_prompt_embeds (last_hidden_state)",
)


def _wan_image(pipeline: Pipeline) -> list[Width]:
    first = _config(pipeline, "transformer")
    got = _value(pipeline, "image_encoder", "hidden_size")
    if first is None or first[1].get("image_dim") is None or got is None:
        return []
    return [
        Width(d, "image_dim", got[0], got[1], "encode_image (hidden_states[-2])", "image encoder")
        for d in ("transformer", "transformer_2")
        if (found := _config(pipeline, d)) is not None and found[1].get("image_dim") is not None
    ]


def _qwen_image(pipeline: Pipeline) -> list[Width]:
    """QwenImagePipeline: the Qwen2.5-VL's last hidden state, ``text_config.hidden_size`` wide,
    for ``txt_norm`` and ``txt_in`` (``RMSNorm`` and ``Linear`` of ``joint_attention_dim``)."""
    found = _config(pipeline, "text_encoder")
    if found is None:
        return []
    v = found[1].get("text_config", {}).get("hidden_size")
    if not isinstance(v, int) or isinstance(v, bool):
        return []
    made = f"text_encoder's ({found[0]}) textConfig.hiddenSize {v}"
    source = "_get_qwen_prompt_embeds (hidden_states[-1])"
    return [Width("transformer", "joint_attention_dim", v, made, source)]


_COGVIDEOX = TextRule(_same("text_encoder", "d_model", ("transformer",), "text_embed_dim", _T5))
_LTX = TextRule(_same("text_encoder", "d_model", ("transformer",), "caption_channels", _T5))

#: Per pipeline class (``model_index.json`` ``_class_name``), the embedding widths its
#: ``encode_prompt`` (and ``encode_image``) hand the denoiser in diffusers 0.42.1; the module
#: docstring gives each rule's source. Every class of
#: :data:`gpu_sizer.budget.diffusion.pipelines.PIPELINES` has one (a test checks it).
TEXT_RULES: Final[dict[str, TextRule]] = {
    "StableDiffusionPipeline": TextRule(_sd),
    "StableDiffusionImg2ImgPipeline": TextRule(_sd),
    "StableDiffusionXLPipeline": TextRule(_sdxl(aesthetics=False)),
    "StableDiffusionXLImg2ImgPipeline": TextRule(_sdxl(aesthetics=True)),
    "StableDiffusion3Pipeline": TextRule(_sd3),
    "StableDiffusion3Img2ImgPipeline": TextRule(_sd3),
    "FluxPipeline": _FLUX,
    "FluxImg2ImgPipeline": _FLUX,
    "WanPipeline": TextRule(_WAN_TEXT),
    "WanImageToVideoPipeline": TextRule(_both(_WAN_TEXT, _wan_image)),
    "HunyuanVideoPipeline": TextRule(
        _both(
            _same(
                "text_encoder",
                "hidden_size",
                ("transformer",),
                "text_embed_dim",
                "_get_llama_prompt_embeds (hidden_states[-3])",
            ),
            _same(
                "text_encoder_2",
                "hidden_size",
                ("transformer",),
                "pooled_projection_dim",
                "_get_clip_prompt_embeds (pooler_output)",
            ),
        )
    ),
    "CogVideoXPipeline": _COGVIDEOX,
    "CogVideoXImageToVideoPipeline": _COGVIDEOX,
    "LTXPipeline": _LTX,
    "LTXImageToVideoPipeline": _LTX,
    "MochiPipeline": TextRule(
        _same("text_encoder", "d_model", ("transformer",), "text_embed_dim", _T5)
    ),
    "QwenImagePipeline": TextRule(_qwen_image),
}


def text_problems(pipeline: Pipeline) -> list[tuple[str, str]]:
    """(spec path relative to the pipeline, message) for each denoiser key of ``pipeline``
    that does not take the embeddings its class hands it (see the module docstring); empty when
    they match or when the class, the encoder or the denoiser is not one gpu-sizer sizes. Never
    raises."""
    rule = TEXT_RULES.get(pipeline.class_name)
    if rule is None:
        return []
    cls = pipeline.class_name
    index = {c.name: i for i, c in enumerate(pipeline.components)}
    problems: list[tuple[str, str]] = []
    for w in rule.widths(pipeline):
        found = _config(pipeline, w.denoiser)
        if found is None:
            continue
        got = found[1].get(w.key)
        if got == w.expected or got is None or isinstance(got, bool):
            continue
        camel = _camel(w.key)
        problems.append(
            (
                f"components[{index[w.denoiser]}].config.{camel}",
                f"{cls} hands {w.denoiser} ({found[0]}) embeddings {w.expected} wide, from "
                f"{w.made} ({_VERSION} {cls}.{w.source}); {w.denoiser}'s {camel} {got} fails "
                f"at the first forward with a shape mismatch; use {camel} {w.expected}, or the "
                f"{w.encoder} this {w.denoiser} was trained with",
            )
        )
    return problems
