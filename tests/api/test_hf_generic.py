"""The core's decisions for a model_type without a parameter layout, without transformers: a
reading is handed in as the CLI's meta-device build would produce it."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import Problem
from gpu_sizer.api.hf import UnsupportedConfig
from gpu_sizer.api.hf_generic import (
    TransformersReading,
    architecture_refused_only,
    keep_count_only,
    model_from_reading,
    model_without_reading,
)

#: meta-llama/Meta-Llama-3-8B config.json's geometry (the published file), under a model_type
#: gpu-sizer has no layout for.
CONFIG: dict[str, Any] = {
    "model_type": "somefamily",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
    "_name_or_path": "org/somefamily",
}


def _reading(attention_layers: int, parameters: int = 8_030_261_248) -> TransformersReading:
    read = {k: v for k, v in CONFIG.items() if not k.startswith("_")}
    return TransformersReading(read, parameters, attention_layers, "SomeForCausalLM", "5.24.0")


def test_one_attention_module_per_layer_keeps_the_geometry_and_the_built_count() -> None:
    notes: list[str] = []
    model = model_from_reading(CONFIG, _reading(32), None, notes, serving=True)
    assert model["architecture"]["numHiddenLayers"] == 32
    assert model["parameterCount"] == 8_030_261_248
    assert not any("attention modules" in n for n in notes)


def test_fewer_attention_modules_than_layers_leave_the_estimate_incomplete() -> None:
    notes: list[str] = []
    model = model_from_reading(CONFIG, _reading(4), None, notes, serving=True)
    assert "architecture" not in model and model["parameterCount"] == 8_030_261_248
    assert any("4 attention modules for 32 layers" in n and "Incomplete" in n for n in notes)


def test_a_hand_given_count_that_differs_is_noted() -> None:
    notes: list[str] = []
    model_from_reading(CONFIG, _reading(32), 7_000_000_000, notes, serving=True)
    assert any("--parameter-count 7000000000 differs" in n for n in notes)


def test_without_a_reading_a_count_is_required() -> None:
    with pytest.raises(UnsupportedConfig, match="give --parameter-count N"):
        model_without_reading(CONFIG, None, "transformers is not installed", [], serving=True)
    notes: list[str] = []
    model = model_without_reading(CONFIG, 8_000_000_000, "not installed", notes, serving=True)
    assert model["architecture"]["numHiddenLayers"] == 32
    assert any("unchecked" in n for n in notes)


def test_a_refused_architecture_alone_keeps_the_count_and_nothing_else() -> None:
    arch = [Problem("spec.model.architecture.layerTypes[3]", "not sized")]
    assert architecture_refused_only(arch)
    assert not architecture_refused_only([])
    assert not architecture_refused_only([*arch, Problem("spec.inference.maxNumSeqs", "x")])
    model: dict[str, Any] = {"name": "m", "architecture": {"numHiddenLayers": 32}}
    keep_count_only(model, 8_000_000_000)
    assert model == {"name": "m", "parameterCount": 8_000_000_000}
