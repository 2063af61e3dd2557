"""Validation of the keys the newer families need: each problem names its field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import InvalidWorkload, parse_spec

BASE: dict[str, Any] = {
    "modelType": "qwen3_moe",
    "numHiddenLayers": 4,
    "hiddenSize": 64,
    "intermediateSize": 128,
    "numAttentionHeads": 4,
    "numKeyValueHeads": 2,
    "vocabSize": 256,
    "maxPositionEmbeddings": 512,
    "numExperts": 4,
    "numExpertsPerTok": 2,
}


def _problems(arch: dict[str, Any]) -> dict[str, str]:
    doc = {"model": {"architecture": arch}, "inference": {"maxModelLen": 64, "maxNumSeqs": 1}}
    with pytest.raises(InvalidWorkload) as err:
        parse_spec(doc)
    return {p.path.removeprefix("spec.model.architecture."): p.message for p in err.value.problems}


def test_the_expert_count_is_given_once() -> None:
    found = _problems({**BASE, "nRoutedExperts": 4})
    assert "numExperts and nRoutedExperts" in found["nRoutedExperts"]


def test_moe_families_need_an_expert_count_under_their_own_key() -> None:
    arch = {k: v for k, v in BASE.items() if k != "numExperts"}
    assert "mixture-of-experts" in _problems(arch)["numLocalExperts"]


def test_mla_needs_all_its_widths() -> None:
    arch = {**BASE, "modelType": "deepseek_v2", "kvLoraRank": 16}
    assert "qkRopeHeadDim" in _problems(arch)["kvLoraRank"]
    plain = {**BASE, "modelType": "deepseek_v3"}
    assert "multi-head latent attention" in _problems(plain)["kvLoraRank"]


def test_layer_types_one_per_layer_of_known_kinds() -> None:
    found = _problems({**BASE, "modelType": "gpt_oss", "layerTypes": ["full_attention"]})
    assert "one per layer" in found["layerTypes"]
    found = _problems({**BASE, "modelType": "gpt_oss", "layerTypes": ["mamba"] * 4})
    assert "not ['mamba']" in found["layerTypes"]


def test_nemotron_h_needs_its_pattern_and_no_moe_layers_yet() -> None:
    arch = {**BASE, "modelType": "nemotron_h"}
    arch.pop("numExperts")
    arch.pop("numExpertsPerTok")
    assert "hybridOverridePattern" in _problems(arch)["hybridOverridePattern"]
    found = _problems({**arch, "hybridOverridePattern": "M*-E"})
    assert "not sized yet" in found["hybridOverridePattern"]
    found = _problems({**arch, "hybridOverridePattern": "M*"})
    assert "one per layer" in found["hybridOverridePattern"]


def test_vision_language_families_need_their_encoder() -> None:
    arch = {k: v for k, v in BASE.items() if k not in ("numExperts", "numExpertsPerTok")}
    assert "vision_config" in _problems({**arch, "modelType": "qwen2_5_vl"})["visionConfig"]
    vision = {"modelType": "siglip_vision_model", "hiddenSize": 32, "intermediateSize": 64}
    found = _problems({**arch, "modelType": "gemma3", "visionConfig": vision})
    assert "numHiddenLayers" in found["visionConfig.numHiddenLayers"]
    found = _problems(
        {**arch, "modelType": "llama", "visionConfig": {**vision, "depth": 1, "numHeads": 2}}
    )
    assert "no vision encoder" in found["visionConfig"]
