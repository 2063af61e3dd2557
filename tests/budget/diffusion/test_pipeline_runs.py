"""Pipeline settings that each validate but that diffusers 0.42.1 cannot run together are
refused with the spec, naming the field and the fix: a Wan 2.2 pipeline missing the expert its
boundaryRatio sends timesteps to, group offloading beside model or sequential offloading, and a
Ulysses degree that does not divide the denoiser's heads. Tiny pipelines on the CPU are the
oracle where a forward shows the failure; diffusers' own checks are called where they raise
before any forward."""

from __future__ import annotations

import copy
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.budget.diffusion.conftest import TINY_HUNYUAN, TINY_WAN, tiny_wan_vae

from gpu_sizer.api import InvalidWorkload, parse_spec
from gpu_sizer.api.spec.pipeline_runs import ENCODER_CLASSES, PIPELINE_CLASSES
from gpu_sizer.budget.diffusion import generation_estimate
from gpu_sizer.budget.diffusion.fixes import generation_candidates
from gpu_sizer.budget.diffusion.pipelines import PIPELINES
from gpu_sizer.sizing.assessment import parallel_path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _example(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())["spec"]
    return spec


def _without(spec: dict[str, Any], name: str, **options: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    pipeline = out["model"]["pipeline"]
    pipeline["components"] = [c for c in pipeline["components"] if c["name"] != name]
    pipeline.setdefault("config", {}).update(options)
    return out


def _refused(spec: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidWorkload) as caught:
        parse_spec(spec)
    return {p.path: p.message for p in caught.value.problems}


WAN22 = "wan22-t2v-a14b-720p-too-big-for-48gb.yaml"


def test_a_wan_22_pipeline_missing_an_expert_its_boundary_sends_steps_to_is_refused() -> None:
    spec = _example(WAN22)
    assert spec["model"]["pipeline"]["config"]["boundaryRatio"] == 0.875
    parse_spec(spec)
    low = _refused(_without(spec, "transformer_2"))
    assert list(low) == ["spec.model.pipeline.components"]
    assert "runs transformer_2 (the low-noise expert)" in low["spec.model.pipeline.components"]
    assert "boundaryRatio null" in low["spec.model.pipeline.components"]
    high = _refused(_without(spec, "transformer"))
    assert "runs transformer (the high-noise expert)" in high["spec.model.pipeline.components"]
    assert "boundaryRatio 1.0" in high["spec.model.pipeline.components"]
    # the fixes the messages offer are accepted: one expert alone, as diffusers runs it
    parse_spec(_without(spec, "transformer_2", boundaryRatio=None))
    parse_spec(_without(spec, "transformer", boundaryRatio=1.0))


def test_a_wan_pipeline_missing_an_expert_fails_in_diffusers() -> None:
    """Oracle: a tiny WanPipeline (CPU, two steps on Wan 2.2's UniPC flow scheduler) with
    boundary_ratio 0.875 (timesteps 999, then 750) runs with both experts and fails at the
    step that needs a missing one; with transformer=None and boundary_ratio 1.0 the low-noise
    expert runs every step."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    tiny, vae = TINY_WAN, tiny_wan_vae(4)

    def runs(transformer: bool, transformer_2: bool, ratio: float | None) -> bool:
        torch.manual_seed(0)
        pipe = diffusers.WanPipeline(
            tokenizer=None,
            text_encoder=None,
            vae=diffusers.AutoencoderKLWan(**vae),
            scheduler=diffusers.UniPCMultistepScheduler(
                prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0
            ),
            transformer=diffusers.WanTransformer3DModel(**tiny) if transformer else None,
            transformer_2=diffusers.WanTransformer3DModel(**tiny) if transformer_2 else None,
            boundary_ratio=ratio,
        )
        pipe.set_progress_bar_config(disable=True)
        call = {"prompt_embeds": torch.randn(1, 3, 16), "height": 16, "width": 16}
        try:
            pipe(**call, num_frames=5, num_inference_steps=2, guidance_scale=1.0, output_type="pt")
        except AttributeError:  # 'NoneType' object has no attribute ...
            return False
        return True

    assert runs(True, True, 0.875)
    assert not runs(True, False, 0.875)
    assert not runs(False, True, 0.875)
    assert runs(False, True, 1.0)
    assert runs(True, False, None)


def test_group_offloading_beside_model_or_sequential_offloading_is_refused() -> None:
    spec = _example("wan21-t2v-1.3b-480p-4090.yaml")
    names = [c["name"] for c in spec["model"]["pipeline"]["components"]]
    t = names.index("transformer")
    for pipeline_wide, own in (("Model", "Group"), ("Sequential", "Group"), ("Group", "Model")):
        mixed = copy.deepcopy(spec)
        mixed["generation"]["offload"] = pipeline_wide
        mixed["model"]["pipeline"]["components"][t]["offload"] = own
        problems = _refused(mixed)
        (path,) = problems
        assert path.startswith("spec.model.pipeline.components[") and path.endswith("].offload")
        assert "_maybe_raise_error_if_group_offload_active" in problems[path]
    # one mode for all, or Group beside components not offloaded, runs
    calm = copy.deepcopy(spec)
    calm["generation"]["offload"] = "Group"
    calm["model"]["pipeline"]["components"][t]["offload"] = "None"
    parse_spec(calm)


def test_diffusers_refuses_model_offloading_over_a_group_offloaded_component() -> None:
    """Oracle: diffusers raises ValueError for model or sequential offload of a pipeline with
    a group-offloaded component (the check both call first)."""
    torch = pytest.importorskip("torch")
    diffusers = pytest.importorskip("diffusers")
    layer = torch.nn.Linear(2, 2)
    diffusers.hooks.apply_group_offloading(
        layer, onload_device=torch.device("cpu"), offload_type="leaf_level"
    )
    pipe = diffusers.DiffusionPipeline()
    pipe.register_modules(transformer=layer)
    with pytest.raises(ValueError, match="group offloading"):
        pipe._maybe_raise_error_if_group_offload_active(raise_error=True, module=layer)


def test_diffusers_refuses_group_offloading_over_model_offload_hooks() -> None:
    """Oracle, the other order: group offloading a module that carries accelerate's CpuOffload
    hook (what enable_model_cpu_offload adds) raises ValueError."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    hooks = pytest.importorskip("accelerate.hooks")
    from diffusers.hooks import group_offloading

    hooked = torch.nn.Linear(2, 2)
    hooks.add_hook_to_module(hooked, hooks.CpuOffload())
    with pytest.raises(ValueError, match="alternative offloading strategy"):
        group_offloading._raise_error_if_accelerate_model_or_sequential_hook_present(hooked)


def test_offload_fixes_never_mix_group_with_model_offloading() -> None:
    spec = _example(WAN22)
    names = [c["name"] for c in spec["model"]["pipeline"]["components"]]
    spec["model"]["pipeline"]["components"][names.index("text_encoder")]["offload"] = "Group"
    spec["generation"]["offload"] = "None"
    parsed = parse_spec(spec)
    offered = {(path, value) for path, value, _, _ in generation_candidates(parsed)}
    assert ("spec.generation.offload", "Group") in offered
    assert ("spec.generation.offload", "Model") not in offered
    assert ("spec.generation.offload", "Sequential") not in offered


def test_a_ulysses_degree_that_does_not_divide_the_heads_is_refused() -> None:
    spec = _example("wan21-t2v-1.3b-480p-4090.yaml")  # 12 attention heads
    for degree in (2, 3, 4, 6):
        ok = copy.deepcopy(spec)
        ok["generation"]["parallelism"] = {"ulyssesDegree": degree}
        parse_spec(ok)
    for degree in (5, 8):
        bad = copy.deepcopy(spec)
        bad["generation"]["parallelism"] = {"ulyssesDegree": degree}
        problems = _refused(bad)
        message = problems["spec.generation.parallelism.ulyssesDegree"]
        assert (
            f"ulyssesDegree {degree} does not divide" in message and "12 attention heads" in message
        )
        assert message.endswith(
            "ulyssesDegree to 2 or 3 or 4 or 6 (ringDegree splits the sequence without the heads)"
        )


def test_ulysses_fixes_offer_only_degrees_every_expert_divides() -> None:
    """Both Wan 2.2 experts run in one call, so a Ulysses degree must divide each one's heads:
    with the low-noise expert at 20 heads (the high-noise one keeps 40), 8 is not offered."""
    spec = _example(WAN22)
    names = [c["name"] for c in spec["model"]["pipeline"]["components"]]
    low = spec["model"]["pipeline"]["components"][names.index("transformer_2")]["config"]
    low["numAttentionHeads"] = 20
    parsed = parse_spec(spec)
    offered = {
        value
        for path, value, _, _ in generation_candidates(parsed)
        if path == "spec.generation.parallelism.ulyssesDegree"
    }
    assert offered == {2, 4}
    for degree in offered:
        changed = copy.deepcopy(spec)
        changed["generation"]["parallelism"] = {"ulyssesDegree": degree}
        parse_spec(changed)


def test_diffusers_ulysses_attention_splits_the_heads() -> None:
    """Oracle for the rule: TemplatedUlyssesAttention.forward reshapes (B, S, H, D) query,
    key and value to (B, S, world_size, H // world_size, D), which fails unless world_size
    divides H (the reshape is checked here on the tensor it builds, without a process group)."""
    torch = pytest.importorskip("torch")
    import inspect

    from diffusers.models import attention_dispatch

    source = inspect.getsource(attention_dispatch.TemplatedUlyssesAttention.forward)
    assert "H_LOCAL = H // world_size" in source
    assert "query.reshape(B, S_Q_LOCAL, world_size, H_LOCAL, D)" in source
    query = torch.randn(1, 4, 12, 8)
    query.reshape(1, 4, 4, 12 // 4, 8)
    with pytest.raises(RuntimeError):
        query.reshape(1, 4, 8, 12 // 8, 8)


def test_a_pod_wider_than_a_node_names_the_generation_parallelism() -> None:
    spec = parse_spec(
        {**_example("wan21-t2v-1.3b-480p-4090.yaml"), "generation": {
            **_example("wan21-t2v-1.3b-480p-4090.yaml")["generation"],
            "parallelism": {"ulyssesDegree": 4, "ringDegree": 4},
        }}
    )  # fmt: skip
    assert parallel_path(spec) == "spec.generation.parallelism"
    from gpu_sizer.catalog import DEFAULT_CATALOG
    from gpu_sizer.sizing.workers import bound_problem

    h100 = next(c for c in DEFAULT_CATALOG if c.gpus_per_node == 8)
    problem = bound_problem(spec, h100, None)
    assert problem is not None and "ulyssesDegree x ringDegree" in problem


def test_an_image_pipeline_given_a_video_task_is_sized_as_the_image_it_makes() -> None:
    """FluxPipeline's __call__ has no num_frames: a TextToVideo task with 81 frames is sized
    as the one image it makes, with a note, not as 81 frames of activations."""
    spec = _example("flux1-dev-1024.yaml")
    video = copy.deepcopy(spec)
    video["generation"].update({"task": "TextToVideo", "numFrames": 81})
    image, _ = generation_estimate(parse_spec(spec))
    asked, _ = generation_estimate(parse_spec(video))
    assert asked.per_gpu == image.per_gpu
    assert any(
        "sized as the pipeline runs (TextToImage, one frame, not 81)" in n for n in asked.notes
    )


def _annotated(annotation: Any) -> str:
    """The class name of an ``__init__`` annotation (a class, or a string such as
    ``'diffusers.models...WanTransformer3DModel | None'``)."""
    if not isinstance(annotation, str):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = (args[0] if args else annotation).__name__
    return str(annotation).split(" | ")[0].rsplit(".", 1)[-1]


def test_the_expected_classes_are_the_pipelines_own_annotations() -> None:
    import inspect

    diffusers = pytest.importorskip("diffusers")
    assert set(PIPELINE_CLASSES) == set(PIPELINES) == set(ENCODER_CLASSES)
    for name, expected in PIPELINE_CLASSES.items():
        params = inspect.signature(getattr(diffusers, name).__init__).parameters
        roles = {
            k: _annotated(p.annotation)
            for k, p in params.items()
            if k in ("unet", "transformer", "transformer_2", "vae")
        }
        assert expected == roles, name
        encoders = {
            k: _annotated(p.annotation)
            for k, p in params.items()
            if k.startswith(("text_encoder", "image_encoder"))
        }
        assert ENCODER_CLASSES[name] == encoders, name


def test_an_encoder_of_another_family_is_refused_and_one_of_the_same_is_not() -> None:
    """A T5 as Qwen-Image's text encoder gives 4096-wide T5 states and T5 token ids where the
    pipeline reads Qwen2.5-VL's hidden states: refused at its class. The published Wan 2.1 I2V
    folder's CLIPVisionModelWithProjection, annotated CLIPVisionModel, is the same family."""
    spec = _example("qwen-image-1024.yaml")
    names = [c["name"] for c in spec["model"]["pipeline"]["components"]]
    te = names.index("text_encoder")
    spec["model"]["pipeline"]["components"][te] = {
        "name": "text_encoder",
        "class": "T5EncoderModel",
        "config": {"dModel": 3584},
    }
    problems = _refused(spec)
    assert list(problems) == [f"spec.model.pipeline.components[{te}].class"]
    assert problems[f"spec.model.pipeline.components[{te}].class"].startswith(
        "QwenImagePipeline takes text_encoder as a Qwen2_5_VLForConditionalGeneration"
    )
    parse_spec(_example("wan21-i2v-14b-720p-offload.yaml"))


def test_a_sized_class_the_pipeline_does_not_expect_is_refused_at_its_class() -> None:
    """An AutoencoderKL as Wan's vae (Wan VAE keys, which AutoencoderKL ignores): refused at
    the class with the one to use, not blamed on the transformer's inChannels for the VAE's 4
    latent channels (WanPipeline.__init__ reads vae.config.scale_factor_temporal, which an
    AutoencoderKL config lacks)."""
    from gpu_sizer.budget import estimate

    spec = _example("wan21-t2v-14b-720p.yaml")
    names = [c["name"] for c in spec["model"]["pipeline"]["components"]]
    vae = names.index("vae")
    spec["model"]["pipeline"]["components"][vae]["class"] = "AutoencoderKL"
    problems = _refused(spec)
    assert list(problems) == [f"spec.model.pipeline.components[{vae}].class"]
    message = problems[f"spec.model.pipeline.components[{vae}].class"]
    assert message.startswith(
        "WanPipeline takes vae as a AutoencoderKLWan (diffusers 0.42.1 WanPipeline.__init__"
    )
    assert message.endswith("use class AutoencoderKLWan with the checkpoint's vae/config.json")
    # a class gpu-sizer does not size is reported by the estimate as such, not as a mismatch
    spec["model"]["pipeline"]["components"][vae]["class"] = "AutoencoderTiny"
    assert not any(
        "takes vae as" in m.message for m in estimate(parse_spec(spec)).missing_components
    )


def test_the_context_parallel_classes_are_those_with_a_cp_plan() -> None:
    from gpu_sizer.api.components import COMPONENT_CLASSES, Role
    from gpu_sizer.api.spec.pipeline_runs import CONTEXT_PARALLEL

    diffusers = pytest.importorskip("diffusers")
    denoisers = [c for c, k in COMPONENT_CLASSES.items() if k.role is Role.Denoiser]
    with_plan = {c for c in denoisers if getattr(diffusers, c)._cp_plan is not None}
    assert with_plan == CONTEXT_PARALLEL


@pytest.mark.parametrize(
    ("example", "parallelism", "field"),
    [
        ("sd15-txt2img-l4.yaml", {"ulyssesDegree": 2}, "ulyssesDegree"),
        ("hunyuanvideo-720p-129f.yaml", {"ringDegree": 2}, "ringDegree"),
        ("cogvideox-5b-l4.yaml", {"ulyssesDegree": 2, "ringDegree": 2}, "ulyssesDegree"),
        ("mochi-1-preview-480p.yaml", {"ulyssesDegree": 2}, "ulyssesDegree"),
    ],
)
def test_sequence_parallelism_on_a_denoiser_without_a_cp_plan_is_refused(
    example: str, parallelism: dict[str, int], field: str
) -> None:
    """diffusers' enable_parallelism raises for a model without _cp_plan, so the workload
    would never start: refused at the degree, with what to set."""
    spec = _example(example)
    spec["generation"]["parallelism"] = parallelism
    message = _refused(spec)[f"spec.generation.parallelism.{field}"]
    assert "has no _cp_plan in diffusers 0.42.1" in message
    assert "set ulyssesDegree and ringDegree to 1" in message
    spec["generation"]["parallelism"] = {}
    assert not any(
        path == "spec.generation.parallelism.ulyssesDegree"
        for path, *_ in generation_candidates(parse_spec(spec))
    )


def test_diffusers_refuses_to_split_a_model_without_a_cp_plan() -> None:
    """Oracle for the rule: ModelMixin.enable_parallelism with a context-parallel config raises
    when neither the call nor the class gives a cp_plan (read from the source: running it needs
    an initialised process group of that many ranks)."""
    import inspect

    diffusers = pytest.importorskip("diffusers")
    source = inspect.getsource(diffusers.ModelMixin.enable_parallelism)
    assert "if cp_plan is None and self._cp_plan is None:" in source
    assert "`cp_plan` must be provided" in source
    assert diffusers.HunyuanVideoTransformer3DModel(**TINY_HUNYUAN)._cp_plan is None


def test_a_sequence_split_the_tokens_do_not_divide_is_not_sized() -> None:
    """EquipartitionSharder.shard asserts that each sequence the _cp_plan splits divides the
    mesh: Flux at 1024x1024 has 4096 image and 512 text tokens, which 3 GPUs cannot share."""
    import inspect

    from gpu_sizer.budget import estimate

    pytest.importorskip("diffusers")

    from diffusers.hooks import context_parallel

    assert "must be divisible by mesh size" in inspect.getsource(context_parallel)
    spec = _example("flux1-dev-1024.yaml")
    spec["generation"]["parallelism"] = {"ulyssesDegree": 3}
    missing = estimate(parse_spec(spec)).missing_components
    assert [m.message for m in missing] == [
        "component transformer: 4096 image tokens and 512 text tokens are not divisible by the "
        "3 GPUs of the sequence split (EquipartitionSharder.shard asserts it); the split run is "
        "not sized"
    ]
    spec["generation"]["parallelism"] = {"ulyssesDegree": 2}
    assert estimate(parse_spec(spec)).missing_components == []


def test_an_image_pipeline_given_one_video_frame_says_no_frame_count() -> None:
    from gpu_sizer.budget import estimate

    spec = _example("flux1-dev-1024.yaml")
    spec["generation"] |= {"task": "TextToVideo", "numFrames": 1}
    notes = [n for n in estimate(parse_spec(spec)).notes or [] if "runs TextToImage" in n]
    assert len(notes) == 1 and notes[0].endswith("sized as the pipeline runs (TextToImage)")
