"""Synthetic generation of a tiny MochiPipeline: diffusers' own Mochi transformer and VAE run one
call's phases on the CPU and count the parameters the estimate counts."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.probe.run import Options, measure
from tests.probe.test_generation import T5

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

MOCHI: dict[str, Any] = {
    "class": "MochiPipeline",
    "components": [
        {"name": "text_encoder", "class": "T5EncoderModel", "config": T5},
        {"name": "transformer", "class": "MochiTransformer3DModel",
         "config": {"numAttentionHeads": 2, "attentionHeadDim": 8, "numLayers": 2,
                    "pooledProjectionDim": 16, "textEmbedDim": 32, "timeEmbedDim": 16}},
        {"name": "vae", "class": "AutoencoderKLMochi",
         "config": {"encoderBlockOutChannels": [32, 32, 32, 32],
                    "decoderBlockOutChannels": [32, 32, 32, 32],
                    "layersPerBlock": [1, 1, 1, 1, 1]}},
    ],
}  # fmt: skip


@pytest.mark.parametrize("offload", ["None", "Model"])
def test_tiny_mochi_runs_every_phase(offload: str) -> None:
    spec = parse_spec(
        {
            "model": {"name": "tiny", "dtype": "float32", "pipeline": MOCHI},
            "generation": {"task": "TextToVideo", "height": 64, "width": 64, "numFrames": 7,
                           "offload": offload},
        }
    )  # fmt: skip
    result, code = measure(spec, Options(device="cpu"))
    assert (code, result.status) == (0, "Succeeded"), result.message
    assert [p.name for p in result.phases or []] == ["load", "text-encode", "denoise", "vae-decode"]
    assert result.parameter_count == estimate(spec).parameter_count
