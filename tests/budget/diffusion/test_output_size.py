"""Output sizes a diffusers 0.42.1 pipeline refuses are spec errors naming the field and the fix;
sizes it rounds are sized as the rounded size (``gpu_sizer/api/spec/output_size.py`` cites each
rule's ``check_inputs``/``__call__``/``prepare_latents``)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.budget.diffusion.conftest import TINY_HUNYUAN, TINY_WAN
from tests.diffusers_configs import OPTIONS, PIPELINES, camel

from gpu_sizer.api import GPUWorkloadSpec, InvalidWorkload, parse_spec
from gpu_sizer.api.spec.output_size import SIZE_RULES, output_size, size_step
from gpu_sizer.budget.diffusion import generation_estimate
from gpu_sizer.budget.diffusion.pipelines import PIPELINES as MODELLED

SD15 = "stable-diffusion-v1-5/stable-diffusion-v1-5"
SDXL = "stabilityai/stable-diffusion-xl-base-1.0"
SD3 = "stabilityai/stable-diffusion-3-medium-diffusers"
FLUX = "black-forest-labs/FLUX.1-schnell"
WAN = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
WAN_I2V = "Wan-AI/Wan2.1-I2V-14B-720P-Diffusers"
HUNYUAN = "hunyuanvideo-community/HunyuanVideo"
COG = "THUDM/CogVideoX-5b"
LTX = "Lightricks/LTX-Video"
MOCHI = "genmo/mochi-1-preview"
QWEN = "Qwen/Qwen-Image"


def spec(
    repo: str,
    cls: str,
    task: str,
    height: int,
    width: int,
    frames: int = 1,
    vae: dict[str, Any] | None = None,
    transformer: dict[str, Any] | None = None,
) -> GPUWorkloadSpec:
    """``repo``'s published components under pipeline class ``cls`` (its image-to-image or
    image-to-video sibling shares them, but for CogVideoX-5b-I2V's transformer, which takes the
    latents and the encoded image: ``in_channels`` 32) at one output size."""
    _, parts = PIPELINES[repo]
    if cls == "CogVideoXImageToVideoPipeline":
        transformer = {"inChannels": 32, **(transformer or {})}
    comps = []
    for name, component, config in parts:
        wire = camel(config)
        if name == "vae" and vae:
            wire = {**wire, **vae}
        if name == "transformer" and transformer:
            wire = {**wire, **transformer}
        comps.append({"name": name, "class": component, "config": wire})
    generation: dict[str, Any] = {"task": task, "height": height, "width": width}
    if frames != 1:
        generation["numFrames"] = frames
    return parse_spec(
        {
            "model": {
                "name": repo,
                "dtype": "bfloat16",
                "pipeline": {
                    "class": cls,
                    "components": comps,
                    "config": camel(OPTIONS.get(repo, {})),
                },
            },
            "generation": generation,
        }
    )


#: (class, repo, task, frames, divisor, a side it refuses, the valid sides the message offers)
REFUSED = [
    ("StableDiffusionPipeline", SD15, "TextToImage", 1, 8, 515, "512 or 520"),
    ("StableDiffusionXLPipeline", SDXL, "TextToImage", 1, 8, 1020, "1016 or 1024"),
    ("StableDiffusion3Pipeline", SD3, "TextToImage", 1, 16, 1000, "992 or 1008"),
    ("StableDiffusion3Img2ImgPipeline", SD3, "ImageToImage", 1, 16, 1032, "1024 or 1040"),
    ("WanPipeline", WAN, "TextToVideo", 81, 16, 488, "480 or 496"),
    ("WanImageToVideoPipeline", WAN_I2V, "ImageToVideo", 81, 16, 724, "720 or 736"),
    ("HunyuanVideoPipeline", HUNYUAN, "TextToVideo", 61, 16, 540, "528 or 544"),
    ("CogVideoXPipeline", COG, "TextToVideo", 49, 16, 488, "480 or 496"),
    ("CogVideoXImageToVideoPipeline", COG, "ImageToVideo", 49, 16, 481, "480 or 496"),
    ("LTXPipeline", LTX, "TextToVideo", 161, 32, 720, "704 or 736"),
    ("LTXImageToVideoPipeline", LTX, "ImageToVideo", 161, 32, 496, "480 or 512"),
    ("MochiPipeline", MOCHI, "TextToVideo", 19, 16, 488, "480 or 496"),
]

#: (class, repo, task, (height, width, frames) asked, (height, width, frames) the call runs)
ROUNDED = [
    ("StableDiffusionImg2ImgPipeline", SD15, "ImageToImage", (515, 770, 1), (512, 768, 1)),
    ("StableDiffusionXLImg2ImgPipeline", SDXL, "ImageToImage", (1023, 1030, 1), (1016, 1024, 1)),
    ("FluxPipeline", FLUX, "TextToImage", (1000, 1020, 1), (992, 1008, 1)),
    ("FluxImg2ImgPipeline", FLUX, "ImageToImage", (1032, 776, 1), (1024, 768, 1)),
    ("WanPipeline", WAN, "TextToVideo", (480, 832, 80), (480, 832, 81)),
    ("WanPipeline", WAN, "TextToVideo", (480, 832, 84), (480, 832, 85)),
    ("WanImageToVideoPipeline", WAN_I2V, "ImageToVideo", (480, 832, 83), (480, 832, 81)),
    ("MochiPipeline", MOCHI, "TextToVideo", (480, 848, 24), (480, 848, 19)),
    ("MochiPipeline", MOCHI, "TextToVideo", (480, 848, 84), (480, 848, 79)),
    ("QwenImagePipeline", QWEN, "TextToImage", (1000, 1020, 1), (992, 1008, 1)),
]


def test_every_modelled_pipeline_has_a_size_rule() -> None:
    assert set(SIZE_RULES) == set(MODELLED)


@pytest.mark.parametrize(("cls", "repo", "task", "frames", "divisor", "bad", "fix"), REFUSED)
def test_refused_side_is_a_spec_error_naming_field_divisor_and_fix(
    cls: str, repo: str, task: str, frames: int, divisor: int, bad: int, fix: str
) -> None:
    good = bad // divisor * divisor
    spec(repo, cls, task, good, good, frames)  # the valid neighbour is accepted
    for field, (h, w) in (("height", (bad, good)), ("width", (good, bad))):
        with pytest.raises(InvalidWorkload) as caught:
            spec(repo, cls, task, h, w, frames)
        problems = {p.path: p.message for p in caught.value.problems}
        assert list(problems) == [f"spec.generation.{field}"]
        message = problems[f"spec.generation.{field}"]
        assert f"{cls} refuses {field} {bad}" in message
        assert f"divisible by {divisor}" in message
        assert "diffusers 0.42.1" in message and "check_inputs" in message
        assert message.endswith(f"use {field} {fix}")


@pytest.mark.parametrize(("cls", "repo", "task", "asked", "runs"), ROUNDED)
def test_rounded_size_is_sized_as_the_size_the_pipeline_runs(
    cls: str, repo: str, task: str, asked: tuple[int, int, int], runs: tuple[int, int, int]
) -> None:
    odd, direct = spec(repo, cls, task, *asked), spec(repo, cls, task, *runs)
    got, got_missing = generation_estimate(odd)
    want, want_missing = generation_estimate(direct)
    assert got.per_gpu == want.per_gpu
    assert got.phases == want.phases
    assert got_missing == want_missing
    extra = [n for n in got.notes if n not in want.notes]
    assert len(extra) == (asked[:2] != runs[:2]) + (asked[2] != runs[2])
    assert all(n.startswith(cls) and "diffusers 0.42.1" in n for n in extra)
    if asked[:2] != runs[:2]:
        assert any(f"sized at {runs[0]}x{runs[1]}" in n for n in extra)
    if asked[2] != runs[2]:
        assert any(f"numFrames {asked[2]} as {runs[2]}" in n for n in extra)
    # the size asked is not what is sized: the estimate differs from the unrounded arithmetic
    assert odd.model.pipeline is not None
    assert output_size(odd.model.pipeline, task.endswith("Video"), *asked).notes == extra


def test_wan_rounds_to_its_vae_and_patch_multiple() -> None:
    """Wan 2.2 TI2V-5B's VAE compresses 16x: ``WanPipeline.__call__`` rounds sides down to
    ``scale_factor_spatial * patch_size[1]`` = 32 after ``check_inputs`` accepted multiples
    of 16."""
    wide = spec(WAN, "WanPipeline", "TextToVideo", 720, 1280, 81, vae={"scaleFactorSpatial": 16})
    assert wide.model.pipeline is not None
    size = output_size(wide.model.pipeline, True, 720, 1264, 121)
    assert (size.height, size.width, size.num_frames) == (704, 1248, 121)
    assert size.refused == [] and len(size.notes) == 1
    assert size_step(wide.model.pipeline) == 32


def test_flux_side_that_rounds_to_nothing_is_refused() -> None:
    with pytest.raises(InvalidWorkload) as caught:
        spec(FLUX, "FluxPipeline", "TextToImage", 8, 1024)
    (problem,) = caught.value.problems
    assert problem.path == "spec.generation.height"
    assert "0 pixels" in problem.message and problem.message.endswith("use height 16 or more")


def test_unmodelled_pipeline_class_runs_the_size_given() -> None:
    s = spec(SD15, "SomeOtherPipeline", "TextToImage", 515, 515)
    assert s.model.pipeline is not None
    size = output_size(s.model.pipeline, False, 515, 515, 1)
    assert (size.height, size.width, size.refused, size.notes) == (515, 515, [], [])


def test_resolution_fix_is_one_ltx_accepts() -> None:
    from gpu_sizer.budget.diffusion.fixes import generation_candidates

    big = spec(LTX, "LTXPipeline", "TextToVideo", 1024, 1216, 161)
    fixes = [c for c in generation_candidates(big) if c[0] == "spec.generation.height"]
    assert fixes
    for _, height, changed, _ in fixes:
        assert changed.generation is not None
        assert height % 32 == 0 and changed.generation.width % 32 == 0
        model = big.model.model_dump(by_alias=True, mode="json")
        generation = changed.generation.model_dump(by_alias=True, mode="json")
        parse_spec({"model": model, "generation": generation})  # LTX accepts it


def test_webhook_denies_a_refused_size_as_invalid() -> None:
    """The admission webhook's review answers Invalid with the same line (parse_spec's
    problems), before any sizing."""
    from pathlib import Path

    import yaml

    from gpu_sizer.admission.verdict import Outcome, review
    from gpu_sizer.catalog import DEFAULT_CATALOG
    from gpu_sizer.policy.namespace import Policy

    root = Path(__file__).resolve().parents[3]
    doc = yaml.safe_load((root / "examples" / "wan21-t2v-1.3b-480p-4090.yaml").read_text())
    doc["spec"]["generation"]["width"] = 840
    answer = review(
        doc["spec"], namespace="team", policy=Policy().for_namespace({}), catalog=DEFAULT_CATALOG
    )
    assert answer.outcome is Outcome.Invalid
    assert answer.message == (
        "spec.generation.width: WanPipeline refuses width 840: height and width must be "
        "divisible by 16 (diffusers 0.42.1 WanPipeline.check_inputs); use width 832 or 848"
    )


def test_cogvideox_15_pads_latent_frames_for_the_denoiser() -> None:
    """CogVideoX 1.5 (``patch_size_t`` 2): 81 frames are 21 latent frames, padded to 22 by
    ``CogVideoXPipeline.__call__``; sized as 85 frames given directly (22 latent frames)."""
    five_b_15 = {"patchSizeT": 2}
    odd = spec(COG, "CogVideoXPipeline", "TextToVideo", 768, 1360, 81, transformer=five_b_15)
    padded = spec(COG, "CogVideoXPipeline", "TextToVideo", 768, 1360, 85, transformer=five_b_15)
    got, want = generation_estimate(odd)[0], generation_estimate(padded)[0]
    assert got.per_gpu == want.per_gpu and got.phases == want.phases
    assert any("numFrames 81 as 85" in n and "patch_size_t 2" in n for n in got.notes)
    # CogVideoX 1.0 (no patch_size_t) runs 81 frames as given
    plain = spec(COG, "CogVideoXPipeline", "TextToVideo", 768, 1360, 81)
    assert not any("numFrames" in n for n in generation_estimate(plain)[0].notes)


#: (repo, class, frames asked, frames the causal VAE decodes, temporal compression)
DECODED_FRAMES = [
    (LTX, "LTXPipeline", 160, 153, 8),
    (LTX, "LTXImageToVideoPipeline", 100, 97, 8),
    (HUNYUAN, "HunyuanVideoPipeline", 130, 129, 4),
    (COG, "CogVideoXPipeline", 50, 49, 4),
    (MOCHI, "MochiPipeline", 24, 19, 6),
]


def test_cogvideox_decodes_an_even_latent_count_to_more_frames_than_asked() -> None:
    """53 frames are (53 - 1) // 4 + 1 = 14 latent frames, which AutoencoderKLCogVideoX
    decodes in pairs to 56 frames: the output, and the estimate, hold 56."""
    got = generation_estimate(spec(COG, "CogVideoXPipeline", "TextToVideo", 480, 720, 53))[0]
    want = generation_estimate(spec(COG, "CogVideoXPipeline", "TextToVideo", 480, 720, 56))[0]
    assert got.per_gpu == want.per_gpu and got.phases == want.phases
    assert [n for n in got.notes if "runs numFrames" in n] == [
        "CogVideoXPipeline runs numFrames 53 as 56 (__call__ makes (num_frames - 1) // 4 + 1 = "
        "14 latent frames, an even count, which AutoencoderKLCogVideoX._decode decodes in pairs "
        "of 8 frames each: 56 frames; diffusers 0.42.1 CogVideoXPipeline.__call__): sized at 56 "
        "frames"
    ]


@pytest.mark.parametrize(("repo", "cls", "asked", "ran", "t"), DECODED_FRAMES)
def test_frames_a_causal_vae_does_not_decode_are_sized_as_it_decodes_them(
    repo: str, cls: str, asked: int, ran: int, t: int
) -> None:
    """(num_frames - 1) // t + 1 latent frames decode to (latent - 1) x t + 1 frames: the
    frames asked beyond them are never made, so the call is sized, and noted, as those."""
    task = "ImageToVideo" if "ImageToVideo" in cls else "TextToVideo"
    got = generation_estimate(spec(repo, cls, task, 512, 768, asked))[0]
    want = generation_estimate(spec(repo, cls, task, 512, 768, ran))[0]
    assert got.per_gpu == want.per_gpu and got.phases == want.phases
    notes = [n for n in got.notes if "runs numFrames" in n]
    assert notes == [
        f"{cls} runs numFrames {asked} as {ran} (__call__ makes (num_frames - 1) // {t} + 1 = "
        f"{(asked - 1) // t + 1} latent frames and the VAE decodes (latent - 1) x {t} + 1 of "
        f"them; diffusers 0.42.1 {cls}.__call__): sized at {ran} frames"
    ]
    assert not any("runs numFrames" in n for n in want.notes)


def test_ltx_and_cogvideox_output_the_frames_their_vae_decodes() -> None:
    """Oracle: tiny LTX-Video and CogVideoX pipelines (CPU, one step) asked for frames that are
    not (latent - 1) x t + 1 return that many frames, the count gpu-sizer sizes."""
    from tests.budget.diffusion.test_latent_channels import CASES, _scheduler

    diffusers = pytest.importorskip("diffusers")
    for cls, asked in (("LTXPipeline", 12), ("CogVideoXPipeline", 7), ("CogVideoXPipeline", 10)):
        d_cls, tiny, v_cls, vae_of, extra, call = CASES[cls]
        vae, tiny = vae_of(4), {**tiny, "in_channels": 4, "out_channels": 4}
        pipe = getattr(diffusers, cls)(
            transformer=getattr(diffusers, d_cls)(**tiny),
            vae=getattr(diffusers, v_cls)(**vae),
            scheduler=_scheduler(cls),
            text_encoder=None,
            tokenizer=None,
            **extra,
        )
        pipe.set_progress_bar_config(disable=True)
        args = {**call(), "num_frames": asked}
        video = pipe(**args, num_inference_steps=1, guidance_scale=1.0, output_type="pt").frames
        rule = SIZE_RULES[cls].frames
        assert rule is not None
        parsed = parse_spec(
            {
                "model": {
                    "name": "tiny",
                    "pipeline": {
                        "class": cls,
                        "components": [
                            {"name": "transformer", "class": d_cls, "config": camel(tiny)},
                            {"name": "vae", "class": v_cls, "config": camel(vae)},
                        ],
                    },
                },
                "generation": {"task": "TextToVideo", "height": 32, "width": 32},
            }
        )
        assert parsed.model.pipeline is not None
        ran, _ = rule(parsed.model.pipeline, asked)
        assert video.shape[1] == ran != asked, (cls, video.shape)


@pytest.mark.parametrize(
    ("cls", "repo", "task"),
    [
        ("StableDiffusion3Pipeline", SD3, "TextToImage"),
        ("StableDiffusion3Img2ImgPipeline", SD3, "ImageToImage"),
        ("FluxPipeline", FLUX, "TextToImage"),
        ("FluxImg2ImgPipeline", FLUX, "ImageToImage"),
    ],
)
def test_text_longer_than_check_inputs_takes_is_refused(cls: str, repo: str, task: str) -> None:
    """SD3's and Flux's ``check_inputs`` raise for ``max_sequence_length`` over 512."""
    base = spec(repo, cls, task, 1024, 1024)
    assert base.generation is not None
    doc = {"model": base.model.model_dump(by_alias=True, mode="json"),
           "generation": base.generation.model_dump(by_alias=True, mode="json")}  # fmt: skip
    parse_spec({**doc, "generation": {**doc["generation"], "maxSequenceLength": 512}})
    with pytest.raises(InvalidWorkload) as caught:
        parse_spec({**doc, "generation": {**doc["generation"], "maxSequenceLength": 513}})
    (problem,) = caught.value.problems
    assert problem.path == "spec.generation.maxSequenceLength"
    assert f"{cls} refuses maxSequenceLength 513: at most 512 tokens" in problem.message
    assert problem.message.endswith("use maxSequenceLength 512 or less")


#: The divisor diffusers 0.42.1's own ``check_inputs`` enforces, per class (``None``: it only
#: warns or does not look); CogVideoX's 8 is tightened to 16 by its unpatchify (module
#: docstring of ``output_size.py``).
CHECK_INPUTS = {
    "StableDiffusionPipeline": 8,
    "StableDiffusionImg2ImgPipeline": None,
    "StableDiffusionXLPipeline": 8,
    "StableDiffusionXLImg2ImgPipeline": None,
    "StableDiffusion3Pipeline": 16,
    "StableDiffusion3Img2ImgPipeline": 16,
    "FluxPipeline": None,
    "FluxImg2ImgPipeline": None,
    "WanPipeline": 16,
    "WanImageToVideoPipeline": 16,
    "HunyuanVideoPipeline": 16,
    "CogVideoXPipeline": 8,
    "CogVideoXImageToVideoPipeline": 8,
    "LTXPipeline": 32,
    "LTXImageToVideoPipeline": 32,
    "MochiPipeline": 8,
    "QwenImagePipeline": None,
}


def _check_inputs(cls_name: str, height: int, width: int) -> None:
    """diffusers' own ``check_inputs`` of ``cls_name``, run unbound on a stand-in ``self``
    with the published pipelines' factors (VAE scale 8, patch 2); raises what it raises."""
    import inspect
    import types

    diffusers = pytest.importorskip("diffusers")
    torch = pytest.importorskip("torch")
    cls = getattr(diffusers, cls_name)
    this = types.SimpleNamespace(
        vae_scale_factor=8,
        patch_size=2,
        vae_scale_factor_spatial=8,
        vae_scale_factor_temporal=4,
        _callback_tensor_inputs=["latents"],
        config=types.SimpleNamespace(boundary_ratio=None),
    )
    given = {"prompt": "a", "strength": 0.5, "num_inference_steps": 4,
             "image": torch.zeros(1, 3, 8, 8), "height": height, "width": width}  # fmt: skip
    kwargs = {
        name: given.get(name)
        for name, p in list(inspect.signature(cls.check_inputs).parameters.items())[1:]
        if name in given or p.default is inspect.Parameter.empty
    }
    cls.check_inputs(this, **kwargs)


