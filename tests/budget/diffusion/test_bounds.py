"""The fail-safe bound for Wan 2.2's two experts under model offload (``budget.diffusion.bounds``):
where it applies, its size, and that it leaves the settings diffusers has been measured in alone."""

from __future__ import annotations

from typing import Any

from tests.budget.diffusion.specs import pipeline_spec
from tests.diffusers_configs import WAN21_T2V_14B

from gpu_sizer.budget import estimate
from gpu_sizer.budget.diffusion.bounds import wan_reference_margin_bytes
from gpu_sizer.budget.diffusion.denoise import DenoiseShape

GIB = 1 << 30
WAN22 = "Wan-AI/Wan2.2-T2V-A14B-Diffusers"
VIDEO_720P: dict[str, Any] = {"task": "TextToVideo", "height": 720, "width": 1280, "numFrames": 81}
EXPERTS = ("transformer", "transformer_2")
#: one expert's pass at 1280x720x81: 21 latent frames of 90 x 160, bfloat16, one sample
SHAPE_720P = DenoiseShape(1, 21, 90, 160, 512, 2)


def test_the_margin_is_the_reference_codes_per_token_float32_tensors() -> None:
    """L = 21 x 45 x 80 = 75,600 tokens, dim 5120: two [L, 6, dim] float32 tensors and the
    residual stream's float32 copy beyond bfloat16, 19.35 GB."""
    tokens, dim = 21 * 45 * 80, 5120
    want = 2 * tokens * 6 * dim * 4 + tokens * dim * 2
    got = wan_reference_margin_bytes("WanPipeline", {}, EXPERTS, WAN21_T2V_14B, SHAPE_720P)
    assert got == want == 19_353_600_000


def test_the_margin_applies_to_two_experts_of_a_wan_pipeline_only() -> None:
    one = wan_reference_margin_bytes("WanPipeline", {}, ["transformer"], WAN21_T2V_14B, SHAPE_720P)
    assert one == 0
    expanded = {"expandTimesteps": True}  # diffusers' own per-token path, counted by denoise
    assert not wan_reference_margin_bytes(
        "WanPipeline", expanded, EXPERTS, WAN21_T2V_14B, SHAPE_720P
    )
    assert not wan_reference_margin_bytes(
        "HunyuanVideoPipeline", {}, EXPERTS, WAN21_T2V_14B, SHAPE_720P
    )
    split = DenoiseShape(1, 21, 90, 160, 512, 2, sequence_split=4, ulysses=4)
    quarter = wan_reference_margin_bytes("WanPipeline", {}, EXPERTS, WAN21_T2V_14B, split)
    assert quarter * 4 == 19_353_600_000


def test_only_model_offload_of_both_experts_carries_the_bound() -> None:
    """No offload has diffusers measurements of its own (diffusers#12011, Wan2.2#42); group and
    sequential offload have no counterpart in the reference code; Wan 2.1 has one transformer."""
    model = estimate(pipeline_spec(WAN22, offload="Model", **VIDEO_720P))
    assert any(n.startswith("upper bound: each Wan 2.2 expert") for n in model.notes or [])
    denoise = [p for p in model.phases or [] if p.name == "Denoise"]
    assert len(denoise) == 2 and all(p.activation_bytes > 18 * GIB for p in denoise)
    for mode in (None, "Group", "Sequential"):
        kw = {"offload": mode} if mode else {}
        est = estimate(pipeline_spec(WAN22, **VIDEO_720P, **kw))
        assert not any(n.startswith("upper bound") for n in est.notes or []), mode
    wan21_14b = pipeline_spec("Wan-AI/Wan2.1-T2V-14B-Diffusers", offload="Model", **VIDEO_720P)
    wan21 = estimate(wan21_14b)
    assert not any(n.startswith("upper bound") for n in wan21.notes or [])
