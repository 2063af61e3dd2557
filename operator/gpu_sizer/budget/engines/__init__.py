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
predates them all): an engine's allocation rules hold from the release that introduced them until
one that changed them, and the modeled releases are those changes. An earlier patch of a modeled
series (vLLM 0.19.0 beside the modeled 0.19.1, SGLang 0.4.9 beside 0.4.10) takes its series'
rules: patch releases do not change how the engines allocate. :func:`resolve_release` says
which release an unlisted version maps to, and why, in a note. A version newer than every
modeled release may have changed anything: it is sized with the newest rules plus
:data:`NEWER_RELEASE_MARGIN_BYTES` in every profile or warm-up pass (less KV pool, more footprint:
the fail-safe side), and the note says so. So is a version older than the first release the
oldest modeled rules are known to hold from (:data:`OLDEST_RULES_FROM`: TGI before 0.9.4 did not
size its blocks from free memory at all; vLLM before 0.6 and SGLang before 0.4 were not read):
the oldest rules plus the same margin.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Final

from gpu_sizer.api import Engine, GPUWorkloadSpec, Inference
from gpu_sizer.budget.engines import sglang, tgi, vllm
from gpu_sizer.budget.engines.common import EnginePlan, Planner, ServingFacts, serving_facts
from gpu_sizer.budget.engines.support import unserved_reason
from gpu_sizer.catalog import GPUClass

