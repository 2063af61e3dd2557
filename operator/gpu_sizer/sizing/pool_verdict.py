"""The verdict for pre-allocating serving engines, whose KV pool depends on the GPU. Pure.

vLLM, SGLang and TGI take a fixed fraction of each GPU and size their KV cache pool from it
(:mod:`gpu_sizer.budget.engines`), so "how much memory does it need" has no class-independent
answer: the same spec holds 60 GiB on an H100 and 20 GiB on an L4. For each allowed class,
:func:`class_plans` computes what the engine would hold; a class *serves* the spec when

1. the engine starts there (its own check: vLLM refuses when the pool cannot hold one
   ``maxModelLen`` request, SGLang when the weights leave no pool, TGI when the blocks hold fewer
   than ``max_total_tokens``) and does not run out of memory under load (SGLang: activations and
   CUDA graphs must fit outside ``--mem-fraction-static``);
2. the pool holds ``targetConcurrency`` requests of ``maxModelLen`` tokens (``maxConcurrency``,
   as vLLM logs it, at least ``targetConcurrency``);
3. the engine's steady-state footprint leaves ``minHeadroomFraction`` of the class's usable memory
   free.

**Headroom for a pre-allocating engine.** The engine fills its fraction whatever the load, so its
footprint is fixed at start: the fraction of the GPU plus what lies outside it (vLLM: the CUDA
context and NCCL buffers allocated before its memory snapshot, and the CUDA graph pool captured
after the KV cache; TGI: the graph pool; SGLang: context and NCCL). Headroom is
``1 - footprint / usable``. With ``gpuMemoryUtilization`` unset, gpu-sizer starts the engine, per
class, at the largest fraction up to the engine's default that leaves the headroom, and says so in
``status.recommendation.engineArgs`` (vLLM's default 0.9 plus about 0.8 GiB outside it leaves 8.9 %
of an H100, so a 10 % policy starts it at 0.88). A spec that sets the fraction is taken as is: 0.95
with a 10 % headroom is a contradiction the verdict explains, with the largest fraction that would
honour the policy as a computed fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from gpu_sizer.api import Dtype, GPUWorkloadSpec, KvCacheDtype
from gpu_sizer.budget.engines import EnginePlan
from gpu_sizer.budget.estimate import engine_planner, engine_plans
from gpu_sizer.catalog import GPUClass
from gpu_sizer.sizing.fraction_fix import fraction_fix

__all__ = [
    "FixCandidate",
    "class_plans",
    "describe",
    "fix_candidates",
    "planner",
    "serves",
    "shortfall",
]

GIB = 1 << 30
#: Shortest maxModelLen a fix may suggest (as for on-demand runtimes, see ``sizing``).
MIN_FIX_MAX_MODEL_LEN = 512
#: Tensor-parallel sizes tried for the TP fix (one node's GPUs).
MAX_TENSOR_PARALLEL = 8

#: (spec path, value, the plan it would run with or None, phrase).
FixCandidate = tuple[str, Any, EnginePlan | None, str]


def class_plans(spec: GPUWorkloadSpec, classes: Sequence[GPUClass]) -> list[EnginePlan]:
    """The engine's plan on each class (same order)."""
    return engine_plans(spec, classes, spec.placement.min_headroom_fraction)


def planner(spec: GPUWorkloadSpec) -> Callable[[GPUClass], EnginePlan]:
    """The engine's plan as a function of the class, with the spec's headroom."""
    return engine_planner(spec, spec.placement.min_headroom_fraction)


def serves(spec: GPUWorkloadSpec, plan: EnginePlan) -> bool:
    """Whether ``plan`` starts, holds ``targetConcurrency`` and leaves the headroom."""
    inf = spec.inference
    assert inf is not None
    return (
        plan.error is None
        and plan.max_concurrency >= inf.required_concurrency
        and plan.headroom >= spec.placement.min_headroom_fraction
    )


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def describe(spec: GPUWorkloadSpec, plan: EnginePlan) -> str:
    """What the engine holds on the plan's class, in one phrase."""
    inf = spec.inference
    assert inf is not None
    flag = next(k for k in plan.engine_args if "fraction" in k or "utilization" in k)
    return (
        f"{inf.engine.value} {plan.version} at {flag} {plan.fraction:g} holds "
        f"{_gib(plan.total)} of {_gib(plan.gpu.usable)} usable (KV pool {_gib(plan.kv_pool)} = "
        f"{plan.capacity_tokens:,} tokens, {plan.max_concurrency:.2f} x maxModelLen "
        f"{inf.max_model_len}; weights {_gib(plan.weights + plan.quant)}, activations "
        f"{_gib(plan.activations)}, runtime {_gib(plan.runtime)})"
    )


