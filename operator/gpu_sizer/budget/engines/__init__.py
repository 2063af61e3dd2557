"""Serving engines as they allocate: which engine models memory how, by release. Pure.

Two memory models, chosen by ``spec.inference.engine``:

- **Pre-allocating engines** (:data:`PRE_ALLOCATING`: vLLM, SGLang, TGI) take a fixed share of
  each GPU when they start and carve the KV cache pool out of what is left after weights, the
  profiled activation peak and non-PyTorch memory. The pool, and so the KV capacity in tokens and
  the concurrency, depend on the GPU: :func:`plan` computes them for one GPU class, following the
  engine's source for one release (:mod:`.vllm`, :mod:`.sglang`, :mod:`.tgi`).
- **On-demand runtimes** (``transformers``) grow with the batch: the KV cache is
  ``maxNumSeqs x maxModelLen`` tokens, static or dynamic cache alike
  (:mod:`gpu_sizer.budget.kv_cache`), and the estimate is class-independent.

``spec.inference.engineVersion`` picks the release; unset, the newest modeled one. A release that
is not modeled is sized with the rules of the nearest older modeled release (the oldest if it
predates them all), and :func:`resolve_release` says so in a note.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final

from gpu_sizer.api import Engine, GPUWorkloadSpec, Inference
from gpu_sizer.budget.engines import sglang, tgi, vllm
from gpu_sizer.budget.engines.common import EnginePlan, ServingFacts, serving_facts
from gpu_sizer.catalog import GPUClass

__all__ = [
    "PRE_ALLOCATING",
    "EnginePlan",
    "ServingFacts",
    "is_pre_allocating",
    "modeled_releases",
    "models_pool",
    "planner",
    "plans",
    "resolve_release",
    "serving_facts",
]

#: Engines that take a fixed share of the GPU at start and size their KV pool from it.
PRE_ALLOCATING: Final = frozenset({Engine.vllm, Engine.sglang, Engine.tgi})

_Release = vllm.VllmRelease | sglang.SglangRelease | tgi.TgiRelease
_RELEASES: Final[dict[Engine, tuple[_Release, ...]]] = {
    Engine.vllm: vllm.RELEASES,
    Engine.sglang: sglang.RELEASES,
    Engine.tgi: tgi.RELEASES,
}


def is_pre_allocating(inference: Inference | None) -> bool:
    """Whether ``inference`` runs on an engine that pre-allocates its KV pool."""
    return inference is not None and inference.engine in PRE_ALLOCATING


def models_pool(spec: GPUWorkloadSpec) -> bool:
    """Whether ``spec``'s KV pool is planned as its engine allocates it: a pre-allocating engine
    and an architecture (a known family's layout, or a family sized from ``parameterCount`` and
    its attention geometry, :func:`~gpu_sizer.budget.engines.common.generic_serving_facts`).
    Without an architecture the KV cache is a missing component and the verdict Incomplete."""
    return spec.model.architecture is not None and is_pre_allocating(spec.inference)


def modeled_releases(engine: Engine) -> tuple[str, ...]:
    """The releases of ``engine`` whose allocation rules are modeled, newest first."""
    return tuple(r.version for r in _RELEASES.get(engine, ()))


def _key(version: str) -> tuple[int, ...]:
    """Numeric release parts (``0.6.3.post1`` -> ``(0, 6, 3)``)."""
    return tuple(int(p) for p in re.findall(r"\d+", version.lstrip("v").split("+")[0])[:3])


def resolve_release(inference: Inference) -> tuple[_Release, str | None]:
    """The modeled release for ``inference.engineVersion``, and a note when it is not exact.

    :raises KeyError: the engine is not pre-allocating.
    """
    releases = _RELEASES[inference.engine]
    asked = inference.engine_version
    if asked is None:
        return releases[0], None
    want = _key(asked)
    for rel in releases:
        if _key(rel.version) == want:
            return rel, None
    older = [r for r in releases if _key(r.version) <= want]
    rel = older[0] if older else releases[-1]
    which = "the nearest older modeled release" if older else "the oldest modeled release"
    return rel, (
        f"{inference.engine.value} engineVersion {asked} is not modeled: sized with the rules of "
        f"{rel.version}, {which} (modeled: {', '.join(r.version for r in releases)})"
    )


def planner(
    spec: GPUWorkloadSpec, facts: ServingFacts, headroom: float
) -> Callable[[GPUClass], EnginePlan]:
    """What the spec's engine holds on one GPU of a class (see :class:`EnginePlan`), as a function
    of the class; what does not depend on the class is computed once.

    :param facts: :func:`serving_facts` of ``spec``;
    :param headroom: share of usable memory to leave free when gpu-sizer picks the engine's
        fraction (``gpuMemoryUtilization`` unset).
    """
    inf = spec.inference
    assert inf is not None
    rel, note = resolve_release(inf)
    on: Callable[[GPUClass], EnginePlan]
    if isinstance(rel, vllm.VllmRelease):
        on = vllm.planner(spec, facts, rel, headroom)
    elif isinstance(rel, sglang.SglangRelease):

        def on(gpu: GPUClass) -> EnginePlan:
            return sglang.plan(spec, facts, gpu, rel, headroom)

    else:

        def on(gpu: GPUClass) -> EnginePlan:
            return tgi.plan(spec, facts, gpu, rel, headroom)

    if note is None:
        return on
    return lambda gpu: (p := on(gpu))._replace(notes=(note, *p.notes))


def plans(
    spec: GPUWorkloadSpec, facts: ServingFacts, gpus: Sequence[GPUClass], headroom: float
) -> list[EnginePlan]:
    """:func:`planner` on each class of ``gpus``, in order."""
    on = planner(spec, facts, headroom)
    return [on(gpu) for gpu in gpus]
