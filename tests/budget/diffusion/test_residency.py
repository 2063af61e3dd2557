"""Which weights are on the GPU during each forward of a call, per offload mode, as diffusers
0.42.1 and accelerate's hooks keep them (gpu_sizer.budget.diffusion.residency), and the call
order they act on (gpu_sizer.budget.diffusion.calls)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.budget.diffusion.specs import pipeline_spec

from gpu_sizer.api import EstimateStatus, PipelineOffload
from gpu_sizer.budget import estimate
from gpu_sizer.budget.diffusion.calls import Step, denoisers_that_run
from gpu_sizer.budget.diffusion.residency import offload_chain, resident_sets

GIB = 1 << 30
WAN22 = "Wan-AI/Wan2.2-T2V-A14B-Diffusers"
VIDEO_720P: dict[str, Any] = {"task": "TextToVideo", "height": 720, "width": 1280, "numFrames": 81}
SD3 = "stabilityai/stable-diffusion-3.5-large"
IMAGE: dict[str, Any] = {"task": "TextToImage", "height": 1024, "width": 1024}
M = PipelineOffload.Model


def _entries(est: EstimateStatus, name: str) -> list[Any]:
    return [p for p in est.phases or [] if p.name == name]


def _resident(entry: Any) -> set[str]:
    return set(entry.resident.split(", ")) if entry.resident else set()


def test_the_first_model_of_the_chain_offloads_nothing() -> None:
    """accelerate's CpuOffload.pre_forward offloads only prev_module_hook's model: SD3 runs
    CLIP-L, CLIP-G, T5 for the prompt, then CLIP-L again for the negative prompt while T5 is
    still on the GPU (text_encoder has no predecessor in model_cpu_offload_seq)."""
    seq = (
        "text_encoder",
        "text_encoder_2",
        "text_encoder_3",
        "image_encoder",
        "transformer",
        "vae",
    )
    modes = dict.fromkeys(
        ("text_encoder", "text_encoder_2", "text_encoder_3", "transformer", "vae"), M
    )
    order = ["text_encoder", "text_encoder_2", "text_encoder_3"] * 2 + ["transformer", "vae"]
    steps = [Step("x", n, "") for n in order]
    sets = resident_sets(steps, modes, seq, ())
    assert [sorted(s) for s in sets] == [
        ["text_encoder"],
        ["text_encoder_2"],
        ["text_encoder_3"],
        ["text_encoder", "text_encoder_3"],
        ["text_encoder_2", "text_encoder_3"],
        ["text_encoder_3"],
        ["transformer"],  # image_encoder is absent: the transformer's hook offloads T5
        ["vae"],
    ]
    # the chain skips absent and non-Model components
    assert offload_chain(seq, modes, ())["transformer"] == "text_encoder_3"


def test_sd3_model_offload_peaks_with_t5_and_clip_g_together() -> None:
    est = estimate(pipeline_spec(SD3, "float16", offload="Model", **IMAGE))
    te = _entries(est, "TextEncode")[0]
    assert _resident(te) == {"text_encoder_2", "text_encoder_3"}
    assert te.running == "text_encoder_2"
    assert any("keeps text_encoder_3 on the GPU" in n for n in est.notes or [])


def test_wan22_experts_without_offload_are_both_resident_in_every_phase() -> None:
    est = estimate(pipeline_spec(WAN22, **VIDEO_720P))
    assert [(p.name, p.running) for p in est.phases or []] == [
        ("TextEncode", "text_encoder"),
        ("Denoise", "transformer"),
        ("Denoise", "transformer_2"),
        ("VaeDecode", "vae"),
    ]
    for p in est.phases or []:
        assert {"transformer", "transformer_2"} <= _resident(p)
        assert p.weights_bytes > 2 * 26 * GIB


def test_wan22_model_offload_keeps_one_expert_at_a_time() -> None:
    """WanPipeline's model_cpu_offload_seq is text_encoder->transformer->transformer_2->vae:
    transformer_2's hook offloads transformer when the low-noise steps start."""
    est = estimate(pipeline_spec(WAN22, offload="Model", **VIDEO_720P))
    assert [(p.name, _resident(p)) for p in est.phases or []] == [
        ("TextEncode", {"text_encoder"}),
        ("Denoise", {"transformer"}),
        ("Denoise", {"transformer_2"}),
        ("VaeDecode", {"vae"}),
    ]
    high, low = _entries(est, "Denoise")
    assert high.weights_bytes == low.weights_bytes < 27 * GIB