def shortfall(spec: GPUWorkloadSpec, plan: EnginePlan) -> str:
    """Why ``plan`` does not serve the spec, in words with figures ("" when it does)."""
    inf = spec.inference
    assert inf is not None
    room = spec.placement.min_headroom_fraction
    if plan.error is not None:
        return plan.error
    if plan.headroom < room:
        outside = plan.total - int(plan.fraction * plan.gpu.usable)
        text = (
            f"{describe(spec, plan)}, leaving {plan.headroom:.0%} free; "
            f"spec.placement.minHeadroomFraction asks for {room:.0%}"
        )
        if not plan.fraction_chosen and inf.gpu_memory_utilization is not None:
            text += (
                f": a pre-allocating engine fills its fraction whatever the load "
                f"({_gib(max(outside, 0))} of its footprint lies outside the fraction), so "
                f"gpuMemoryUtilization {plan.fraction:g} with {room:.0%} headroom contradict "
                "each other; lower one of them"
            )
        return text
    if plan.max_concurrency < inf.required_concurrency:
        what = (
            f"spec.inference.targetConcurrency {inf.required_concurrency:g}"
            if inf.target_concurrency is not None
            else "the one the engine needs to start"
        )
        return f"{describe(spec, plan)}: fewer than {what} requests of maxModelLen tokens"
    return ""


def _with(spec: GPUWorkloadSpec, **changes: Any) -> GPUWorkloadSpec:
    inf = spec.inference
    assert inf is not None
    return spec.model_copy(update={"inference": inf.model_copy(update=changes)})


def _first_serving(spec: GPUWorkloadSpec, allowed: Sequence[GPUClass]) -> EnginePlan | None:
    """The first class in rank order that serves ``spec``, as its plan."""
    on = planner(spec)
    for cls in sorted(allowed, key=lambda c: (c.rank, c.memory_bytes, c.name)):
        plan = on(cls)
        if serves(spec, plan):
            return plan
    return None


def _largest_serving(
    lo: int, hi: int, make: Callable[[int], GPUWorkloadSpec], allowed: Sequence[GPUClass]
) -> tuple[int, EnginePlan] | None:
    """Largest n in [lo, hi] whose changed spec some allowed class serves (monotonic in n)."""
    first = _first_serving(make(lo), allowed) if hi >= lo else None
    if first is None:
        return None
    best = (lo, first)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        found = _first_serving(make(mid), allowed)
        if found is not None:
            lo, best = mid, (mid, found)
        else:
            hi = mid - 1
    return best


def _flag_name(plan: EnginePlan) -> str:
    """The engine flag the fraction is (``--mem-fraction-static`` for SGLang)."""
    return next(k for k in plan.engine_args if "fraction" in k or "utilization" in k)


def _larger_class(
    spec: GPUWorkloadSpec, allowed: Sequence[GPUClass], catalog: Sequence[GPUClass]
) -> EnginePlan | None:
    """The cheapest catalog class outside ``spec.placement.gpuClasses`` that serves the spec as
    it is (``None`` when the spec allows every class, or none serves)."""
    if not spec.placement.gpu_classes:
        return None
    named = {c.name for c in allowed}
    others = [c for c in catalog if c.name not in named and (spec.gpu_count == 1 or not c.is_mig)]
    return _first_serving(spec, others)


