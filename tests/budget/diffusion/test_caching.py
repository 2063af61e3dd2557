"""The diffusion estimate's memos give what the uncached computation gives, and only for equal
inputs: the component models (resolved.py: one module tree per class and resolved config), the
config resolved once at validation, the call plans, and the estimate memo keyed by what the
estimate reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.budget.diffusion.specs import pipeline_spec

from gpu_sizer.api import GPUWorkloadSpec, parse_workload
from gpu_sizer.api.components import (
    COMPONENT_CLASSES,
    checked_config,
    config_problems,
    resolved_config,
)
from gpu_sizer.api.workload import _holds_more_than
from gpu_sizer.budget.diffusion import estimate as est
from gpu_sizer.budget.diffusion.resolved import cache_clear, component_model

ROOT = Path(__file__).resolve().parents[3]
DIFFUSION_EXAMPLES = sorted(
    p for p in (ROOT / "examples").glob("*.yaml") if "generation:" in p.read_text()
)


def _fresh(spec: GPUWorkloadSpec) -> Any:
    """The estimate computed with every memo empty."""
    cache_clear()
    est.estimates_clear()
    status, missing = est.generation_estimate(spec)
    return status.model_dump(), missing


@pytest.mark.parametrize("path", DIFFUSION_EXAMPLES, ids=lambda p: p.name)
def test_a_memoised_estimate_is_the_fresh_one(path: Path) -> None:
    spec = parse_workload(yaml.safe_load(path.read_text()))
    fresh = _fresh(spec)
    for _ in range(2):  # the component models warm, then the estimate memo too
        status, missing = est.generation_estimate(spec)
        assert (status.model_dump(), missing) == fresh
    # a re-parsed spec (new objects, same content) hits the memo and gets its own status
    again = parse_workload(yaml.safe_load(path.read_text()))
    first, _ = est.generation_estimate(again)
    second, _ = est.generation_estimate(again)
    assert first is not second and first.model_dump() == fresh[0]


def test_each_field_the_estimate_reads_is_in_the_memo_key() -> None:
    """Changing one input changes the estimate: no memo hit hides it. (Wan runs guidance as
    two passes, so ``classifierFreeGuidance`` alone changes none of its figures and is not in
    the list.)"""
    base = dict(task="TextToVideo", height=480, width=832, numFrames=81)
    repo = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
    variants: list[GPUWorkloadSpec] = [
        pipeline_spec(repo, **base),
        pipeline_spec(repo, **{**base, "height": 720, "width": 1280}),
        pipeline_spec(repo, **{**base, "numFrames": 41}),
        pipeline_spec(repo, **{**base, "batchSize": 2}),
        pipeline_spec(repo, **{**base, "offload": "Model"}),
        pipeline_spec(repo, **{**base, "vaeTiling": True}),
        pipeline_spec(repo, **{**base, "maxSequenceLength": 256}),
        pipeline_spec(repo, **{**base, "attentionBackend": "math"}),
        pipeline_spec(repo, dtype="float16", **base),
        pipeline_spec(repo, components={"vae": {"dtype": "float32"}}, **base),
        pipeline_spec(repo, components={"text_encoder": {"device": "Cpu"}}, **base),
        pipeline_spec(repo, components={"transformer": {"offload": "Sequential"}}, **base),
        pipeline_spec(repo, components={"transformer": {"config": {"numLayers": 20}}}, **base),
    ]
    est.estimates_clear()
    warm = [est.generation_estimate(s)[0].model_dump() for s in variants]
    fresh = [_fresh(s)[0] for s in variants]
    assert warm == fresh
    # every change shows in the figures: the peak or one of the phases
    figures = [repr((w["per_gpu"], w["phases"])) for w in warm]
    assert len(set(figures)) == len(figures)


def test_two_spellings_of_one_config_share_one_component_model() -> None:
    """A config with its defaults written out and one without resolve alike, so they share the
    built module tree."""
    cls = "AutoencoderKL"
    short = {"latentChannels": 16, "blockOutChannels": [128, 256, 512, 512]}
    written = dict(short)
    for wire, (_key, spec) in COMPONENT_CLASSES[cls].wire.items():
        if wire not in written and spec.kind != "obj":
            default = spec.default
            written[wire] = list(default) if isinstance(default, tuple) else default
    a = component_model(cls, resolved_config(cls, short))
    b = component_model(cls, resolved_config(cls, written))
    assert a is b
    other = component_model(cls, resolved_config(cls, {**short, "latentChannels": 4}))
    assert other is not a


def test_a_component_copy_with_another_config_resolves_it_again() -> None:
    spec = pipeline_spec(
        "Wan-AI/Wan2.1-T2V-1.3B-Diffusers", task="TextToVideo", height=480, width=832
    )
    assert spec.model.pipeline is not None
    transformer = next(c for c in spec.model.pipeline.components if c.name == "transformer")
    layers = transformer.resolved_config()["num_layers"]
    same = transformer.model_copy(update={"dtype": "float16"})
    assert same.resolved_config() is transformer.resolved_config()
    changed = transformer.model_copy(update={"config": {**transformer.config, "numLayers": 2}})
    assert changed.resolved_config()["num_layers"] == 2 != layers


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 20_000_000)
    | st.floats(-1, 1e8)
    | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    cls=st.sampled_from(sorted(COMPONENT_CLASSES)),
    picks=st.lists(st.tuples(st.integers(0, 200), _VALUES), max_size=6),
)
def test_checked_config_is_config_problems_then_resolved_config(
    cls: str, picks: list[tuple[int, Any]]
) -> None:
    """The one-pass check-and-resolve (validation) agrees with the two functions it replaces,
    for any values (of any type) on any of the class's keys."""
    wire = sorted(COMPONENT_CLASSES[cls].wire)
    config = {wire[i % len(wire)]: value for i, value in picks}
    found, resolved = checked_config(cls, config)
    assert found == config_problems(cls, config)
    assert resolved == (None if found else resolved_config(cls, config))