@pytest.mark.parametrize("cls", sorted(CHECK_INPUTS))
def test_refusals_match_diffusers_check_inputs(cls: str) -> None:
    """Oracle: diffusers raises ValueError exactly off its divisor, and every size it refuses
    the spec refuses too (with the published pipelines' components)."""
    assert set(CHECK_INPUTS) == set(SIZE_RULES)
    divisor = CHECK_INPUTS[cls]
    published = {r[0]: (r[1], r[2], r[3]) for r in REFUSED}
    published.update((r[0], (r[1], r[2], r[4][2])) for r in ROUNDED if r[0] not in published)
    repo, task, frames = published[cls]
    for side in (512 + 4, 512 + 8, 512 + 16, 512 + 32):
        if divisor is not None and side % divisor != 0:
            with pytest.raises(ValueError, match="divisible by"):
                _check_inputs(cls, side, 512)
            with pytest.raises(InvalidWorkload):
                spec(repo, cls, task, side, 512, frames)
        else:
            _check_inputs(cls, side, 512)
            if cls.startswith(("CogVideoX", "Mochi")) and side % 16:
                continue  # refused by the unpatchify, not check_inputs
            spec(repo, cls, task, side, 512, frames)


def test_cogvideox_odd_latent_side_cannot_run() -> None:
    """Oracle for CogVideoX's 16: diffusers' CogVideoXTransformer3DModel (tiny config with
    CogVideoX-5b's rotary embeddings, CPU) given an odd latent height (a side divisible by 8,
    not by 16) returns one latent row fewer than it was given, so the scheduler step cannot
    combine its output with the latents."""
    diffusers = pytest.importorskip("diffusers")
    torch = pytest.importorskip("torch")
    model = diffusers.CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        time_embed_dim=32, text_embed_dim=32, num_layers=1, sample_width=8, sample_height=8,
        sample_frames=5, patch_size=2, use_rotary_positional_embeddings=True,
    )  # fmt: skip
    text, t = torch.randn(1, 7, 32), torch.tensor([1])
    with torch.no_grad():
        for height, returned in ((6, 6), (5, 4)):
            latents = torch.randn(1, 2, 4, height, 6)
            out = model(hidden_states=latents, encoder_hidden_states=text, timestep=t).sample
            assert out.shape[3] == returned


