"""Changes that shrink a generation workload's per-GPU peak, for the admission message. Pure.

Each candidate is a changed copy of the spec; ``gpu_sizer.sizing`` re-estimates it and reports
the class it would fit (or that it still fits none). The levers are those diffusers documents in
"Reduce memory usage" (``docs/source/en/optimization/memory.md``) and the pipeline's own size
settings, offered in the order of what they cost the user, time per image first:

1. ``vaeSlicing`` (batches only) and ``vaeTiling``: "no performance impact for single-image
   batches" and "a small increase in performance when decoding multi-image batches" for
   slicing; tiling decodes overlapping tiles (a few percent more decode work, tone variation
   between tiles possible);
2. a smaller ``batchSize``: each image costs the same time, a call makes fewer;
3. the denoiser stored in float8 (``enable_layerwise_casting(storage_dtype=float8_e4m3fn,
   compute_dtype=bfloat16)``): a cast per layer per forward, 12 s to 13 s (+8%) for FLUX.1-dev
   at 1024x1024 on an H100, and a small change in the output (HF blog "Exploring Quantization
   Backends in Diffusers");
4. ``offload: Model`` (``enable_model_cpu_offload``): one model on the GPU at a time, each
   moved once per call: 11.4 s to 16.1 s (+41%) for four SDXL images on an A100 (HF blog
   "Exploring simple optimizations for SDXL"), 6.6 s to 21.7 s for FLUX.1-dev on an H100
   (diffusers PR #11682); less in relative terms for long video calls; then both together;
5. ``offload: Group`` at block level with the next block prefetched on a CUDA stream
   (``enable_group_offload(offload_type="block_level", use_stream=True)``): every block crosses
   PCIe once per forward, overlapped with compute ("faster than CPU offloading"; 47.7 s in the
   same FLUX.1-dev test);
6. ``offload: Sequential`` (``enable_sequential_cpu_offload``): every module's weights cross
   PCIe synchronously in every forward, "extremely slow" (diffusers docs): 11.4 s to 67.0 s
   (+487%) in the SDXL test, 68.4 s in the FLUX.1-dev one;
7. changes to what is produced: fewer frames, a lower resolution;
8. more GPUs: Ulysses sequence parallelism (the GPU count only grows by what the spec would
   then declare).
"""

from __future__ import annotations

from typing import Any

from gpu_sizer.api import (
    Dtype,
    GPUWorkloadSpec,
    GroupOffload,
    GroupOffloadType,
    PipelineComponent,
    PipelineOffload,
)
from gpu_sizer.api.components import COMPONENT_CLASSES, Role
from gpu_sizer.api.spec.output_size import size_step
from gpu_sizer.api.spec.pipeline_runs import (
    context_parallel_problems,
    offload_conflict,
    ulysses_problems,
)

__all__ = ["generation_candidates"]

#: Sequence-parallel degrees tried (GPUs of one node).
DEGREES = (2, 4, 8)
_FLOAT8 = (Dtype.float8_e4m3fn, Dtype.float8_e5m2)
_STREAMED = (PipelineOffload.Sequential, PipelineOffload.Group)

Candidate = tuple[str, Any, GPUWorkloadSpec, str]


def _with(spec: GPUWorkloadSpec, **changes: Any) -> GPUWorkloadSpec:
    gen = spec.generation
    assert gen is not None
    return spec.model_copy(update={"generation": gen.model_copy(update=changes)})


def _with_components(
    spec: GPUWorkloadSpec, changed: dict[int, PipelineComponent], **generation: Any
) -> GPUWorkloadSpec:
    pipeline = spec.model.pipeline
    assert pipeline is not None
    comps = [changed.get(i, c) for i, c in enumerate(pipeline.components)]
    model = spec.model.model_copy(
        update={"pipeline": pipeline.model_copy(update={"components": comps})}
    )
    out = spec.model_copy(update={"model": model})
    return _with(out, **generation) if generation else out


def _denoisers(spec: GPUWorkloadSpec) -> list[tuple[int, PipelineComponent]]:
    assert spec.model.pipeline is not None
    out = []
    for i, c in enumerate(spec.model.pipeline.components):
        known = COMPONENT_CLASSES.get(c.class_name)
        if known is not None and known.role is Role.Denoiser:
            out.append((i, c))
    return out


def _float8(spec: GPUWorkloadSpec, *, with_model: bool) -> list[Candidate]:
    """The denoisers stored in float8 (layerwise casting), alone or with model offload."""
    gen = spec.generation
    assert gen is not None
    if with_model and gen.offload is not PipelineOffload.None_:
        return []
    dtype = spec.model.dtype
    cast = {
        i: c.model_copy(update={"dtype": Dtype.float8_e4m3fn})
        for i, c in _denoisers(spec)
        if c.quantization is None and (c.dtype or dtype) not in _FLOAT8 and c.offload is None
    }
    if not cast:
        return []
    names = ", ".join(c.name for c in cast.values())
    path = f"spec.model.pipeline.components[{min(cast)}].dtype"
    what = f"{names} dtype float8_e4m3fn (enable_layerwise_casting)"
    if not with_model:
        return [(path, "float8_e4m3fn", _with_components(spec, cast), what)]
    both = _with_components(spec, cast, offload=PipelineOffload.Model)
    return [(path, "float8_e4m3fn", both, f"{what} with offload Model")]


