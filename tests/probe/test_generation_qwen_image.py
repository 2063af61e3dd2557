"""Synthetic generation of a tiny Qwen-Image pipeline (QwenImagePipeline's shapes: 2x2-packed
latents with img_shapes, the Qwen2.5-VL text encoder called with output_hidden_states, the
one-frame 5D latent the VAE decodes) on the CPU: every phase runs, and the library's modules
have exactly the parameters the estimate counts."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.probe.run import Options, measure

pytest.importorskip("diffusers")
pytest.importorskip("transformers")

QWEN_IMAGE: dict[str, Any] = {
    "class": "QwenImagePipeline",
    "components": [
        {"name": "text_encoder", "class": "Qwen2_5_VLForConditionalGeneration",
         # head_dim 128: the rotary mrope_section (16, 24, 24) the config leaves at its default
         # must split half of it
         "config": {"textConfig": {"vocabSize": 1000, "hiddenSize": 256, "intermediateSize": 64,
                                   "numHiddenLayers": 2, "numAttentionHeads": 2,
                                   "numKeyValueHeads": 1},
                    "visionConfig": {"depth": 1, "hiddenSize": 32, "intermediateSize": 64,
                                     "numHeads": 4, "outHiddenSize": 32}}},
        {"name": "transformer", "class": "QwenImageTransformer2DModel",
         "config": {"inChannels": 16, "outChannels": 4, "numLayers": 2, "attentionHeadDim": 16,
                    "numAttentionHeads": 2, "jointAttentionDim": 256, "axesDimsRope": [4, 6, 6]}},
        {"name": "vae", "class": "AutoencoderKLQwenImage",
         "config": {"baseDim": 8, "zDim": 4, "dimMult": [1, 2, 2, 2], "numResBlocks": 1}},
    ],
}  # fmt: skip


@pytest.mark.parametrize("offload", ["None", "Model"])
def test_tiny_qwen_image_runs_every_phase(offload: str) -> None:
    spec = parse_spec(
        {
            "model": {"name": "tiny", "dtype": "float32", "pipeline": QWEN_IMAGE},
            "generation": {"task": "TextToImage", "height": 64, "width": 64,
                           "classifierFreeGuidance": True, "offload": offload},
        }
    )  # fmt: skip
    result, code = measure(spec, Options(device="cpu"))
    assert (code, result.status) == (0, "Succeeded"), result.message
    assert [p.name for p in result.phases or []] == ["load", "text-encode", "denoise", "vae-decode"]
    assert result.parameter_count == estimate(spec).parameter_count