__all__ = [
    "NEWER_RELEASE_MARGIN_BYTES",
    "OLDEST_RULES_FROM",
    "PRE_ALLOCATING",
    "EnginePlan",
    "Planner",
    "ServingFacts",
    "command_args",
    "is_newer_than_modeled",
    "is_pre_allocating",
    "is_unread_release",
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


def command_args(engine_args: dict[str, str]) -> list[str]:
    """``engine_args`` as a container's ``args``: ``--flag=value``, and a boolean flag alone
    (vLLM's and SGLang's ``store_true`` flags refuse a value: ``--enforce-eager``)."""
    return [flag if value == "true" else f"{flag}={value}" for flag, value in engine_args.items()]


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


#: Added to every profile or warm-up pass of a release newer than every modeled one, or older
#: than :data:`OLDEST_RULES_FROM` (bytes).
NEWER_RELEASE_MARGIN_BYTES: Final = 1 << 30

#: The first release each engine's oldest modeled rules are known to hold from: TGI 0.9.4 first
#: sized its KV blocks from the memory free after warm-up (``server/text_generation_server/
#: models/flash_causal_lm.py`` ``warmup``; huggingface/text-generation-inference#653 logs it);
#: for vLLM and SGLang, the oldest modeled release's series (earlier series were not read).
OLDEST_RULES_FROM: Final[dict[Engine, str]] = {
    Engine.vllm: "0.6.0",
    Engine.sglang: "0.4.0",
    Engine.tgi: "0.9.4",
}

#: Why an unlisted version of an engine maps where it does, by the modeled release it maps to
#: (the engines' release history; each modeled release is where a rule changed).
_WHY: Final[dict[tuple[Engine, str], str]] = {
    (Engine.vllm, "0.6.3.post1"): "releases before 0.8.0 run the V0 engine by default",
    (Engine.vllm, "0.8.5"): "0.8.x run V1 with the whole-device accounting",
    (Engine.vllm, "0.9.2"): "0.9.x size the pool from memory_profiling, NCCL inside the budget",
    (Engine.vllm, "0.10.2"): "0.10.x keep 0.9's accounting",
    (Engine.vllm, "0.11.0"): "from 0.11 NCCL is set up before the memory snapshot and "
    "tensor parallelism adds all-reduce buffers inside the budget; no later modeled release "
    "changed that before 0.19",
    (Engine.vllm, "0.19.1"): "0.19.x warm the sampler up with a lighter native path",
    (Engine.sglang, "0.4.10"): "0.4.x take SGLang's fixed mem_fraction_static table",
    (Engine.sglang, "0.5.23"): "0.5.x reserve memory by GPU size and CUDA graph settings",
    (Engine.tgi, "1.4.0"): "0.9.4 to 1.4.1 size the blocks from all the free memory after warm-up",
    (Engine.tgi, "1.4.5"): "1.4.2 to 1.4.5 keep 5 % of it free",
    (Engine.tgi, "2.0.4"): "2.0 to 2.2 capture CUDA graphs and prefill max_input_tokens + 50",
    (Engine.tgi, "2.3.1"): "2.3 default to flashinfer's 1-token blocks",
    (Engine.tgi, "2.4.1"): "2.4 keep 10 % free and prefill at most 4096 tokens",
    (Engine.tgi, "3.3.7"): "3.x default the prefill tokens from the GPU's FLOPs",
}


def is_newer_than_modeled(inference: Inference) -> bool:
    """Whether ``inference.engineVersion`` is newer than every modeled release of its engine."""
    releases = _RELEASES.get(inference.engine)
    asked = inference.engine_version
    if not releases or asked is None:
        return False
    return _key(asked) > _key(releases[0].version)


def is_unread_release(inference: Inference) -> bool:
    """Whether ``inference.engineVersion`` lies outside what the modeled releases' rules are
    known to cover: newer than every modeled release, or older than
    :data:`OLDEST_RULES_FROM`. Such a version is sized with the nearest rules plus
    :data:`NEWER_RELEASE_MARGIN_BYTES` (an upper bound)."""
    asked = inference.engine_version
    floor = OLDEST_RULES_FROM.get(inference.engine)
    if asked is None or floor is None:
        return False
    return is_newer_than_modeled(inference) or _key(asked) < _key(floor)


def resolve_release(inference: Inference) -> tuple[_Release, str | None]:
    """The modeled release for ``inference.engineVersion``, and a note when it is not exact
    (which release it maps to and why; newer than every modeled release: the margin).

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
    modeled = ", ".join(r.version for r in releases)
    name = inference.engine.value
    if want > _key(releases[0].version):
        return releases[0], (
            f"{name} engineVersion {asked} is newer than every modeled release (modeled: "
            f"{modeled}): sized with the rules of {releases[0].version}, the newest, plus "
            f"{NEWER_RELEASE_MARGIN_BYTES / (1 << 30):.0f} GiB in the profile run for what a "
            "newer release may allocate that gpu-sizer has not read (an upper bound, fail safe)"
        )
    older = [r for r in releases if _key(r.version) <= want]
    series = [r for r in releases if _key(r.version)[:2] == want[:2]]
    if series and not any(r in series for r in older):
        # an earlier patch of a modeled series (0.19.0 for 0.19.1): patch releases keep their
        # series' allocation rules, and the series' own rules are nearer than an older series'
        rel, which = series[-1], f"the modeled release of the {want[0]}.{want[1]} series"
    elif older:
        rel, which = older[0], "the nearest older modeled release"
    else:
        rel, which = releases[-1], "the oldest modeled release"
        floor = OLDEST_RULES_FROM[inference.engine]
        if want < _key(floor):
            return rel, (
                f"{name} engineVersion {asked} is older than every release whose rules are "
                f"modeled (modeled: {modeled}; the oldest rules are known to hold from {floor}): "
                f"sized with the rules of {rel.version} plus "
                f"{NEWER_RELEASE_MARGIN_BYTES / (1 << 30):.0f} GiB in the profile run for what "
                "an older release may allocate otherwise (an upper bound, fail safe)"
            )
    why = _WHY.get((inference.engine, rel.version))
    return rel, (
        f"{name} engineVersion {asked} is not modeled: sized with the rules of "
        f"{rel.version}, {which}" + (f" ({why})" if why else "") + f" (modeled: {modeled})"
    )


def planner(spec: GPUWorkloadSpec, facts: ServingFacts, headroom: float) -> Planner:
    """What the spec's engine holds on one GPU of a class (see :class:`EnginePlan`), as a function
    of the class and the engine's fraction (:class:`Planner`); what depends on neither is computed
    once.

    :param facts: :func:`serving_facts` of ``spec``;
    :param headroom: share of usable memory to leave free when gpu-sizer picks the engine's
        fraction (``gpuMemoryUtilization`` unset).
    """
    inf = spec.inference
    assert inf is not None
    rel, note = resolve_release(inf)
    if is_unread_release(inf):
        facts = dataclasses.replace(facts, margin_bytes=NEWER_RELEASE_MARGIN_BYTES)
    on: Planner
    if isinstance(rel, vllm.VllmRelease):
        on = vllm.planner(spec, facts, rel, headroom)
    elif isinstance(rel, sglang.SglangRelease):

        def on(gpu: GPUClass, fraction: float | None = None) -> EnginePlan:
            return sglang.plan(spec, facts, gpu, rel, headroom, fraction)

    else:

        def on(gpu: GPUClass, fraction: float | None = None) -> EnginePlan:
            return tgi.plan(spec, facts, gpu, rel, headroom, fraction)

    arch = spec.model.architecture
    unserved = unserved_reason(inf.engine, inf.engine_version, arch.model_type) if arch else None
    if note is None and unserved is None:
        return on

    def annotated(gpu: GPUClass, fraction: float | None = None) -> EnginePlan:
        p = on(gpu, fraction)
        if note is not None:
            p = p._replace(notes=(note, *p.notes))
        if unserved is not None:
            # the engine stops at model loading, before any memory rule applies
            p = p._replace(start_error=unserved, capacity_tokens=0, max_concurrency=0.0)
        return p

    return annotated


def plans(
    spec: GPUWorkloadSpec, facts: ServingFacts, gpus: Sequence[GPUClass], headroom: float
) -> list[EnginePlan]:
    """:func:`planner` on each class of ``gpus``, in order."""
    on = planner(spec, facts, headroom)
    return [on(gpu) for gpu in gpus]