def _count(doc: Any) -> int:
    if isinstance(doc, dict):
        return len(doc) + sum(_count(v) for v in doc.values())
    if isinstance(doc, list):
        return len(doc) + sum(_count(v) for v in doc)
    return 0


@settings(max_examples=300, deadline=None)
@given(doc=_VALUES, limit=st.integers(0, 40))
def test_the_size_guard_counts_every_member_and_item(doc: Any, limit: int) -> None:
    assert _holds_more_than({"x": doc}, limit) == (_count({"x": doc}) > limit)


def test_the_component_cache_is_bounded_by_what_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deep configs are few per budget: the cache evicts by module-tree nodes held, not only by
    entries, so distinct deep UNets cannot grow a verdict worker past its memory limit."""
    from gpu_sizer.budget.diffusion import resolved

    def unet(channels: int) -> dict[str, Any]:
        config = {
            "blockOutChannels": [channels] * 8,
            "downBlockTypes": ["CrossAttnDownBlock2D"] * 8,
            "upBlockTypes": ["CrossAttnUpBlock2D"] * 8,
            "layersPerBlock": 8,
            "transformerLayersPerBlock": 4,
        }
        return resolved_config("UNet2DConditionModel", config)

    cache_clear()
    first = component_model("UNet2DConditionModel", unet(320))
    assert not isinstance(first, str)
    monkeypatch.setattr(resolved, "CACHE_PARTS", 3 * first.parts)
    for i in range(1, 8):
        component_model("UNet2DConditionModel", unet(320 + 32 * i))
        held = resolved._HELD[0]
        assert held <= 3 * first.parts
        assert held == sum(resolved._weight(e) for e in resolved._CACHE.values())
    assert len(resolved._CACHE) == 3
    again = component_model("UNet2DConditionModel", unet(320))  # evicted, built again: equal
    assert not isinstance(again, str) and again.params == first.params
    cache_clear()
    assert resolved._HELD[0] == 0