def fix_candidates(
    spec: GPUWorkloadSpec,
    allowed: Sequence[GPUClass],
    largest: EnginePlan,
    catalog: Sequence[GPUClass] = (),
) -> list[FixCandidate]:
    """Computed changes that make an unserved spec fit, each re-planned on every allowed class.

    ``largest`` is the plan on the largest allowed class (what "not enough alone" is measured
    against). Candidates: the engine's fraction (the serving value nearest the one it would run
    with, above the engine's default where the memory allows, :mod:`gpu_sizer.sizing.fraction_fix`)
    or, the other side of a contradiction between a set fraction and the policy,
    ``minHeadroomFraction`` (what the spec's fraction leaves), ``targetConcurrency`` (what the
    best class holds), ``maxModelLen`` (largest that serves, by bisection), an FP8 KV cache, a
    catalog class the spec's ``gpuClasses`` leaves out (``catalog``), a larger tensor-parallel
    size. The caller orders them by what they cost (:func:`gpu_sizer.sizing.fix_cost.fix_cost`).
    """
    inf = spec.inference
    arch = spec.model.architecture
    assert inf is not None and arch is not None
    out: list[FixCandidate] = []

    def add(path: str, value: Any, changed: GPUWorkloadSpec, what: str) -> None:
        out.append((path, value, _first_serving(changed, allowed), what))

    room = spec.placement.min_headroom_fraction
    plans = class_plans(spec, allowed)
    flag = fraction_fix(spec, allowed, plans)
    if flag is not None:
        out.append(
            (
                "spec.inference.gpuMemoryUtilization",
                flag.fraction,
                flag,
                f"gpuMemoryUtilization {flag.fraction:g} ({_flag_name(flag)}, "
                f"{flag.headroom:.0%} headroom)",
            )
        )
    if inf.gpu_memory_utilization is not None:
        # The fraction is the user's: the other side of the contradiction is the policy.
        held = [
            p
            for p in plans
            if p.error is None and p.max_concurrency >= inf.required_concurrency and p.headroom > 0
        ]
        roomiest = max(held, key=lambda p: p.headroom, default=None)
        if roomiest is not None and roomiest.headroom < room:
            value = math.floor(roomiest.headroom * 100) / 100
            if value > 0:
                placement = spec.placement.model_copy(update={"min_headroom_fraction": value})
                changed = spec.model_copy(update={"placement": placement})
                out.append(
                    (
                        "spec.placement.minHeadroomFraction",
                        value,
                        _first_serving(changed, allowed),
                        f"minHeadroomFraction {value:g}",
                    )
                )
    started = [p for p in plans if p.error is None and p.headroom >= room]
    best = max(started, key=lambda p: p.max_concurrency, default=None)
    if best is not None and 1 <= best.max_concurrency < inf.required_concurrency:
        target = math.floor(best.max_concurrency)
        add(
            "spec.inference.targetConcurrency",
            target,
            _with(spec, target_concurrency=float(target)),
            f"targetConcurrency {target}",
        )
    found = _largest_serving(
        MIN_FIX_MAX_MODEL_LEN,
        inf.max_model_len - 1,
        lambda n: _with(spec, max_model_len=n),
        allowed,
    )
    if found is not None:
        length = found[0]
        if length >= 1024:
            length -= length % 256
        add(
            "spec.inference.maxModelLen",
            length,
            _with(spec, max_model_len=length),
            f"maxModelLen {length}",
        )
    elif inf.max_model_len > MIN_FIX_MAX_MODEL_LEN:
        length = MIN_FIX_MAX_MODEL_LEN
        add(
            "spec.inference.maxModelLen",
            length,
            _with(spec, max_model_len=length),
            f"maxModelLen {length}",
        )
    if inf.kv_cache_dtype is KvCacheDtype.auto and spec.model.dtype not in (
        Dtype.float8_e4m3fn,
        Dtype.float8_e5m2,
    ):
        add(
            "spec.inference.kvCacheDtype",
            "fp8",
            _with(spec, kv_cache_dtype=KvCacheDtype.fp8),
            "kvCacheDtype fp8",
        )
    larger = _larger_class(spec, allowed, catalog)
    if larger is not None:
        names = [*spec.placement.gpu_classes, larger.gpu.name]
        out.append(
            ("spec.placement.gpuClasses", names, larger, f"gpuClasses add {larger.gpu.name}")
        )
    for tp in range(inf.tensor_parallel_size + 1, MAX_TENSOR_PARALLEL + 1):
        if arch.num_attention_heads % tp or (arch.kv_heads % tp and tp % arch.kv_heads):
            continue
        changed = _with(spec, tensor_parallel_size=tp)
        found_tp = _first_serving(changed, allowed)
        if found_tp is not None:
            out.append(
                ("spec.inference.tensorParallelSize", tp, found_tp, f"tensorParallelSize {tp}")
            )
            break
    return out