#: (repo, class, task, height, width, frames, the denoiser's patchSize, the divisor it makes)
PATCH_TOO_LARGE = [
    (WAN, "WanPipeline", "TextToVideo", 720, 1280, 81, [1, 1000, 1000], 8000),
    (WAN_I2V, "WanImageToVideoPipeline", "ImageToVideo", 480, 832, 81, [1, 64, 64], 512),
    (SD3, "StableDiffusion3Pipeline", "TextToImage", 1024, 1024, 1, 1000, 8000),
    (SD3, "StableDiffusion3Pipeline", "TextToImage", 1000, 1024, 1, 1000, 8000),
    (COG, "CogVideoXPipeline", "TextToVideo", 480, 720, 49, 64, 512),
]


@pytest.mark.parametrize(
    ("repo", "cls", "task", "height", "width", "frames", "patch", "divisor"), PATCH_TOO_LARGE
)
def test_a_patch_larger_than_every_side_is_refused_at_patch_size(
    repo: str,
    cls: str,
    task: str,
    height: int,
    width: int,
    frames: int,
    patch: int | list[int],
    divisor: int,
) -> None:
    """A denoiser patch side that makes every multiple the pipeline runs larger than the size
    asked is the config's fault, not the size's: the refusal names patchSize (and where it is)
    rather than sending the user to an 8000-pixel height, and no side is blamed besides."""
    spec(repo, cls, task, height // 16 * 16, width // 16 * 16, frames)  # runs as published
    with pytest.raises(InvalidWorkload) as caught:
        spec(repo, cls, task, height, width, frames, transformer={"patchSize": patch})
    (problem,) = caught.value.problems
    names = [name for name, _, _ in PIPELINES[repo][1]]
    assert problem.path == (
        f"spec.model.pipeline.components[{names.index('transformer')}].config.patchSize"
    )
    side = patch[1] if isinstance(patch, list) else patch
    assert f"multiples of {divisor} pixels" in problem.message
    assert f"patch side {side}" in problem.message and "diffusers 0.42.1" in problem.message
    assert problem.message.endswith(
        "use the patchSize of the checkpoint the weights come from, or sides of "
        f"{divisor} pixels or more"
    )


def test_a_small_side_is_still_the_side_s_fault_under_a_published_patch() -> None:
    """With the published patch (2) a side below the divisor is the side's fault, and so is a
    side under the published divisor with a larger patch."""
    for transformer in (None, {"patchSize": [1, 1000, 1000]}):
        with pytest.raises(InvalidWorkload) as caught:
            spec(WAN, "WanPipeline", "TextToVideo", 8, 832, 81, transformer=transformer)
        assert [p.path for p in caught.value.problems] == ["spec.generation.height"]
    # a larger patch that the size is a multiple of runs
    spec(WAN, "WanPipeline", "TextToVideo", 480, 832, 81, transformer={"patchSize": [1, 4, 4]})


def test_a_wan_patch_larger_than_the_latent_fails_in_diffusers() -> None:
    """Oracle: diffusers' WanTransformer3DModel (tiny config, CPU) patchifies with a Conv3d
    whose kernel is the patch, so a patch side larger than the latent side cannot run, while
    the published (1, 2, 2) runs on the same latents."""
    diffusers = pytest.importorskip("diffusers")
    torch = pytest.importorskip("torch")
    tiny = TINY_WAN
    latents, text, t = torch.randn(1, 4, 1, 4, 4), torch.randn(1, 3, 16), torch.ones(1)
    with torch.no_grad():
        ran = diffusers.WanTransformer3DModel(**tiny, patch_size=(1, 2, 2))(
            hidden_states=latents, timestep=t, encoder_hidden_states=text
        )
        assert ran.sample.shape == latents.shape
        with pytest.raises(RuntimeError):
            diffusers.WanTransformer3DModel(**tiny, patch_size=(1, 8, 8))(
                hidden_states=latents, timestep=t, encoder_hidden_states=text
            )


#: (repo, class, task, frames refused, the transformer config, the frames the message offers)
TEMPORAL_PATCH = [
    (WAN, "WanPipeline", "TextToVideo", 81, {"patchSize": [2, 2, 2]}, "77 or 85"),
    (WAN_I2V, "WanImageToVideoPipeline", "ImageToVideo", 80, {"patchSize": [2, 2, 2]}, "77 or 85"),
    (HUNYUAN, "HunyuanVideoPipeline", "TextToVideo", 129, {"patchSizeT": 2}, "125 or 133"),
    (HUNYUAN, "HunyuanVideoPipeline", "TextToVideo", 61, {"patchSizeT": 3}, "57 or 69"),
]


@pytest.mark.parametrize(("repo", "cls", "task", "frames", "transformer", "fix"), TEMPORAL_PATCH)
def test_latent_frames_the_temporal_patch_does_not_divide_are_refused(
    repo: str, cls: str, task: str, frames: int, transformer: dict[str, Any], fix: str
) -> None:
    """Wan and HunyuanVideo patchify the latent frames with floor division and nothing pads
    them (CogVideoX 1.5 pads, above): a frame count whose latent frames the temporal patch
    does not divide is refused at numFrames with the counts that run, which are accepted."""
    with pytest.raises(InvalidWorkload) as caught:
        spec(repo, cls, task, 480, 832, frames, transformer=transformer)
    (problem,) = caught.value.problems
    assert problem.path == "spec.generation.numFrames"
    assert f"numFrames {frames}" in problem.message and "diffusers 0.42.1" in problem.message
    assert f"use numFrames {fix}, or the patchSize" in problem.message
    for good in fix.split(" or "):
        spec(repo, cls, task, 480, 832, int(good), transformer=transformer)


def test_hunyuanvideo_sides_are_multiples_of_its_latent_patch() -> None:
    """HunyuanVideoPipeline.check_inputs takes multiples of 16, but a patch side of 4 also
    needs latent sides divisible by 4: 32 pixels."""
    with pytest.raises(InvalidWorkload) as caught:
        spec(
            HUNYUAN,
            "HunyuanVideoPipeline",
            "TextToVideo",
            720,
            1280,
            61,
            transformer={"patchSize": 4},
        )
    (problem,) = caught.value.problems
    assert problem.path == "spec.generation.height"
    assert "divisible by 32" in problem.message and problem.message.endswith("704 or 736")
    spec(
        HUNYUAN, "HunyuanVideoPipeline", "TextToVideo", 704, 1280, 61, transformer={"patchSize": 4}
    )


def test_a_patch_the_latents_are_not_a_multiple_of_returns_fewer_latents() -> None:
    """Oracle for both rules above: diffusers' WanTransformer3DModel and
    HunyuanVideoTransformer3DModel (tiny configs, CPU) given latents whose frames or sides
    their patch does not divide return fewer frames or rows than they were given, so the
    scheduler step cannot combine the output with the latents; with a patch that divides
    them they return the latents' shape."""
    diffusers = pytest.importorskip("diffusers")
    torch = pytest.importorskip("torch")
    wan = TINY_WAN
    hunyuan = {**TINY_HUNYUAN, "rope_axes_dim": (2, 2, 4)}
    text, t = torch.randn(1, 3, 16), torch.ones(1)

    def wan_out(patch: tuple[int, int, int], latents: Any) -> tuple[int, ...]:
        model = diffusers.WanTransformer3DModel(**wan, patch_size=patch)
        out = model(hidden_states=latents, timestep=t, encoder_hidden_states=text)
        return tuple(out.sample.shape)

    def hunyuan_out(p: int, p_t: int, latents: Any) -> tuple[int, ...]:
        model = diffusers.HunyuanVideoTransformer3DModel(**hunyuan, patch_size=p, patch_size_t=p_t)
        out = model(
            hidden_states=latents, timestep=t, encoder_hidden_states=text,
            encoder_attention_mask=torch.ones(1, 3), pooled_projections=torch.randn(1, 8),
            guidance=torch.ones(1),
        )  # fmt: skip
        return tuple(out.sample.shape)

    with torch.no_grad():
        odd_frames, even_frames = torch.randn(1, 4, 3, 4, 4), torch.randn(1, 4, 4, 4, 4)
        assert wan_out((2, 2, 2), odd_frames) == (1, 4, 2, 4, 4)
        assert wan_out((2, 2, 2), even_frames) == (1, 4, 4, 4, 4)
        assert hunyuan_out(2, 2, odd_frames) == (1, 4, 2, 4, 4)
        assert hunyuan_out(2, 2, even_frames) == (1, 4, 4, 4, 4)
        assert hunyuan_out(4, 1, torch.randn(1, 4, 1, 6, 8)) == (1, 4, 1, 4, 8)
        assert hunyuan_out(4, 1, torch.randn(1, 4, 1, 8, 8)) == (1, 4, 1, 8, 8)