def generation_candidates(spec: GPUWorkloadSpec) -> list[Candidate]:
    """(spec path, new value, changed spec, phrase) for each lever not already pulled, cheapest
    first in time per image (see the module docstring)."""
    gen = spec.generation
    assert gen is not None
    out: list[Candidate] = []
    if gen.batch_size > 1 and not gen.vae_slicing:
        out.append(
            ("spec.generation.vaeSlicing", True, _with(spec, vae_slicing=True), "vaeSlicing true")
        )
    if not gen.vae_tiling:
        out.append(
            ("spec.generation.vaeTiling", True, _with(spec, vae_tiling=True), "vaeTiling true")
        )
    batch = gen.batch_size // 2
    while batch >= 1:  # largest first: sizing keeps the first that fits
        out.append(
            (
                "spec.generation.batchSize",
                batch,
                _with(spec, batch_size=batch),
                f"batchSize {batch}",
            )
        )
        batch = batch // 2 if batch > 1 else 0
    out += _float8(spec, with_model=False)
    if gen.offload is PipelineOffload.None_:
        out.append(
            (
                "spec.generation.offload",
                "Model",
                _with(spec, offload=PipelineOffload.Model),
                "offload Model",
            )
        )
    out += _float8(spec, with_model=True)
    if gen.offload not in _STREAMED:
        streamed = GroupOffload(
            offload_type=GroupOffloadType.BlockLevel, num_blocks_per_group=1, use_stream=True
        )
        out.append(
            (
                "spec.generation.offload",
                "Group",
                _with(spec, offload=PipelineOffload.Group, group_offload=streamed),
                "offload Group (block level, next block prefetched: groupOffload.useStream true)",
            )
        )
    if gen.offload is not PipelineOffload.Sequential:
        out.append(
            (
                "spec.generation.offload",
                "Sequential",
                _with(spec, offload=PipelineOffload.Sequential),
                "offload Sequential (slowest: every module's weights cross PCIe in every step)",
            )
        )
    if gen.task.video and gen.num_frames > 17:
        frames = (gen.num_frames - 1) // 2
        if spec.model.pipeline is not None and spec.model.pipeline.class_name == "MochiPipeline":
            frames -= (frames - 1) % 6  # a count MochiPipeline runs as given (6k + 1)
        else:
            frames = frames - frames % 4 + 1
        out.append(
            (
                "spec.generation.numFrames",
                frames,
                _with(spec, num_frames=frames),
                f"numFrames {frames}",
            )
        )
    if gen.height * gen.width > 512 * 512:
        # a resolution the pipeline runs as given (LTX refuses sides not divisible by 32)
        assert spec.model.pipeline is not None
        step = max(16, size_step(spec.model.pipeline))
        h = max(step, gen.height * 3 // 4 // step * step)
        w = max(step, gen.width * 3 // 4 // step * step)
        out.append(
            (
                "spec.generation.height",
                h,
                _with(spec, height=h, width=w),
                f"resolution {w}x{h} (height {h}, width {w})",
            )
        )
    par, pipeline = gen.parallelism, spec.model.pipeline
    assert pipeline is not None
    # a denoiser without diffusers' _cp_plan cannot be split: no sequence split to offer
    splittable = not context_parallel_problems(pipeline, 2) and _split_heads(spec)
    if gen.task.video and par.ulysses_degree * par.ring_degree == 1 and splittable:
        # only degrees every running denoiser's heads divide (the refusal's own rule)
        for degree in (d for d in DEGREES if not ulysses_problems(pipeline, d)):
            changed = _with(spec, parallelism=par.model_copy(update={"ulysses_degree": degree}))
            out.append(
                (
                    "spec.generation.parallelism.ulyssesDegree",
                    degree,
                    changed,
                    f"parallelism.ulyssesDegree {degree} ({degree} GPUs)",
                )
            )
    # a pipeline-wide offload beside a component's own that diffusers refuses to mix
    return [c for c in out if _offloads_mix(c[2])]


def _offloads_mix(spec: GPUWorkloadSpec) -> bool:
    gen, pipeline = spec.generation, spec.model.pipeline
    assert gen is not None and pipeline is not None
    return offload_conflict(pipeline, gen.offload) is None


def _split_heads(spec: GPUWorkloadSpec) -> bool:
    """Whether the first sized denoiser has one head count that Ulysses can split over GPUs (a
    UNet's heads differ per level)."""
    for _, c in _denoisers(spec):
        return isinstance(c.resolved_config().get("num_attention_heads"), int)
    return False
