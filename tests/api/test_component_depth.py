"""A pipeline component's depth is bounded where the spec is read: the memory model builds each
module of a component once, so a config asking for 10 million layers (the generic integer bound)
would hold a webhook worker for minutes instead of being refused at once with the field named."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_sizer.api import InvalidWorkload, parse_workload
from gpu_sizer.api.spec.bounds import LIMITS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: A component's layer count has the bound an LLM's ``numHiddenLayers`` has.
LAYERS = LIMITS["layers"]


def _example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def _with(doc: dict[str, Any], component: str, key: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for c in out["spec"]["model"]["pipeline"]["components"]:
        if c["name"] == component:
            c["config"][key] = value
            return out
    raise AssertionError(component)


def _index(doc: dict[str, Any], component: str) -> int:
    names = [c["name"] for c in doc["spec"]["model"]["pipeline"]["components"]]
    return names.index(component)


@pytest.mark.parametrize(
    ("example", "component", "key", "bound"),
    [
        ("wan21-t2v-1.3b-480p-4090.yaml", "transformer", "numLayers", LAYERS),
        ("flux1-dev-1024.yaml", "transformer", "numSingleLayers", LAYERS),
        ("sd15-txt2img-l4.yaml", "text_encoder", "numHiddenLayers", LAYERS),
        ("sd15-txt2img-l4.yaml", "unet", "layersPerBlock", 8),
        ("sd15-txt2img-l4.yaml", "vae", "layersPerBlock", 8),
        ("sdxl-base-1024-batch4.yaml", "unet", "transformerLayersPerBlock", 16),
    ],
)
def test_a_depth_past_its_bound_is_refused_naming_the_field(
    example: str, component: str, key: str, bound: int
) -> None:
    doc = _example(example)
    parse_workload(_with(doc, component, key, bound))  # the bound itself is a valid spec
    with pytest.raises(InvalidWorkload) as caught:
        parse_workload(_with(doc, component, key, 9_999_999))
    path = f"spec.model.pipeline.components[{_index(doc, component)}].config.{key}"
    assert f"{path}: must be between 0 and {bound}, not 9999999" in str(caught.value)


def test_a_per_level_list_is_refused_past_eight_levels() -> None:
    doc = _example("sdxl-base-1024-batch4.yaml")
    i = _index(doc, "unet")
    with pytest.raises(InvalidWorkload) as caught:
        parse_workload(_with(doc, "unet", "blockOutChannels", [320] * 9))
    path = f"spec.model.pipeline.components[{i}].config.blockOutChannels"
    assert f"{path}: must have at most 8 items, not 9" in str(caught.value)
    with pytest.raises(InvalidWorkload) as caught:
        parse_workload(_with(doc, "unet", "transformerLayersPerBlock", [1, 2, 17]))
    assert "transformerLayersPerBlock: item 2 must be between 0 and 16, not 17" in str(caught.value)


def test_an_empty_component_list_is_refused_in_plain_words() -> None:
    doc = _example("sd15-txt2img-l4.yaml")
    doc["spec"]["model"]["pipeline"]["components"] = []
    with pytest.raises(InvalidWorkload) as caught:
        parse_workload(doc)
    assert [str(p) for p in caught.value.problems] == [
        "spec.model.pipeline.components: must have at least 1 item, not 0"
    ]
