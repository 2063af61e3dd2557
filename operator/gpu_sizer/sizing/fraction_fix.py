"""The cheapest fix for a pre-allocating engine: its own memory flag. Pure.

vLLM's ``--gpu-memory-utilization``, SGLang's ``--mem-fraction-static`` and TGI's
``--cuda-memory-fraction`` decide how much of each GPU the engine takes at start and so how large
its KV pool is. Changing it costs the user nothing but the flag: no shorter context, no FP8 KV
cache, no larger GPU. gpu-sizer starts an engine at most at the engine's own default when the
spec leaves the flag unset (:func:`gpu_sizer.budget.engines.common.choose_fraction`), and some
defaults are low for the GPU: SGLang 0.5 reserves memory by GPU size (0.687 on an L4), so a model
whose weights nearly fill that share is refused while 0.8 would serve it with 15 % of the GPU
still free.

On one class a fraction *f* serves the spec when the engine starts, its pool holds the
concurrency and the footprint leaves the headroom (:func:`gpu_sizer.sizing.pool_verdict.serves`).
The first two only get better as *f* grows (a larger pool), the headroom only worse (a larger
footprint), except vLLM V1's refusal when the free memory at start is below the request, which
also comes with a larger *f*. So the fractions that serve form one interval, and the fix is its
end nearest the fraction the engine would run with now: the smallest that serves when raising
(the most headroom left), the largest when lowering. SGLang starts with a pool of one token and
then refuses longer prompts; raising, the fix goes on to the smallest fraction whose pool holds
one ``maxModelLen`` request where the headroom allows one (a service for the spec's context),
and stays at the smallest that starts otherwise. Every candidate is planned by the engine model,
never interpolated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from gpu_sizer.api import GPUWorkloadSpec
from gpu_sizer.budget.engines import EnginePlan, Planner
from gpu_sizer.budget.estimate import engine_planner
from gpu_sizer.catalog import GPUClass

__all__ = ["MAX_FRACTION", "fraction_fix"]

#: The largest fraction a fix suggests (the engines accept up to 1.0; nothing else would run).
MAX_FRACTION: Final = 0.99
#: The smallest, and the grid the search walks (the flags take two decimals; SGLang's default
#: has three, which a fix need not copy).
MIN_FRACTION: Final = 0.05
STEP: Final = 0.01


def _serves(spec: GPUWorkloadSpec, plan: EnginePlan) -> bool:
    from gpu_sizer.sizing.pool_verdict import serves

    return serves(spec, plan)


def _grid(low: float, high: float) -> list[float]:
    lo, hi = round(low / STEP), round(high / STEP)
    return [round(i * STEP, 2) for i in range(lo, hi + 1)]


def _on_class(
    spec: GPUWorkloadSpec, planner: Planner, gpu: GPUClass, now: EnginePlan
) -> EnginePlan | None:
    """The serving plan on ``gpu`` whose fraction is nearest ``now.fraction``, or ``None``.

    Upwards the walk stops where the headroom runs out (a larger fraction only takes more);
    downwards where the pool stops holding the concurrency or the engine refuses again after
    having started (a smaller fraction only shrinks the pool)."""
    inf = spec.inference
    assert inf is not None
    room = spec.placement.min_headroom_fraction
    ceiling = MAX_FRACTION if now.fraction_default < 1.0 else 1.0  # TGI's default is 1.0
    if now.weights + now.quant >= gpu.usable * ceiling:
        return None  # the weights alone take the largest share: no fraction helps here

    def on(fraction: float) -> EnginePlan:
        return planner(gpu, fraction)

    grid = _grid(MIN_FRACTION, ceiling)
    up: EnginePlan | None = None
    for fraction in (f for f in grid if f > now.fraction):
        plan = on(fraction)
        if plan.headroom < room:
            break
        if _serves(spec, plan):
            up = up or plan
            if plan.max_concurrency >= 1:
                up = plan
                break
    down: EnginePlan | None = None
    started = now.error is None
    for fraction in (f for f in reversed(grid) if f < now.fraction):
        plan = on(fraction)
        if _serves(spec, plan):
            down = plan
            break
        if plan.error is None and plan.max_concurrency < inf.required_concurrency:
            break
        if plan.error is not None and started:
            break
        started = started or plan.error is None
    found = [p for p in (up, down) if p is not None]
    return min(found, key=lambda p: abs(p.fraction - now.fraction), default=None)


def fraction_fix(
    spec: GPUWorkloadSpec, allowed: Sequence[GPUClass], plans: Sequence[EnginePlan]
) -> EnginePlan | None:
    """The plan of the cheapest allowed class (rank order) that serves ``spec`` with only the
    engine's fraction changed, at the fraction nearest the one it would run with, or ``None``.

    :param plans: the spec's own plan on each class of ``allowed`` (same order).
    """
    order = sorted(range(len(allowed)), key=lambda i: (allowed[i].rank, allowed[i].memory_bytes))
    planner = engine_planner(spec, spec.placement.min_headroom_fraction)
    for i in order:
        found = _on_class(spec, planner, allowed[i], plans[i])
        if found is not None:
            return found
    return None
