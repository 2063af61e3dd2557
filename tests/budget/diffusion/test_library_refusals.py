"""A component config whose keys are each well typed but whose combination its library refuses
to build (a group count that does not divide the channels, a head count that does not divide
the hidden size, a per-level list too short) is refused with the spec, naming the key, rather
than sized: an estimate of a model that cannot exist would admit a workload that fails at load.
diffusers 0.42.1 and transformers 5.24.0, building on the meta device, are the oracle: each
case first checks that the library does refuse it, so the test fails if a release starts to
accept what gpu-sizer refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests import diffusers_configs as published
from tests.budget.diffusion.conftest import TINY_HUNYUAN, TINY_WAN, build_on_meta

from gpu_sizer.api.components import checked_config, resolved_config
from gpu_sizer.budget.diffusion.resolved import component_model


def _library_count(cls: str, config: dict[str, Any]) -> int | None:
    """Parameters the library builds from ``config``, or ``None`` when it refuses it."""
    try:
        model = build_on_meta(cls, config)
    except Exception:  # any refusal (ValueError, IndexError, AssertionError, strict-dataclass)
        return None
    return int(sum(p.numel() for p in model.parameters()))


def _ours(cls: str, config: dict[str, Any]) -> tuple[list[tuple[str, str]], int | str | None]:
    """(spec problems, parameter count or the reason the component is not sized)."""
    problems, resolved = checked_config(cls, published.camel(config))
    if problems:
        return problems, None
    assert resolved is not None
    built = component_model(cls, resolved)
    return [], built if isinstance(built, str) else built.params


def _with(config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**config, **changes}


SD_UNET = {**published.SD15_UNET}
#: (class, config, the key refused, the message's words). Each is refused by its library.
REFUSED = [
    ("UNet2DConditionModel", _with(SD_UNET, norm_num_groups=7), "normNumGroups", "must divide"),
    (
        "UNet2DConditionModel",
        _with(SD_UNET, block_out_channels=[321, 641, 1281, 1281]),
        "normNumGroups",
        "321 is not a multiple",
    ),
    (
        "UNet2DConditionModel",
        _with(SD_UNET, attention_head_dim=[8, 8, 8]),
        "attentionHeadDim",
        "must have 4 items",
    ),
    (
        "UNet2DConditionModel",
        _with(SD_UNET, layers_per_block=[2, 2, 2, 2, 2]),
        "layersPerBlock",
        "must have 4 items",
    ),
    (
        "UNet2DConditionModel",
        _with(SD_UNET, transformer_layers_per_block=[1, 1]),
        "transformerLayersPerBlock",
        "at least 4 items",
    ),
    ("AutoencoderKL", _with(published.SD_VAE, norm_num_groups=33), "normNumGroups", "divide"),
    (
        "AutoencoderKL",
        _with(published.SD_VAE, block_out_channels=[128, 256, 512]),
        "blockOutChannels",
        "at least 4 items",
    ),
    (
        "AutoencoderKLHunyuanVideo",
        _with(published.HUNYUAN_VIDEO_VAE, norm_num_groups=31),
        "normNumGroups",
        "divide",
    ),
    (
        "AutoencoderKLCogVideoX",
        _with(published.COGVIDEOX_VAE, block_out_channels=[128, 256, 256]),
        "blockOutChannels",
        "at least 4 items",
    ),
    (
        "AutoencoderKLLTXVideo",
        _with(published.LTX_VIDEO_090_VAE, upsample_factor=[1, 1, 1]),
        "upsampleFactor",
        "at least 4 items",
    ),
    (
        "AutoencoderKLWan",
        _with(published.WAN21_VAE, dim_mult=[1, 2, 4, 4, 4]),
        "temperalDownsample",
        "at least 4 items",
    ),
    (
        "AutoencoderKLWan",
        _with(published.WAN21_VAE, dim_mult=[], temperal_downsample=[]),
        "dimMult",
        "at least 1 item",
    ),
    ("AutoencoderKLQwenImage", _with(published.QWEN_IMAGE_VAE, dim_mult=[]), "dimMult", "1 item"),
    (
        "WanTransformer3DModel",
        _with(published.WAN21_T2V_1_3B, num_layers=1, attention_head_dim=127),
        "attentionHeadDim",
        "must be even",
    ),
    ("CLIPTextModel", _with(published.CLIP_L, num_attention_heads=7), "hiddenSize", "multiple"),
    (
        "CLIPVisionModel",
        _with(published.CLIP_VIT_H, num_hidden_layers=1, hidden_size=1279),
        "hiddenSize",
        "multiple",
    ),
    (
        "LlamaModel",
        _with(published.LLAVA_LLAMA3_8B, num_hidden_layers=1, num_attention_heads=24),
        "hiddenSize",
        "multiple",
    ),
    (
        "LlamaModel",
        _with(published.LLAVA_LLAMA3_8B, num_hidden_layers=1, head_dim=127),
        "headDim",
        "must be even",
    ),
]


@pytest.mark.parametrize(("cls", "config", "key", "words"), REFUSED)
def test_what_the_library_refuses_is_refused_with_the_key_named(
    cls: str, config: dict[str, Any], key: str, words: str
) -> None:
    assert _library_count(cls, config) is None, "the library builds it: the case is stale"
    problems, _ = _ours(cls, config)
    assert [k for k, _ in problems] == [key], problems
    assert words in problems[0][1]


def test_the_safety_checker_names_the_nested_key() -> None:
    vision = {**published.SD_SAFETY_CHECKER["vision_config"], "num_attention_heads": 15}
    config = {**published.SD_SAFETY_CHECKER, "vision_config": vision}
    assert _library_count("StableDiffusionSafetyChecker", config) is None
    problems, _ = _ours("StableDiffusionSafetyChecker", config)
    assert [k for k, _ in problems] == ["visionConfig.hiddenSize"]


#: Built by the library but not as gpu-sizer models the levels (a longer list read by index),
#: or not runnable: the component is reported as not sized (the estimate is Incomplete).
NOT_SIZED = [
    ("AutoencoderKL", _with(published.SD_VAE, block_out_channels=[128, 256, 512, 512, 512])),
    (
        "AutoencoderKLHunyuanVideo",
        _with(published.HUNYUAN_VIDEO_VAE, block_out_channels=[128, 256, 512, 512, 512]),
    ),
    ("AutoencoderKLLTXVideo", _with(published.LTX_VIDEO_090_VAE, patch_size_t=2)),
]


@pytest.mark.parametrize(("cls", "config"), NOT_SIZED)
def test_what_the_library_builds_differently_is_not_sized(cls: str, config: dict[str, Any]) -> None:
    assert _library_count(cls, config) is not None
    problems, built = _ours(cls, config)
    assert problems == [] and isinstance(built, str) and built.startswith("config not sized")


#: Longer lists the library reads by index, as gpu-sizer does: counted exactly.
COUNTED = [
    (
        "UNet2DConditionModel",
        _with(published.SDXL_UNET, transformer_layers_per_block=[1, 2, 10, 10]),
    ),
    (
        "AutoencoderKLLTXVideo",
        _with(published.LTX_VIDEO_090_VAE, block_out_channels=[128, 256, 512]),
    ),
    ("AutoencoderKLWan", _with(published.WAN21_VAE, dim_mult=[1, 2, 4])),
]


@pytest.mark.parametrize(("cls", "config"), COUNTED)
def test_longer_lists_read_by_index_are_counted_as_the_library_counts(
    cls: str, config: dict[str, Any]
) -> None:
    assert _ours(cls, config) == ([], _library_count(cls, config))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.integers(1, 80))
def test_group_counts_are_refused_exactly_when_torch_refuses_them(groups: int) -> None:
    config = _with(published.SD_VAE, norm_num_groups=groups)
    library = _library_count("AutoencoderKL", config)
    problems, ours = _ours("AutoencoderKL", config)
    assert (library is None) == bool(problems)
    if library is not None:
        assert ours == library


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hidden=st.integers(8, 96), heads=st.integers(1, 16))
def test_head_counts_are_refused_exactly_when_transformers_refuses_them(
    hidden: int, heads: int
) -> None:
    config = _with(
        published.CLIP_L,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        projection_dim=hidden,
    )
    library = _library_count("CLIPTextModel", config)
    problems, ours = _ours("CLIPTextModel", config)
    assert (library is None) == bool(problems)
    if library is not None:
        assert ours == library


def test_a_resolved_published_config_passes_every_rule() -> None:
    for cls, config in published.COMPONENTS.values():
        problems, _ = checked_config(cls, published.camel(config))
        assert problems == [], (cls, problems)
        assert resolved_config(cls, published.camel(config))


def _flux_forward(axes: tuple[int, ...]) -> None:
    import torch
    from diffusers import FluxTransformer2DModel

    model = FluxTransformer2DModel(**_TINY_FLUX, axes_dims_rope=axes)
    model(
        hidden_states=torch.randn(1, 4, 4),
        encoder_hidden_states=torch.randn(1, 3, 16),
        pooled_projections=torch.randn(1, 8),
        timestep=torch.ones(1),
        img_ids=torch.zeros(4, 3),
        txt_ids=torch.zeros(3, 3),
    )


def _hunyuan_forward(axes: tuple[int, ...]) -> None:
    import torch
    from diffusers import HunyuanVideoTransformer3DModel

    model = HunyuanVideoTransformer3DModel(**TINY_HUNYUAN, rope_axes_dim=axes)
    model(
        hidden_states=torch.randn(1, 4, 1, 4, 4),
        timestep=torch.ones(1),
        encoder_hidden_states=torch.randn(1, 3, 16),
        encoder_attention_mask=torch.ones(1, 3),
        pooled_projections=torch.randn(1, 8),
        guidance=torch.ones(1),
    )


def _wan_forward(patch: tuple[int, ...]) -> None:
    import torch
    from diffusers import WanTransformer3DModel

    model = WanTransformer3DModel(**TINY_WAN, patch_size=patch)
    model(
        hidden_states=torch.randn(1, 4, 1, 4, 4),
        timestep=torch.ones(1),
        encoder_hidden_states=torch.randn(1, 3, 16),
    )


#: Small enough to run a forward on the CPU; heads of 8 (Flux, HunyuanVideo) and 12 (Wan).
_TINY_FLUX: dict[str, Any] = {
    "in_channels": 4,
    "num_layers": 1,
    "num_single_layers": 1,
    "attention_head_dim": 8,
    "num_attention_heads": 2,
    "joint_attention_dim": 16,
    "pooled_projection_dim": 8,
}
#: (class, tiny config, the key it varies, a value, the key refused or None, its forward).
#: These build on the meta device whatever the value: the library fails at the first forward
#: (a rotary table that does not cover the head, a patch that is not a (t, h, w) triple), so the
#: oracle is a real forward of a tiny model on the CPU.
AT_FORWARD = [
    ("FluxTransformer2DModel", _TINY_FLUX, "axes_dims_rope", (2, 2, 4), None, _flux_forward),
    (
        "FluxTransformer2DModel",
        _TINY_FLUX,
        "axes_dims_rope",
        (2, 2, 2),
        "attentionHeadDim",
        _flux_forward,
    ),
    (
        "FluxTransformer2DModel",
        _TINY_FLUX,
        "axes_dims_rope",
        (2, 2, 6),
        "attentionHeadDim",
        _flux_forward,
    ),
    (
        "HunyuanVideoTransformer3DModel",
        TINY_HUNYUAN,
        "rope_axes_dim",
        (2, 2, 4),
        None,
        _hunyuan_forward,
    ),
    (
        "HunyuanVideoTransformer3DModel",
        TINY_HUNYUAN,
        "rope_axes_dim",
        (2, 2, 6),
        "attentionHeadDim",
        _hunyuan_forward,
    ),
    ("WanTransformer3DModel", TINY_WAN, "patch_size", (1, 2, 2), None, _wan_forward),
    ("WanTransformer3DModel", TINY_WAN, "patch_size", (2, 2), "patchSize", _wan_forward),
    ("WanTransformer3DModel", TINY_WAN, "patch_size", (1, 2, 2, 2), "patchSize", _wan_forward),
]


@pytest.mark.parametrize(("cls", "tiny", "key", "value", "refused", "forward"), AT_FORWARD)
def test_what_fails_at_the_first_forward_is_refused_with_the_key_named(
    cls: str,
    tiny: dict[str, Any],
    key: str,
    value: tuple[int, ...],
    refused: str | None,
    forward: Any,
) -> None:
    if refused is None:
        forward(value)
    else:
        with pytest.raises((RuntimeError, ValueError)):
            forward(value)
    problems, _ = checked_config(cls, published.camel({**tiny, key: list(value)}))
    assert [k for k, _ in problems] == ([] if refused is None else [refused]), problems


def test_a_rotary_split_that_does_not_cover_the_head_says_the_sum() -> None:
    problems, _ = checked_config(
        "FluxTransformer2DModel",
        published.camel({**published.FLUX_DEV, "attention_head_dim": 129}),
    )
    assert problems == [
        (
            "attentionHeadDim",
            "129 must equal the sum of axesDimsRope (16 + 56 + 56 = 128): the rotary embedding "
            "covers the whole attention head, and diffusers fails at the first attention "
            "otherwise; set axesDimsRope to axes summing to 129",
        )
    ]
