"""Every supported component class, built from each published config by diffusers/transformers
on PyTorch's meta device: gpu-sizer's module trees give exactly the library's parameter and
buffer counts, and its config defaults are the constructors' own."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from tests import diffusers_configs as published
from tests.budget.diffusion.conftest import (
    CONFIG_CLASSES,
    build_on_meta,
    diffusers,
    torch,
    transformers,
)
from tests.budget.diffusion.test_qwen_image import VARIANTS as QWEN_IMAGE_VARIANTS

from gpu_sizer.api.components import COMPONENT_CLASSES, config_problems, resolved_config
from gpu_sizer.budget.diffusion.parts import buffer_count, parameter_count
from gpu_sizer.budget.diffusion.registry import KINDS


def _tree(cls: str, config: dict[str, Any]) -> Any:
    return KINDS[cls].build(resolved_config(cls, published.camel(config)))


@pytest.mark.parametrize("key", sorted(published.COMPONENTS))
def test_published_component_counts_equal_the_library(key: str) -> None:
    cls, config = published.COMPONENTS[key]
    model = build_on_meta(cls, config)
    tree = _tree(cls, config)
    assert parameter_count(tree) == sum(p.numel() for p in model.parameters()), key
    assert buffer_count(tree) == sum(b.numel() for b in model.buffers()), key


#: Variants the published pipelines above do not exercise: class defaults, Wan 2.2's residual
#: VAE (TI2V-5B, from scripts/convert_wan_to_diffusers.py), LTX-Video 0.9.1's decoder
#: (convert_ltx_to_diffusers.py get_vae_config), SD3.5 medium's dual attention, CogVideoX-2B.
VARIANTS: list[tuple[str, dict[str, Any]]] = [
    *((cls, {}) for cls in sorted(COMPONENT_CLASSES)),
    (
        "AutoencoderKLWan",
        {"base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "is_residual": True,
         "in_channels": 12, "out_channels": 12, "patch_size": 2, "scale_factor_spatial": 16},
    ),
    (
        "AutoencoderKLLTXVideo",
        {"decoder_block_out_channels": [256, 512, 1024], "decoder_layers_per_block": [5, 6, 7, 8],
         "decoder_spatio_temporal_scaling": [True, True, True],
         "decoder_inject_noise": [True, True, True, False], "upsample_residual": [True, True, True],
         "upsample_factor": [2, 2, 2], "timestep_conditioning": True},
    ),
    (
        "SD3Transformer2DModel",
        {"num_layers": 24, "num_attention_heads": 24, "caption_projection_dim": 1536,
         "pos_embed_max_size": 384, "qk_norm": "rms_norm",
         "dual_attention_layers": list(range(13))},
    ),
    ("CogVideoXTransformer3DModel", {}),
    ("WanTransformer3DModel", {**published.WAN21_I2V_14B, "pos_embed_seq_len": 514}),
    ("MochiTransformer3DModel", {"num_layers": 1, "out_channels": 6, "patch_size": 1}),
    ("MochiTransformer3DModel", {"num_layers": 0, "pooled_projection_dim": 768}),
    (
        "AutoencoderKLMochi",
        {"encoder_block_out_channels": [32, 64, 96, 128], "layers_per_block": [1, 2, 1, 2, 3, 4],
         "decoder_block_out_channels": [64, 96, 128, 160],
         "add_attention_block": [True, False, True, False, True]},
    ),
    *QWEN_IMAGE_VARIANTS,
]  # fmt: skip


@pytest.mark.parametrize(("cls", "config"), VARIANTS, ids=lambda v: v if isinstance(v, str) else "")
def test_variant_counts_equal_the_library(cls: str, config: dict[str, Any]) -> None:
    model = build_on_meta(cls, config)
    tree = _tree(cls, config)
    assert parameter_count(tree) == sum(p.numel() for p in model.parameters())
    assert buffer_count(tree) == sum(b.numel() for b in model.buffers())


def test_stable_diffusion_15_unet_has_its_published_count() -> None:
    # The figure quoted for the SD 1.5 UNet (e.g. the diffusers docs and the CompVis model card's
    # "860M UNet"): 859,520,964 parameters.
    assert parameter_count(_tree("UNet2DConditionModel", published.SD15_UNET)) == 859_520_964


def _library_defaults(cls: str) -> dict[str, Any]:
    if cls in CONFIG_CLASSES:
        config = getattr(transformers, CONFIG_CLASSES[cls])()
        out = {k: getattr(config, k, None) for k in COMPONENT_CLASSES[cls].keys}
        for key, value in out.items():
            if hasattr(value, "to_dict"):  # a nested config (CLIPConfig.vision_config)
                out[key] = value.to_dict()
        return out
    params = inspect.signature(getattr(diffusers, cls).__init__).parameters
    return {k: v.default for k, v in params.items() if k != "self"}


#: Keys the config class derives when left unset (LlamaConfig fills num_key_value_heads with
#: num_attention_heads and head_dim with hidden_size // num_attention_heads); gpu-sizer keeps
#: them unset and derives the same values.
DERIVED = {("LlamaModel", "num_key_value_heads"), ("LlamaModel", "head_dim")}


@pytest.mark.parametrize("cls", sorted(COMPONENT_CLASSES))
def test_config_defaults_are_the_libraries(cls: str) -> None:
    ours = COMPONENT_CLASSES[cls].keys
    theirs = _library_defaults(cls)
    for key, spec in ours.items():
        assert key in theirs, f"{cls} has no {key}"
        expected = theirs[key]
        value = spec.default
        if (cls, key) in DERIVED:
            assert value is None
            continue
        if spec.kind == "obj":
            for inner, sub in value.items():
                assert sub.default == expected[inner], f"{cls}.{key}.{inner}"
            continue
        if isinstance(expected, list | tuple):
            expected = tuple(expected)
        assert value == expected, f"{cls}.{key}: {value!r} != {expected!r}"


DENOISERS = sorted(
    k for k, (cls, _) in published.COMPONENTS.items() if "Transformer" in cls or "UNet" in cls
)


@pytest.mark.parametrize("key", DENOISERS)
def test_layerwise_casting_stores_the_librarys_layers_in_float8(key: str) -> None:
    """``enable_layerwise_casting`` on the library's model (meta device) leaves in float8
    exactly the elements gpu-sizer counts as cast: same Linear/Conv/Embedding modules, same
    skip patterns (defaults, _keep_in_fp32_modules, _skip_layerwise_casting_patterns)."""
    from gpu_sizer.budget.diffusion.parts import layerwise_cast_elements

    cls, config = published.COMPONENTS[key]
    model = build_on_meta(cls, config, torch.bfloat16)
    model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    tensors = [*model.parameters(), *model.buffers()]
    in_float8 = sum(t.numel() for t in tensors if t.dtype == torch.float8_e4m3fn)
    assert layerwise_cast_elements(_tree(cls, config), KINDS[cls].casting_skips) == in_float8


@pytest.mark.parametrize("cls", ["T5EncoderModel", "UMT5EncoderModel"])
def test_t5_keeps_its_wo_projections_in_float32_when_loaded_in_float16(cls: str) -> None:
    """transformers 5.24 ``PreTrainedModel._get_dtype_plan``: ``_keep_in_fp32_modules``
    (T5's ``["wo"]``) applies when the requested dtype is float16, and matches parameter names
    by regex search; bfloat16 keeps nothing. The estimate's weight bytes follow the same plan
    (SD3, Flux, CogVideoX and LTX in float16 hold 1.0 B of T5-XXL's 4.8 B parameters at 4
    bytes)."""
    import re

    from gpu_sizer.budget.diffusion.resolved import component_model

    config = published.T5_XXL if cls == "T5EncoderModel" else published.UMT5_XXL
    model = build_on_meta(cls, config)
    built = component_model(cls, resolved_config(cls, published.camel(config)))
    assert not isinstance(built, str)
    for dtype, element in ((torch.float16, 2), (torch.bfloat16, 2)):
        plan = model._get_dtype_plan(dtype)
        tensors = dict(model.named_parameters())
        kept = sum(t.numel() for n, t in tensors.items() if any(re.search(k, n) for k in plan))
        total = sum(t.numel() for t in tensors.values()) + sum(b.numel() for b in model.buffers())
        expected = (total - kept) * element + kept * 4
        assert built.weight_bytes(element, dtype == torch.float16) == expected, dtype
    assert kept == 0  # bfloat16: no plan


HUB = Path(__file__).resolve().parent / "hub"


@pytest.mark.parametrize("repo", sorted(published.PIPELINES))
def test_the_oracle_configs_are_the_published_files(repo: str) -> None:
    """tests/diffusers_configs.py (the configs the oracle tests build) holds, for every key it
    sets, the value of the Hub folder's config.json (tests/budget/diffusion/hub)."""
    folder = HUB / repo.replace("/", "--")
    cls, parts = published.PIPELINES[repo]
    assert json.loads((folder / "model_index.json").read_text())["_class_name"] == cls
    for name, _, config in parts:
        on_hub = json.loads((folder / name / "config.json").read_text())
        for key, value in config.items():
            if isinstance(value, dict):  # a nested config: the keys the oracle sets
                assert {k: on_hub[key].get(k) for k in value} == value, (repo, name, key)
                continue
            assert on_hub.get(key) == value, (repo, name, key)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("numLayers", "40", "must be an integer, not the string '40': write it without quotes"),
        ("numLayers", "forty", "must be an integer, not the string 'forty'"),
        ("numLayers", 40.0, "must be an integer"),
        ("patchSize", [1, "2", 2], "item 1 must be an integer, not the string '2': write it"),
        ("crossAttnNorm", "true", "must be true or false, not the string 'true': write it"),
        ("qkNorm", 3, "must be a string"),
    ],
)
def test_a_config_value_of_the_wrong_type_is_refused_with_what_was_written(
    key: str, value: Any, message: str
) -> None:
    """YAML reads a quoted number as a string; the library would keep it as one and fail, so
    the spec names the string and says to drop the quotes."""
    problems = dict(config_problems("WanTransformer3DModel", {key: value}))
    assert problems[key].startswith(message), problems


def test_a_float_written_as_a_string_is_refused_naming_it() -> None:
    problems = dict(config_problems("HunyuanVideoTransformer3DModel", {"mlpRatio": "4.0"}))
    assert problems["mlpRatio"] == "must be a number, not the string '4.0': write it without quotes"
