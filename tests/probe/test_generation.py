"""Synthetic generation: tiny pipelines built by diffusers/transformers run one call's phases on
the CPU, count the parameters the estimate counts, and refuse what they cannot reproduce."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.probe.run import Options, measure

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

CLIP = {"vocabSize": 1000, "hiddenSize": 32, "intermediateSize": 64, "numHiddenLayers": 2,
        "numAttentionHeads": 4, "maxPositionEmbeddings": 77, "projectionDim": 32}  # fmt: skip
T5 = {"vocabSize": 1000, "dModel": 32, "dKv": 8, "dFf": 64, "numLayers": 2, "numHeads": 4}
VAE = {"blockOutChannels": [32, 64], "layersPerBlock": 1, "normNumGroups": 8,
       "latentChannels": 4, "downBlockTypes": ["DownEncoderBlock2D"] * 2,
       "upBlockTypes": ["UpDecoderBlock2D"] * 2}  # fmt: skip
SD: dict[str, Any] = {
    "class": "StableDiffusionPipeline",
    "components": [
        {"name": "text_encoder", "class": "CLIPTextModel", "config": CLIP},
        {"name": "unet", "class": "UNet2DConditionModel",
         "config": {"blockOutChannels": [32, 64], "layersPerBlock": 1, "crossAttentionDim": 32,
                    "attentionHeadDim": 8, "normNumGroups": 8, "sampleSize": 8,
                    "downBlockTypes": ["CrossAttnDownBlock2D", "DownBlock2D"],
                    "upBlockTypes": ["UpBlock2D", "CrossAttnUpBlock2D"]}},
        {"name": "vae", "class": "AutoencoderKL", "config": VAE},
    ],
}  # fmt: skip
WAN: dict[str, Any] = {
    "class": "WanPipeline",
    "components": [
        {"name": "text_encoder", "class": "UMT5EncoderModel", "config": T5},
        {"name": "transformer", "class": "WanTransformer3DModel",
         "config": {"numAttentionHeads": 2, "attentionHeadDim": 16, "inChannels": 4,
                    "outChannels": 4, "textDim": 32, "freqDim": 32, "ffnDim": 64,
                    "numLayers": 2}},
        {"name": "vae", "class": "AutoencoderKLWan",
         "config": {"baseDim": 8, "zDim": 4, "dimMult": [1, 2, 2, 2], "numResBlocks": 1}},
    ],
}  # fmt: skip
FLUX: dict[str, Any] = {
    "class": "FluxPipeline",
    "components": [
        {"name": "text_encoder", "class": "CLIPTextModel", "config": CLIP},
        {"name": "text_encoder_2", "class": "T5EncoderModel", "config": T5},
        {"name": "transformer", "class": "FluxTransformer2DModel",
         "config": {"inChannels": 16, "numLayers": 1, "numSingleLayers": 1,
                    "attentionHeadDim": 16, "numAttentionHeads": 2, "jointAttentionDim": 32,
                    "pooledProjectionDim": 32, "guidanceEmbeds": True, "axesDimsRope": [4, 6, 6]}},
        {"name": "vae", "class": "AutoencoderKL", "config": VAE},
    ],
}  # fmt: skip
IMAGE = {"task": "TextToImage", "height": 64, "width": 64}
VIDEO = {"task": "TextToVideo", "height": 64, "width": 64, "numFrames": 9}


def _spec(pipeline: dict[str, Any], dtype: str = "float32", **generation: Any) -> Any:
    return parse_spec(
        {
            "model": {"name": "tiny", "dtype": dtype, "pipeline": pipeline},
            "generation": generation,
        }
    )


@pytest.mark.parametrize(
    ("pipeline", "generation"),
    [
        (SD, IMAGE),
        (WAN, {**VIDEO, "offload": "Model"}),
        (FLUX, {**IMAGE, "classifierFreeGuidance": False}),
    ],
    ids=["sd-unet", "wan-model-offload", "flux"],
)
def test_tiny_pipelines_run_every_phase(pipeline: dict[str, Any], generation: Any) -> None:
    spec = _spec(pipeline, **generation)
    result, code = measure(spec, Options(device="cpu"))
    assert (code, result.status) == (0, "Succeeded"), result.message
    assert [p.name for p in result.phases or []] == ["load", "text-encode", "denoise", "vae-decode"]
    # the library's modules have exactly the parameters the estimate counts
    assert result.parameter_count == estimate(spec).parameter_count
    assert any("one denoising step" in n for n in result.notes)


def test_half_precision_keeps_the_float32_modules_as_loading_does() -> None:
    spec = _spec(WAN, "bfloat16", **VIDEO)
    result, _ = measure(spec, Options(device="cpu"))
    assert result.status == "Succeeded", result.message
    assert result.weights_bytes is not None
    est = estimate(spec)
    weights = max(p.weights_bytes for p in est.phases or [])
    assert result.weights_bytes == weights  # no offload: every component resident


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"offload": "Sequential"}, "offload None and Model only"),
        ({"parallelism": {"cfgParallel": True}}, "one GPU"),
        ({"attentionBackend": "math"}, "SDPA"),
    ],
)
def test_what_synthetic_generation_cannot_reproduce_is_unsupported(
    change: dict[str, Any], reason: str
) -> None:
    result, code = measure(_spec(SD, **IMAGE, **change), Options(device="cpu"))
    assert (code, result.status) == (0, "Unsupported")
    assert reason in (result.message or "")


def test_float8_and_unknown_classes_are_unsupported() -> None:
    fp8 = {
        **SD,
        "components": [{**SD["components"][1], "dtype": "float8_e4m3fn"}, *SD["components"][::2]],
    }
    result, _ = measure(_spec(fp8, **IMAGE), Options(device="cpu"))
    assert result.status == "Unsupported" and "float8" in (result.message or "")
    other = {**SD, "class": "MyPipeline"}
    result, _ = measure(_spec(other, **IMAGE), Options(device="cpu"))
    assert result.status == "Unsupported" and "MyPipeline" in (result.message or "")


@pytest.mark.parametrize(
    ("pipeline", "generation", "note"),
    [
        (WAN, {**VIDEO, "numFrames": 8}, "WanPipeline runs numFrames 8 as 9"),
        (FLUX, {**IMAGE, "height": 66, "classifierFreeGuidance": False}, "sized at 64x64"),
    ],
    ids=["wan-frames", "flux-side"],
)
def test_probe_runs_the_size_the_pipeline_rounds_to(
    pipeline: dict[str, Any], generation: Any, note: str
) -> None:
    """What the pipeline's __call__ would run (gpu_sizer/api/spec/output_size.py), not the
    size asked: Wan rounds numFrames to 4k+1, Flux rounds sides down to VAE scale x 2."""
    result, code = measure(_spec(pipeline, **generation), Options(device="cpu"))
    assert (code, result.status) == (0, "Succeeded"), result.message
    assert any(note in n for n in result.notes)