@pytest.mark.parametrize("mode", ["Sequential", "Group"])
def test_wan22_streamed_offload_holds_only_the_running_expert_in_part(mode: str) -> None:
    est = estimate(pipeline_spec(WAN22, offload=mode, **VIDEO_720P))
    for entry in _entries(est, "Denoise"):
        assert _resident(entry) == {entry.running}
        assert entry.weights_bytes < 2 * GIB


def test_wan22_boundary_ratio_decides_which_experts_run() -> None:
    assert denoisers_that_run("WanPipeline", ["transformer", "transformer_2"], {}) == [
        "transformer"
    ]
    both = {"boundaryRatio": 0.875}
    assert denoisers_that_run("WanPipeline", ["transformer", "transformer_2"], both) == [
        "transformer",
        "transformer_2",
    ]
    # the published low-noise-only setting: transformer=None, boundary_ratio=1.0
    assert denoisers_that_run(
        "WanImageToVideoPipeline", ["transformer_2"], {"boundaryRatio": 1.0}
    ) == ["transformer_2"]
    assert denoisers_that_run(
        "WanPipeline", ["transformer", "transformer_2"], {"boundaryRatio": 1.0}
    ) == ["transformer_2"]


def test_a_loaded_expert_that_never_runs_stays_until_the_decode() -> None:
    """With boundaryRatio null transformer_2 never runs, so nothing offloads transformer
    before the VAE (the vae's hook offloads transformer_2, its predecessor in the sequence):
    the decode runs with the 14B expert still on the GPU."""
    spec = pipeline_spec(WAN22, offload="Model", **VIDEO_720P)
    assert spec.model.pipeline is not None
    pipeline = spec.model.pipeline.model_copy(update={"config": {}})
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"pipeline": pipeline})})
    est = estimate(spec)
    assert [p.running for p in _entries(est, "Denoise")] == ["transformer"]
    assert _resident(_entries(est, "VaeDecode")[0]) == {"transformer", "vae"}


def test_a_vae_encode_before_the_loop_leaves_the_vae_on_the_gpu() -> None:
    """WanImageToVideoPipeline encodes the conditioning video in prepare_latents; the vae's
    hook offloads its predecessor (transformer) and no hook offloads the vae before the
    decode: it is resident through the denoising loop."""
    est = estimate(
        pipeline_spec(
            "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers",
            offload="Model",
            task="ImageToVideo",
            height=480,
            width=832,
            numFrames=81,
        )
    )
    te = _entries(est, "TextEncode")[0]
    assert _resident(_entries(est, "Denoise")[0]) == {"transformer", "vae"}
    assert te.running in ("text_encoder", "vae", "image_encoder")


def test_sd15_safety_checker_stays_on_the_gpu_under_every_offload() -> None:
    """StableDiffusionPipeline._exclude_from_cpu_offload = ["safety_checker"]: model and
    sequential offload move it to the GPU once; it runs on the decoded images."""
    repo = "stable-diffusion-v1-5/stable-diffusion-v1-5"
    for mode in ("Model", "Sequential"):
        est = estimate(
            pipeline_spec(repo, "float16", offload=mode, task="TextToImage", height=512, width=512)
        )
        for p in est.phases or []:
            assert "safety_checker" in _resident(p), (mode, p.name)
    none = estimate(pipeline_spec(repo, "float16", task="TextToImage", height=512, width=512))
    assert all("safety_checker" in _resident(p) for p in none.phases or [])
