"""How the generation estimate follows the pipeline's settings: residency under each offload
mode, guidance, parallelism, VAE options, and what it cannot count."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.budget.diffusion.specs import pipeline_spec

from gpu_sizer.api import EstimateStatus
from gpu_sizer.budget import estimate
from gpu_sizer.budget.diffusion import generation_estimate
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

WAN14 = "Wan-AI/Wan2.1-T2V-14B-Diffusers"
FLUX = "black-forest-labs/FLUX.1-dev"
VIDEO: dict[str, Any] = {"task": "TextToVideo", "height": 480, "width": 832, "numFrames": 81}
GIB = 1 << 30


def _phase(est: EstimateStatus, name: str) -> Any:
    assert est.phases is not None
    return next(p for p in est.phases if p.name == name)


def test_phases_and_peak_are_reported() -> None:
    est = estimate(pipeline_spec(WAN14, **VIDEO))
    assert [p.name for p in est.phases or []] == ["TextEncode", "Denoise", "VaeDecode"]
    peak = max(est.phases or [], key=lambda p: p.total_bytes)
    assert est.peak_phase == peak.name
    assert est.per_gpu.total_bytes == peak.total_bytes
    assert est.parameter_count > 14_288_491_584 + 5_680_910_336  # transformer + UMT5 + VAE


def test_without_offload_every_component_is_resident_in_every_phase() -> None:
    est = estimate(pipeline_spec(WAN14, **VIDEO))
    weights = {p.name: p.weights_bytes for p in est.phases or []}
    assert len(set(weights.values())) == 1


def test_model_offload_keeps_only_the_running_model() -> None:
    none = estimate(pipeline_spec(WAN14, **VIDEO))
    model = estimate(pipeline_spec(WAN14, offload="Model", **VIDEO))
    assert _phase(model, "Denoise").running == "transformer"
    # bf16 transformer alone (fp32-kept modules included), not the encoder too
    assert 26 * GIB < _phase(model, "Denoise").weights_bytes < 27 * GIB
    assert _phase(model, "VaeDecode").weights_bytes < 1 * GIB
    assert model.per_gpu.total_bytes < none.per_gpu.total_bytes


def test_sequential_and_group_offload_stream_weights() -> None:
    model = _phase(estimate(pipeline_spec(WAN14, offload="Model", **VIDEO)), "Denoise")
    group = _phase(estimate(pipeline_spec(WAN14, offload="Group", **VIDEO)), "Denoise")
    sequential = _phase(estimate(pipeline_spec(WAN14, offload="Sequential", **VIDEO)), "Denoise")
    assert sequential.weights_bytes < group.weights_bytes < model.weights_bytes
    # block level, one block per group: the unmatched modules and one of the 40 blocks
    assert group.weights_bytes < model.weights_bytes / 20


def test_a_component_on_the_cpu_holds_nothing_on_the_gpu() -> None:
    on_gpu = estimate(pipeline_spec(WAN14, offload="Model", **VIDEO))
    on_cpu = estimate(
        pipeline_spec(
            WAN14, components={"text_encoder": {"device": "Cpu"}}, offload="Model", **VIDEO
        )
    )
    assert _phase(on_cpu, "TextEncode").weights_bytes == 0
    assert _phase(on_gpu, "TextEncode").weights_bytes > 10 * GIB


def test_batched_guidance_doubles_the_denoiser_batch() -> None:
    image = {"task": "TextToImage", "height": 1024, "width": 1024}
    sd3 = "stabilityai/stable-diffusion-3.5-large"
    with_cfg = _phase(estimate(pipeline_spec(sd3, **image)), "Denoise").activation_bytes
    without = _phase(
        estimate(pipeline_spec(sd3, classifierFreeGuidance=False, **image)), "Denoise"
    ).activation_bytes
    assert 1.8 < with_cfg / without < 2.1


def test_sequential_guidance_does_not_grow_one_pass() -> None:
    # Wan calls the transformer twice per step; one pass holds one sample
    with_cfg = _phase(estimate(pipeline_spec(WAN14, **VIDEO)), "Denoise").activation_bytes
    without = _phase(
        estimate(pipeline_spec(WAN14, classifierFreeGuidance=False, **VIDEO)), "Denoise"
    ).activation_bytes
    assert with_cfg == without


def test_sequence_parallelism_splits_tokens_and_adds_gpus() -> None:
    one = estimate(pipeline_spec(WAN14, height=720, width=1280, task="TextToVideo", numFrames=81))
    four = estimate(
        pipeline_spec(
            WAN14, height=720, width=1280, task="TextToVideo", numFrames=81,
            parallelism={"ulyssesDegree": 4},
        )
    )  # fmt: skip
    assert four.gpu_count == 4 and one.gpu_count == 1
    d1, d4 = _phase(one, "Denoise"), _phase(four, "Denoise")
    assert d4.activation_bytes < d1.activation_bytes / 2.5
    assert d4.weights_bytes == d1.weights_bytes


def test_denoiser_fsdp_shards_its_weights() -> None:
    par = {"ulyssesDegree": 4, "denoiserFsdp": True}
    plain = _phase(
        estimate(pipeline_spec(WAN14, parallelism={"ulyssesDegree": 4}, **VIDEO)), "Denoise"
    )
    fsdp = _phase(estimate(pipeline_spec(WAN14, parallelism=par, **VIDEO)), "Denoise")
    # a quarter of the transformer plus two unsharded blocks, the encoder and VAE whole
    assert plain.weights_bytes - fsdp.weights_bytes > 18 * GIB


def test_cfg_parallel_gives_each_gpu_one_branch() -> None:
    image = {"task": "TextToImage", "height": 1024, "width": 1024}
    sd3 = "stabilityai/stable-diffusion-3.5-large"
    batched = estimate(pipeline_spec(sd3, **image))
    split = estimate(pipeline_spec(sd3, parallelism={"cfgParallel": True}, **image))
    assert split.gpu_count == 2
    assert _phase(split, "Denoise").activation_bytes < _phase(batched, "Denoise").activation_bytes


def test_vae_tiling_removes_hunyuan_videos_quadratic_attention_mask() -> None:
    repo = "hunyuanvideo-community/HunyuanVideo"
    video = {"task": "TextToVideo", "height": 720, "width": 1280, "numFrames": 129}
    whole = _phase(estimate(pipeline_spec(repo, offload="Model", **video)), "VaeDecode")
    tiled = _phase(
        estimate(pipeline_spec(repo, offload="Model", vaeTiling=True, **video)), "VaeDecode"
    )
    assert whole.activation_bytes > 50 * GIB > 10 * GIB > tiled.activation_bytes


def test_a_materialised_attention_matrix_is_counted() -> None:
    native = estimate(pipeline_spec(WAN14, **VIDEO))
    math = estimate(pipeline_spec(WAN14, attentionBackend="math", **VIDEO))
    assert (
        _phase(math, "Denoise").activation_bytes > 20 * _phase(native, "Denoise").activation_bytes
    )


def test_an_unknown_component_class_makes_the_estimate_incomplete() -> None:
    spec = pipeline_spec(FLUX, task="TextToImage", height=1024, width=1024)
    assert spec.model.pipeline is not None
    extra = spec.model.pipeline.components[0].model_copy(
        update={
            "name": "image_encoder",
            "class_name": "MyImageEncoderModel",
            "config": {},
        }
    )
    pipeline = spec.model.pipeline.model_copy(
        update={"components": [*spec.model.pipeline.components, extra]}
    )
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"pipeline": pipeline})})
    _, missing = generation_estimate(spec)
    assert [m.component for m in missing] == ["weightsBytes"]
    assert "image_encoder" in missing[0].message
    listed = estimate(spec).missing_components
    assert [m.component for m in listed] == ["weightsBytes"]
    assert assess(spec).verdict is Verdict.Incomplete


def test_an_unknown_pipeline_class_makes_the_estimate_incomplete() -> None:
    spec = pipeline_spec(FLUX, task="TextToImage", height=1024, width=1024)
    assert spec.model.pipeline is not None
    pipeline = spec.model.pipeline.model_copy(update={"class_name": "FluxKontextPipeline"})
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"pipeline": pipeline})})
    _, missing = generation_estimate(spec)
    assert missing and "FluxKontextPipeline" in missing[0].message
    assert assess(spec).verdict is Verdict.Incomplete


@settings(max_examples=25, deadline=None)
@given(
    frames=st.integers(min_value=0, max_value=40),
    more=st.integers(min_value=1, max_value=20),
    offload=st.sampled_from(["None", "Model", "Sequential", "Group"]),
)
def test_more_frames_never_need_less(frames: int, more: int, offload: str) -> None:
    def total(n: int) -> int:
        spec = pipeline_spec(WAN14, task="TextToVideo", height=480, width=832,
                             numFrames=4 * n + 1, offload=offload)  # fmt: skip
        return estimate(spec).per_gpu.total_bytes

    assert total(frames) <= total(frames + more)


def test_an_option_the_pipeline_class_does_not_take_is_ignored_and_said_so() -> None:
    """DiffusionPipeline.from_pretrained drops model_index.json entries its class's __init__
    does not name ("not expected and will be ignored"); the estimate does too, in a note, and
    sizes the call as if they were absent."""
    from tests.budget.diffusion.specs import pipeline_spec

    from gpu_sizer.api import parse_spec
    from gpu_sizer.budget import estimate

    plain = pipeline_spec(
        "black-forest-labs/FLUX.1-dev", task="TextToImage", height=1024, width=1024
    )
    doc = plain.model_dump(by_alias=True, mode="json", exclude_none=True)
    doc["model"]["pipeline"]["config"] = {"boundaryRatio": 0.5, "someNewOption": 3}
    est = estimate(parse_spec(doc))
    assert any(
        "boundaryRatio, someNewOption not an option of FluxPipeline" in n for n in est.notes or []
    )
    assert est.per_gpu == estimate(plain).per_gpu
    sdxl = pipeline_spec(
        "stabilityai/stable-diffusion-xl-base-1.0", "float16", task="TextToImage", height=1024,
        width=1024,
    )  # fmt: skip
    assert sdxl.model.pipeline is not None and sdxl.model.pipeline.config
    assert not any("not an option" in n for n in estimate(sdxl).notes or [])


def test_settings_the_call_never_reads_are_noted_and_change_nothing() -> None:
    """maxSequenceLength for a pipeline whose __call__ takes none (SDXL's CLIPs encode 77
    tokens), and groupOffload with no group-offloaded component, are said to be ignored; the
    same settings where they apply are not."""
    from gpu_sizer.api import parse_spec

    sdxl = pipeline_spec(
        "stabilityai/stable-diffusion-xl-base-1.0", "float16", task="TextToImage", height=1024,
        width=1024,
    )  # fmt: skip
    doc = sdxl.model_dump(by_alias=True, mode="json", exclude_none=True)
    doc["generation"] |= {"maxSequenceLength": 512, "groupOffload": {"useStream": True}}
    est = estimate(parse_spec(doc))
    notes = [n for n in est.notes or [] if n.endswith(": ignored")]
    assert notes == [
        "spec.generation.maxSequenceLength 512 is not an argument of "
        "StableDiffusionXLPipeline.__call__ in diffusers 0.42.1 (its CLIP encoders take 77 "
        "tokens): ignored",
        "spec.generation.groupOffload applies only with offload Group (here None, and no "
        "component sets offload Group): ignored",
    ]
    assert est.per_gpu == estimate(sdxl).per_gpu
    doc["generation"]["offload"] = "Group"
    grouped = [n for n in estimate(parse_spec(doc)).notes or [] if n.endswith(": ignored")]
    assert grouped == notes[:1]
    flux = pipeline_spec(FLUX, task="TextToImage", height=1024, width=1024, maxSequenceLength=256)
    assert not any(n.endswith(": ignored") for n in estimate(flux).notes or [])


def test_a_denoiser_on_the_cpu_is_refused() -> None:
    """device Cpu suits a text encoder whose embeddings are made apart (Wan's --t5_cpu); a
    denoiser on the CPU gets its latents on the GPU the pipeline executes on and fails, so the
    spec is refused at its device."""
    import pytest

    from gpu_sizer.api import InvalidWorkload, parse_spec

    spec = pipeline_spec(WAN14, **VIDEO)
    doc = spec.model_dump(by_alias=True, mode="json", exclude_none=True)
    names = [c["name"] for c in doc["model"]["pipeline"]["components"]]
    doc["model"]["pipeline"]["components"][names.index("transformer")]["device"] = "Cpu"
    with pytest.raises(InvalidWorkload) as caught:
        parse_spec(doc)
    (problem,) = caught.value.problems
    assert problem.path == f"spec.model.pipeline.components[{names.index('transformer')}].device"
    assert problem.message.startswith(
        "transformer (WanTransformer3DModel) cannot run on the CPU beside a GPU pipeline"
    )
    t5 = pipeline_spec(WAN14, components={"text_encoder": {"device": "Cpu"}}, **VIDEO)
    assert estimate(t5).per_gpu.weights_bytes < estimate(spec).per_gpu.weights_bytes


def test_a_component_the_pipeline_does_not_take_leaves_the_estimate_incomplete() -> None:
    """from_pretrained loads only the __init__'s components: Flux's transformer renamed unet
    is never loaded (the pipeline then has no transformer), so it is not sized as if it ran."""
    from gpu_sizer.api import parse_spec

    spec = pipeline_spec(FLUX, task="TextToImage", height=1024, width=1024)
    doc = spec.model_dump(by_alias=True, mode="json", exclude_none=True)
    names = [c["name"] for c in doc["model"]["pipeline"]["components"]]
    doc["model"]["pipeline"]["components"][names.index("transformer")]["name"] = "unet"
    est = estimate(parse_spec(doc))
    renamed = [m for m in est.missing_components if m.fields[0].endswith(".name")]
    assert [m.message for m in renamed] == [
        "component unet: FluxPipeline.__init__ takes no unet (diffusers 0.42.1), so the "
        "pipeline never loads or runs it"
    ]
    assert renamed[0].fix == (
        "name each component as the pipeline's __init__ does: vae, text_encoder, "
        "text_encoder_2, transformer, image_encoder"
    )


def test_a_parameter_count_on_a_sized_class_is_noted_as_ignored() -> None:
    spec = pipeline_spec(WAN14, components={"vae": {"parameterCount": 5}}, **VIDEO)
    notes = [n for n in estimate(spec).notes or [] if "parameterCount" in n]
    assert len(notes) == 1
    assert "parameterCount 5 ignored: AutoencoderKLWan is counted from its config (" in notes[0]


def test_a_misspelt_class_gets_the_closest_supported_one() -> None:
    spec = pipeline_spec(WAN14, components={"vae": {"class": "AutoencoderKLwan"}}, **VIDEO)
    fixes = [m.fix for m in estimate(spec).missing_components]
    assert any(f.startswith("did you mean AutoencoderKLWan? ") for f in fixes), fixes


def test_denoiser_fsdp_that_cannot_apply_or_beside_offload_is_noted() -> None:
    alone = pipeline_spec(WAN14, parallelism={"denoiserFsdp": True}, **VIDEO)
    assert any("denoiserFsdp shards over the parallel GPUs" in n for n in estimate(alone).notes)
    with_offload = pipeline_spec(
        WAN14, parallelism={"denoiserFsdp": True, "ulyssesDegree": 2}, offload="Sequential",
        **VIDEO,
    )  # fmt: skip
    notes = [n for n in estimate(with_offload).notes or [] if "denoiserFsdp with" in n]
    assert notes == [
        "denoiserFsdp with the denoiser's offload Sequential: its shard is sized whole on "
        "every GPU while it runs, not streamed (offload hooks over an FSDP-sharded module are "
        "not modelled), an upper bound"
    ]


def test_a_pipeline_without_its_text_encoder_is_noted() -> None:
    spec = pipeline_spec(WAN14, **VIDEO)
    doc = spec.model_dump(by_alias=True, mode="json", exclude_none=True)
    comps = doc["model"]["pipeline"]["components"]
    doc["model"]["pipeline"]["components"] = [c for c in comps if c["name"] != "text_encoder"]
    from gpu_sizer.api import parse_spec

    notes = [n for n in estimate(parse_spec(doc)).notes or [] if n.startswith("no text_encoder")]
    assert notes == [
        "no text_encoder: WanPipeline then encodes no prompt, and its call needs the embeddings "
        "given (prompt_embeds), made elsewhere; their encoder is not counted"
    ]
    assert not any(n.startswith("no text_encoder") for n in estimate(spec).notes or [])
