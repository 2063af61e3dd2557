"""A width, head count, patch, factor or channel count of 0 in a pipeline component's config is
refused where the spec is read, naming the key: the memory model divides by these (patches per
frame, heads per width, frames per latent frame), so a zero reached the estimate as a
``ZeroDivisionError`` and the CLI and the webhook answered with a traceback. Layer counts may
be 0 (diffusers builds a stage with no resnets)."""

from __future__ import annotations

from typing import Any

import pytest
from tests import diffusers_configs as published
from tests.api.test_component_depth import _example, _index, _with

from gpu_sizer.api import InvalidWorkload, parse_workload
from gpu_sizer.api.components import COMPONENT_CLASSES, ConfigKey, checked_config

#: Keys whose 0 is a size diffusers builds (a stage without resnets, a DiT without
#: single-stream blocks; lists of layer indices).
ZERO_ALLOWED = {
    "num_layers",
    "num_single_layers",
    "num_hidden_layers",
    "num_refiner_layers",
    "depth",
    "layers_per_block",
    "decoder_layers_per_block",
    "num_res_blocks",
    "transformer_layers_per_block",
    "reverse_transformer_layers_per_block",
    "dual_attention_layers",
    "attn_scales",
}


def _integer_keys(
    wire: dict[str, tuple[str, ConfigKey]], prefix: str = ""
) -> list[tuple[str, str, str]]:
    """(camelCase path, snake_case key, kind) of each integer or integer-list key."""
    out: list[tuple[str, str, str]] = []
    for camel, (snake, key) in wire.items():
        if key.kind == "obj":
            out += _integer_keys(dict(key.inner), f"{prefix}{camel}.")
        elif key.kind in ("int", "ints", "int|ints"):
            out.append((prefix + camel, snake, key.kind))
    return out


def _cases() -> list[tuple[str, str, str, str]]:
    seen: set[str] = set()
    cases = []
    for name, (cls, _) in published.COMPONENTS.items():
        if cls in seen:
            continue
        seen.add(cls)
        for path, snake, kind in _integer_keys(dict(COMPONENT_CLASSES[cls].wire)):
            if snake not in ZERO_ALLOWED:
                cases.append((name, cls, path, kind))
    return cases


def _set(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    head, _, rest = path.partition(".")
    if not rest:
        return {**config, head: value}
    return {**config, head: _set(dict(config.get(head) or {}), rest, value)}


def _zero(config: dict[str, Any], path: str, kind: str) -> Any:
    """0, or for a list the published list with its first item 0."""
    value: Any = config
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if kind == "ints" or (kind == "int|ints" and isinstance(value, list)):
        items = list(value) if isinstance(value, list) and value else [1]
        return [0, *items[1:]]
    return 0


@pytest.mark.parametrize(("component", "cls", "path", "kind"), _cases())
def test_a_size_of_zero_is_refused_naming_the_key(
    component: str, cls: str, path: str, kind: str
) -> None:
    config = published.camel(published.COMPONENTS[component][1])
    problems, resolved = checked_config(cls, _set(config, path, _zero(config, path, kind)))
    assert resolved is None
    assert [k for k, _ in problems] == [path], problems
    assert "at least 1, not 0" in problems[0][1]


@pytest.mark.parametrize(
    ("example", "component", "key", "value", "words"),
    [
        ("wan21-t2v-1.3b-480p-4090.yaml", "transformer", "patchSize", [1, 0, 2], "item 1"),
        ("sd35-large-1024.yaml", "transformer", "patchSize", 0, "at least 1, not 0"),
        ("cogvideox-5b-l4.yaml", "transformer", "attentionHeadDim", 0, "at least 1"),
        ("flux1-dev-1024.yaml", "vae", "blockOutChannels", [0, 0, 0, 0], "item 0"),
        ("hunyuanvideo-720p-129f.yaml", "vae", "spatialCompressionRatio", 0, "at least 1"),
    ],
)
def test_a_workload_with_a_zero_size_is_invalid_with_the_field_path(
    example: str, component: str, key: str, value: Any, words: str
) -> None:
    doc = _example(example)
    with pytest.raises(InvalidWorkload) as caught:
        parse_workload(_with(doc, component, key, value))
    path = f"spec.model.pipeline.components[{_index(doc, component)}].config.{key}"
    assert f"{path}: " in str(caught.value)
    assert words in str(caught.value)
