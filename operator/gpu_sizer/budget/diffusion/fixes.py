"""Changes that shrink a generation workload's per-GPU peak, for the admission message. Pure.

Each candidate is a changed copy of the spec; ``gpu_sizer.sizing`` re-estimates it and reports
the class it would fit (or that it still fits none). The candidates follow the levers diffusers
documents in "Reduce memory usage" (``docs/source/en/optimization/memory.md``): model offloading,
VAE tiling, and, where those do not suffice, fewer frames, a lower resolution, or sequence
parallelism over more GPUs (the GPU count only grows by what the spec would then declare).
"""

from __future__ import annotations

from typing import Any

from gpu_sizer.api import GPUWorkloadSpec, PipelineOffload
from gpu_sizer.api.components import COMPONENT_CLASSES, Role, resolved_config

__all__ = ["generation_candidates"]

#: Sequence-parallel degrees tried (GPUs of one node).
DEGREES = (2, 4, 8)


def _with(spec: GPUWorkloadSpec, **changes: Any) -> GPUWorkloadSpec:
    gen = spec.generation
    assert gen is not None
    return spec.model_copy(update={"generation": gen.model_copy(update=changes)})


def generation_candidates(spec: GPUWorkloadSpec) -> list[tuple[str, Any, GPUWorkloadSpec, str]]:
    """(spec path, new value, changed spec, phrase) for each lever not already pulled."""
    gen = spec.generation
    assert gen is not None
    out: list[tuple[str, Any, GPUWorkloadSpec, str]] = []
    if gen.offload is PipelineOffload.None_:
        out.append(
            (
                "spec.generation.offload",
                "Model",
                _with(spec, offload=PipelineOffload.Model),
                "offload Model",
            )
        )
    if not gen.vae_tiling:
        out.append(
            ("spec.generation.vaeTiling", True, _with(spec, vae_tiling=True), "vaeTiling true")
        )
    if gen.task.video and gen.num_frames > 17:
        frames = (gen.num_frames - 1) // 2
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
        h, w = gen.height * 3 // 4 // 16 * 16, gen.width * 3 // 4 // 16 * 16
        out.append(
            (
                "spec.generation.height",
                h,
                _with(spec, height=h, width=w),
                f"resolution {w}x{h} (height {h}, width {w})",
            )
        )
    par = gen.parallelism
    heads = _denoiser_heads(spec)
    if gen.task.video and par.ulysses_degree * par.ring_degree == 1 and heads:
        for degree in (d for d in DEGREES if heads % d == 0):
            changed = _with(spec, parallelism=par.model_copy(update={"ulysses_degree": degree}))
            out.append(
                (
                    "spec.generation.parallelism.ulyssesDegree",
                    degree,
                    changed,
                    f"parallelism.ulyssesDegree {degree} ({degree} GPUs)",
                )
            )
    return out


def _denoiser_heads(spec: GPUWorkloadSpec) -> int | None:
    """Attention heads of the first sized denoiser (Ulysses splits heads over GPUs)."""
    assert spec.model.pipeline is not None
    for c in spec.model.pipeline.components:
        known = COMPONENT_CLASSES.get(c.class_name)
        if known is not None and known.role is Role.Denoiser:
            heads = resolved_config(c.class_name, c.config).get("num_attention_heads")
            return heads if isinstance(heads, int) else None
    return None
