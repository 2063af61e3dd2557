"""Which components' weights are on the GPU during each forward of a call. Pure.

``diffusers`` 0.42.1 ``pipelines/pipeline_utils.py`` and ``accelerate``'s hooks, per offload
mode:

- ``None`` (``pipe.to("cuda")``): every component, the whole call.
- ``Model`` (``enable_model_cpu_offload``): every model is moved to the CPU, then each model of
  ``model_cpu_offload_seq`` gets ``cpu_offload_with_hook(model, device, prev_module_hook=hook)``
  with the hook of the previous *present* model of the sequence. accelerate's ``CpuOffload``
  hook moves its model to the GPU when its ``forward`` is called and first offloads that
  previous model, and nothing else: a model stays on the GPU until the model after it *in the
  sequence* runs, or until ``maybe_free_model_hooks`` at the end of the call. So the first model
  of the sequence offloads nothing: SD3's negative prompt runs CLIP-L and CLIP-G again while
  T5-XXL, loaded for the prompt, is still there; a VAE encode before the loop (image-to-video,
  image-to-image) leaves the VAE on the GPU through the whole denoising loop, since only the
  denoiser's hook offloads its predecessor (the image or text encoder) and nothing runs after
  the VAE in the sequence until the decode; Wan 2.2's ``transformer_2`` offloads ``transformer``
  when the low-noise steps start (one expert at a time). Models outside the sequence get a hook
  without a predecessor (they stay once loaded); ``_exclude_from_cpu_offload`` models are moved
  to the GPU for good.
- ``Sequential`` (``enable_sequential_cpu_offload``) and ``Group`` (``enable_group_offload``):
  only the running model's current modules or groups (``parts.sequential_resident``,
  ``parts.group_resident``); ``_exclude_from_cpu_offload`` models stay on the GPU under
  sequential offload too.
- a component with ``device: Cpu`` never touches the GPU.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gpu_sizer.api import PipelineOffload
from gpu_sizer.budget.diffusion.calls import Step

__all__ = ["offload_chain", "resident_sets"]


def offload_chain(
    sequence: Sequence[str], modes: Mapping[str, PipelineOffload], excluded: Collection[str]
) -> dict[str, str | None]:
    """Model-offloaded component -> the component its hook offloads first (``None``: nothing).

    ``modes`` holds the offload mode of every component on the GPU (components on the CPU left
    out): the chain runs over those in ``sequence`` with mode ``Model``; a ``Model`` component
    outside ``sequence`` offloads nothing.
    """
    chain: dict[str, str | None] = {}
    previous: str | None = None
    for name in sequence:
        if modes.get(name) is PipelineOffload.Model and name not in excluded:
            chain[name] = previous
            previous = name
    for name, mode in modes.items():
        if mode is PipelineOffload.Model and name not in excluded and name not in chain:
            chain[name] = None
    return chain


def resident_sets(
    steps: Sequence[Step],
    modes: Mapping[str, PipelineOffload],
    sequence: Sequence[str],
    excluded: Collection[str],
) -> list[frozenset[str]]:
    """For each step, the components with weights on the GPU while it runs (the running one
    included; for a ``Sequential`` or ``Group`` component only while it runs, and then only its
    streamed part: the caller sizes that).

    :param modes: offload mode of every component on the GPU.
    :param sequence: the class's ``model_cpu_offload_seq``.
    :param excluded: the class's ``_exclude_from_cpu_offload``.
    """
    chain = offload_chain(sequence, modes, excluded)
    always = {
        n
        for n, m in modes.items()
        if m is PipelineOffload.None_
        or (n in excluded and m in (PipelineOffload.Model, PipelineOffload.Sequential))
    }
    loaded: set[str] = set()
    out: list[frozenset[str]] = []
    for step in steps:
        name = step.component
        if name in chain:
            before = chain[name]
            if before is not None:
                loaded.discard(before)
            loaded.add(name)
        running = {name} if name in modes and name not in always | loaded else set()
        out.append(frozenset(always | loaded | running))
    return out
