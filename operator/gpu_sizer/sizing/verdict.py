"""One verdict for a spec: estimate, class choice, headroom, computed fixes, warnings. Pure.

The webhook, ``gpu-sizer estimate`` and the controller all call :func:`assess`, so the same spec
and catalog give the same verdict and message everywhere.

When nothing fits, the fixes are *computed*, never canned: each one is a changed copy of the spec
re-estimated by :func:`gpu_sizer.budget.estimate` (the largest ``maxNumSeqs`` and ``maxModelLen``
are found by bisection, which relies on the memory model being monotonic in tokens — a property
the budget tests check with hypothesis).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from gpu_sizer.api import (
    Basis,
    CalibrationStatus,
    Dtype,
    Engine,
    EstimateStatus,
    GPUWorkloadSpec,
    KvCacheDtype,
    ParallelStrategy,
    RecommendationStatus,
)
from gpu_sizer.budget import estimate
from gpu_sizer.budget.diffusion.fixes import generation_candidates
from gpu_sizer.budget.engines import EnginePlan, command_args, models_pool
from gpu_sizer.budget.estimate import plan_estimate
from gpu_sizer.catalog import (
    DEFAULT_CATALOG,
    Choice,
    GPUClass,
    allowed_classes,
    choose_class,
    choose_fitting,
    fits,
    headroom_fraction,
)
from gpu_sizer.inventory.nodes import ClassCapacity
from gpu_sizer.records.calibration import Calibration, calibrate, engine_of
from gpu_sizer.sizing import pool_verdict
from gpu_sizer.sizing.assessment import (
    Assessment,
    Fix,
    Verdict,
    cap_figures,
    gib,
    incomplete_text,
    largest_components,
    mig_names,
    parallel_path,
    presence_note,
    room,
    sizing_failed,
    spec_warnings,
)
from gpu_sizer.sizing.fix_cost import fix_cost
from gpu_sizer.sizing.host_memory import held_by_nodes, host_problem
from gpu_sizer.sizing.placement import snippets
from gpu_sizer.sizing.workers import bound_problem, recommendation_fields

__all__ = ["assess", "assess_or_raise"]

#: Tensor-parallel sizes tried for the TP fix: GPUs of one node (vLLM, TGI and SGLang shard
#: attention heads across a node's GPUs; beyond 8 they need pipeline parallelism across nodes).
MAX_TENSOR_PARALLEL: Final = 8
#: Data-parallel sizes tried for the ZeRO-3 fix.
MAX_DATA_PARALLEL: Final = 64
#: Shortest maxModelLen a fix may suggest, in tokens. A serving context shorter than this cannot
#: hold a typical chat request (a system prompt of a few hundred tokens plus the question and the
#: answer), so a smaller "fix" would make the spec fit by making the service useless; below it
#: the fix is reported as not enough alone.
MIN_FIX_MAX_MODEL_LEN: Final = 512
#: Engines that implement tensor parallelism (transformers' device_map splits layers instead).
TP_ENGINES: Final = frozenset({Engine.vllm, Engine.tgi, Engine.sglang})


def assess(
    spec: GPUWorkloadSpec,
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG,
    *,
    present: Collection[str] | None = None,
    calibration: Calibration | None = None,
    capacity: Mapping[str, ClassCapacity] | None = None,
    host_memory: Mapping[str, int] | None = None,
) -> Assessment:
    """:func:`assess_or_raise`, with any exception the memory model raises turned into the
    verdict ``SizingFailed`` (fail safe: never admitted), whose message names the exception.

    The webhook, the CLI and the operator all call this, so a bug in sizing is the same
    denial everywhere instead of an HTTP 500 from the webhook and a workload left without
    status by the operator.
    """
    try:
        return assess_or_raise(
            spec,
            catalog,
            present=present,
            calibration=calibration,
            capacity=capacity,
            host_memory=host_memory,
        )
    except Exception as exc:  # the barrier: any bug becomes a verdict
        return sizing_failed(spec, exc)


def assess_or_raise(
    spec: GPUWorkloadSpec,
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG,
    *,
    present: Collection[str] | None = None,
    calibration: Calibration | None = None,
    capacity: Mapping[str, ClassCapacity] | None = None,
    host_memory: Mapping[str, int] | None = None,
) -> Assessment:
    """Estimate ``spec`` and choose the first allowed class (rank order) with the headroom.

    ``calibration`` (``--calibration``, factors learned from measurement records, see
    :mod:`gpu_sizer.records.calibration`): in mode Report the estimate shows the factors of its
    engine on the chosen class; in mode Apply each class is judged by the estimate with that class's
    factors, so the verdict and the recommendation follow the calibrated figures.

    ``present`` names the classes that have nodes in the cluster (the operator's inventory);
    present classes are preferred, and ``recommendation.cheapestFittingClass`` still names the
    cheapest catalog class that fits. ``gpuCount`` is only the parallelism the spec declares;
    a job wider than a node is split into workers (:mod:`gpu_sizer.sizing.workers`), and a class
    whose nodes cannot hold it (``capacity``: the inventory's GPUs per class; without it the bound
    of :data:`~gpu_sizer.sizing.workers.MAX_JOB_GPUS`) is not chosen. Nor is a class none of
    whose nodes lets a pod request the host memory the estimate holds per node
    (``host_memory``: the inventory's largest ``status.allocatable.memory`` per class, bytes;
    see :mod:`gpu_sizer.sizing.host_memory`), for the spec and for each fix.

    Verdicts: ``Fits``; ``NoSafeHeadroom`` (no allowed class leaves
    ``spec.placement.minHeadroomFraction`` free; computed fixes attached); ``Incomplete`` (the
    estimate misses a component the workload needs and what it counts fits some class: a lower
    bound, see :class:`Verdict`); ``UnknownGpuClass`` (``spec.placement.gpuClasses`` names a
    class not in ``catalog``).
    """
    names = spec.placement.gpu_classes
    known = {c.name for c in catalog}
    unknown = [n for n in names if n not in known]
    if unknown:
        return Assessment(
            cap_figures(estimate(spec))[0],
            Verdict.UnknownGpuClass,
            "spec.placement.gpuClasses: unknown GPU class "
            + ", ".join(repr(n) for n in unknown)
            + "; known classes: "
            + ", ".join(c.name for c in catalog if not c.is_mig)
            + mig_names(catalog),
        )
    allowed = allowed_classes(catalog, names)
    if spec.gpu_count > 1:
        # A MIG device has no peer-to-peer or NVLink and CUDA sees one per process: sharded
        # work (NCCL across GPUs) never runs on slices (NVIDIA MIG User Guide, "Concepts").
        whole = [c for c in allowed if not c.is_mig]
        if not whole:
            return Assessment(
                cap_figures(estimate(spec))[0],
                Verdict.NoSafeHeadroom,
                f"spec.placement.gpuClasses allows only MIG slices, and the spec shards over "
                f"{spec.gpu_count} GPUs; MIG devices cannot be combined (no peer-to-peer): allow a "
                "whole-GPU class, or shard over one GPU",
            )
        allowed = whole
    if spec.gpu_count == 1 and not capacity:
        bounds: dict[str, str | None] = dict.fromkeys((c.name for c in allowed), None)
    else:  # one GPU fits any node; only a job of several, or an inventory, has a bound
        bounds = {c.name: bound_problem(spec, c, capacity) for c in allowed}
    held = [c for c in allowed if bounds[c.name] is None]
    if not held:
        widest = max(allowed, key=lambda c: c.gpus_per_node)
        return Assessment(
            cap_figures(estimate(spec))[0],
            Verdict.NoSafeHeadroom,
            f"{parallel_path(spec)}: no allowed class can hold the job: {bounds[widest.name]}; "
            "reduce the parallel sizes or allow a class the cluster has enough of",
        )
    allowed = held
    min_room = spec.placement.min_headroom_fraction
    warnings = spec_warnings(spec)
    engine = engine_of(spec)
    if models_pool(spec):
        pooled = _assess_pool(spec, allowed, present, bool(names), warnings, catalog)
        on = pooled.estimate.gpu_class
        if calibration is None or on is None:
            return pooled
        return replace(
            pooled, estimate=calibrate(pooled.estimate, engine, on, calibration, pool=True)
        )
    est, capped = cap_figures(estimate(spec))
    every = allowed  # the fixes judge each class by their own host memory
    allowed = held_by_nodes(est.host_bytes_per_node or 0, every, host_memory)
    if not allowed:
        problem = host_problem(est.host_bytes_per_node or 0, every, host_memory)
        message = (
            f"{problem}: offload fewer components (spec.generation.offload, a component's "
            "offload or device) or allow a class whose nodes have more memory"
        )
        return Assessment(est, Verdict.NoSafeHeadroom, message, None, [], warnings)
    if calibration is None:
        choice = choose_class(est.per_gpu.total_bytes, min_room, allowed, present)
    else:
        est, choice = _calibrated_choice(est, engine, allowed, present, min_room, calibration)
    required = est.per_gpu.total_bytes
    if choice is None:
        largest = max(allowed, key=lambda c: c.usable)
        fixes = [] if capped else _fixes(spec, est, every, largest, host_memory)
        scope = "allowed class" if names else "class in the catalog"
        message = (
            f"needs {gib(required)} per GPU x{est.gpu_count} ({largest_components(est)}); "
            f"the largest {scope}, {largest.name} ({gib(largest.usable)} usable), "
            f"{room(largest, required)}; {min_room:.0%} headroom required "
            "(spec.placement.minHeadroomFraction)."
        )
        good = [str(f) for f in fixes if f.fits]
        weak = [str(f) for f in fixes if not f.fits]
        parts = []
        if good:
            # An incomplete estimate stays a lower bound after a fix: say what the fix fits.
            lead = "What is counted fits with" if est.missing_components else "Fits with"
            parts.append(f"{lead} any of: " + "; ".join(good) + ".")
        if weak:
            parts.append("Not enough alone: " + "; ".join(weak) + ".")
        if parts:
            message += "\n" + " ".join(parts)
        if est.missing_components:
            message += "\nThe real need is higher: " + incomplete_text(est) + "."
        return Assessment(est, Verdict.NoSafeHeadroom, message, None, fixes, warnings)
    cls = choice.gpu_class
    rec = RecommendationStatus(
        gpu_class=cls.name,
        gpu_count=est.gpu_count,
        gpu_memory_bytes=cls.usable,
        required_bytes_per_gpu=required,
        headroom_fraction=round(choice.headroom_fraction, 4),
        basis=Basis.Estimate,
        present_in_cluster=choice.present_in_cluster,
        cheapest_fitting_class=choice.cheapest.name if choice.cheapest else cls.name,
        **recommendation_fields(spec, cls, est.host_bytes_per_node, capacity, catalog),
    )
    if est.missing_components:
        message = (
            incomplete_text(est)
            + f"; what is counted needs {gib(required)} per GPU x{est.gpu_count} "
            f"({largest_components(est)}), a lower bound: at least {cls.name}"
        )
        return Assessment(est, Verdict.Incomplete, message, None, [], warnings, rec)
    if choice.headroom_fraction < 2 * min_room:
        warnings.append(
            f"headroom on {cls.name} is {choice.headroom_fraction:.0%}, under twice the required "
            f"{min_room:.0%}: a runtime or batch change may not fit"
        )
    message = (
        f"{cls.name} x{est.gpu_count}: needs {gib(required)} of {gib(cls.usable)} per "
        f"GPU ({largest_components(est)}), {choice.headroom_fraction:.0%} headroom"
    )
    message += presence_note(choice, warnings)
    return Assessment(est, Verdict.Fits, message, rec, [], warnings)


def _calibrated_choice(
    analytic: EstimateStatus,
    engine: str,
    allowed: Sequence[GPUClass],
    present: Collection[str] | None,
    min_room: float,
    calibration: Calibration,
) -> tuple[EstimateStatus, Choice | None]:
    """The class chosen when each allowed class is judged by the estimate with its own factors
    (identical to the analytic choice unless the mode is Apply), and the estimate on it. The
    factors of the classes calibration ruled out (the analytic estimate fits them, the
    calibrated one does not) are kept in ``calibration.ruledOut``, and a note names them."""
    fitting: list[tuple[GPUClass, float]] = []
    ruled: list[tuple[GPUClass, EstimateStatus]] = []
    for c in allowed:
        on = calibrate(analytic, engine, c.name, calibration)
        need = on.per_gpu.total_bytes
        if fits(c, need, min_room):
            fitting.append((c, headroom_fraction(c.usable, need)))
        elif fits(c, analytic.per_gpu.total_bytes, min_room):
            ruled.append((c, on))
    choice = choose_fitting(fitting, present)
    on_class = choice.gpu_class if choice else max(allowed, key=lambda c: c.usable)
    est = calibrate(analytic, engine, on_class.name, calibration)
    if not ruled:
        return est, choice
    entries = [f for _, on in ruled if on.calibration for f in on.calibration.factors]
    cal = est.calibration or CalibrationStatus(
        mode=calibration.mode,
        gpu_class=on_class.name,
        adjusted=False,
        analytic_total_bytes=analytic.per_gpu.total_bytes,
        analytic_runtime_overhead_bytes=analytic.per_gpu.runtime_overhead_bytes,
        message="no factors for this class",
    )
    notes = [
        f"calibration (--calibration=apply) ruled out {c.name}: its factors raise the need "
        f"from {gib(analytic.per_gpu.total_bytes)} to {gib(on.per_gpu.total_bytes)} per GPU"
        for c, on in ruled
    ]
    return (
        est.model_copy(
            update={
                "calibration": cal.model_copy(update={"ruled_out": entries}),
                "notes": [*est.notes, *notes],
            }
        ),
        choice,
    )


def _assess_pool(
    spec: GPUWorkloadSpec,
    allowed: Sequence[GPUClass],
    present: Collection[str] | None,
    named: bool,
    warnings: list[str],
    catalog: Sequence[GPUClass],
) -> Assessment:
    """The verdict for a pre-allocating engine: per class, see :mod:`gpu_sizer.sizing.pool_verdict`.

    Classes are planned in rank order until the cheapest serving one (and, with an inventory,
    the cheapest present one) is found: an admission review rarely needs more than a few."""
    on = pool_verdict.planner(spec)
    plans: list[EnginePlan] = []
    serving: list[tuple[GPUClass, float]] = []
    for cls in sorted(allowed, key=lambda c: (c.rank, c.memory_bytes, c.name)):
        plan = on(cls)
        plans.append(plan)
        if pool_verdict.serves(spec, plan):
            serving.append((cls, plan.headroom))
            if present is None or cls.name in present:
                break
    choice = choose_fitting(serving, present)
    if choice is None:
        largest = on(max(allowed, key=lambda c: (c.usable, -c.rank)))
        est, capped = cap_figures(plan_estimate(spec, largest))
        fixes = [] if capped else _pool_fixes(spec, allowed, largest, catalog)
        scope = "allowed class" if named else "class in the catalog"
        message = (
            f"on the largest {scope}, {largest.gpu.name} x{est.gpu_count}: "
            f"{pool_verdict.shortfall(spec, largest)}."
        )
        good = [str(f) for f in fixes if f.fits]
        weak = [str(f) for f in fixes if not f.fits]
        parts = []
        if good:
            parts.append("Fits with any of: " + "; ".join(good) + ".")
        if weak:
            parts.append("Not enough alone: " + "; ".join(weak) + ".")
        if parts:
            message += "\n" + " ".join(parts)
        return Assessment(est, Verdict.NoSafeHeadroom, message, None, fixes, warnings)
    plan = next(p for p in plans if p.gpu.name == choice.gpu_class.name)
    est, _ = cap_figures(plan_estimate(spec, plan))
    cls = plan.gpu
    rec = RecommendationStatus(
        gpu_class=cls.name,
        gpu_count=est.gpu_count,
        gpu_memory_bytes=cls.usable,
        required_bytes_per_gpu=plan.total,
        headroom_fraction=round(plan.headroom, 4),
        basis=Basis.Estimate,
        present_in_cluster=choice.present_in_cluster,
        cheapest_fitting_class=choice.cheapest.name if choice.cheapest else cls.name,
        engine_args=dict(plan.engine_args),
        engine_command_args=command_args(plan.engine_args),
        **snippets(cls, est.gpu_count, catalog=catalog),
    )
    message = (
        f"{cls.name} x{est.gpu_count}: {pool_verdict.describe(spec, plan)}, "
        f"{plan.headroom:.0%} headroom"
    )
    message += presence_note(choice, warnings)
    return Assessment(est, Verdict.Fits, message, rec, [], warnings)


def _pool_fixes(
    spec: GPUWorkloadSpec,
    allowed: Sequence[GPUClass],
    largest: EnginePlan,
    catalog: Sequence[GPUClass] = (),
) -> list[Fix]:
    """The computed fixes of an unserved pre-allocating spec, cheapest first
    (:func:`gpu_sizer.sizing.fix_cost.fix_cost`)."""
    out = []
    for path, value, plan, what in pool_verdict.fix_candidates(spec, allowed, largest, catalog):
        if plan is not None:
            where = (
                f"{plan.gpu.name} x{spec.gpu_count}: KV pool {gib(plan.kv_pool)}, "
                f"{plan.max_concurrency:.1f} x maxModelLen"
            )
            if path == "spec.inference.tensorParallelSize":
                where = f"{plan.gpu.name} x{value}: KV pool {gib(plan.kv_pool)}"
        else:
            where = f"still not enough on {largest.gpu.name}"
        out.append(
            Fix(
                path,
                value,
                plan.total if plan else largest.total,
                plan.gpu.name if plan else None,
                value if path == "spec.inference.tensorParallelSize" else spec.gpu_count,
                f"{what} ({where})",
            )
        )
    return sorted(out, key=lambda f: fix_cost(f.field))


# --- computed fixes ----------------------------------------------------------------------------


def _with(spec: GPUWorkloadSpec, part: str, **changes: Any) -> GPUWorkloadSpec:
    """A copy of ``spec`` with ``spec.<part>`` fields changed (no re-validation: estimate only)."""
    sub = getattr(spec, part)
    return spec.model_copy(update={part: sub.model_copy(update=changes)})


def _largest_fitting(
    lo: int,
    hi: int,
    estimate_at: Callable[[int], EstimateStatus],
    ok: Callable[[EstimateStatus], bool],
    *,
    target_bytes: float,
    above: EstimateStatus,
) -> int | None:
    """Largest ``n`` in ``[lo, hi]`` with ``ok(estimate_at(n))``, else ``None``.

    Assumes ``ok`` holds up to some ``n`` and fails above it (the memory model is monotonic in
    tokens, which the budget's hypothesis tests check), and that ``above``, the estimate at
    ``hi + 1``, is not ok (the spec's own value, which does not fit). The answer is then the one
    boundary, the same that bisection finds (``tests/catalog/test_fix_search.py`` compares the
    two), in fewer estimates: the per-GPU total is close to affine in ``maxNumSeqs`` and
    ``maxModelLen`` (KV cache and activations grow with tokens), so each step guesses where it
    crosses ``target_bytes`` by linear interpolation between the bracket's ends, and a step that
    fails to halve the bracket is followed by a bisection step, which bounds the worst case to
    twice bisection's ~log2(hi - lo) estimates. Typically 3 to 5 estimates instead of 14 to 24.
    """
    if hi < lo:
        return None
    low = estimate_at(lo)
    if not ok(low):
        return None
    good, good_bytes = lo, low.per_gpu.total_bytes
    bad, bad_bytes = hi + 1, above.per_gpu.total_bytes
    bisect = False
    while bad - good > 1:
        width = bad - good
        if bisect or bad_bytes <= good_bytes:
            guess = (good + bad) // 2
        else:
            step = (target_bytes - good_bytes) * width / (bad_bytes - good_bytes)
            guess = good + int(min(max(step, 1), width - 1))
        e = estimate_at(guess)
        if ok(e):
            good, good_bytes = guess, e.per_gpu.total_bytes
        else:
            bad, bad_bytes = guess, e.per_gpu.total_bytes
        bisect = not bisect and (bad - good) * 2 > width
    return good


def _fixes(
    spec: GPUWorkloadSpec,
    est: EstimateStatus,
    allowed: Sequence[GPUClass],
    largest: GPUClass,
    host_memory: Mapping[str, int] | None = None,
) -> list[Fix]:
    min_room = spec.placement.min_headroom_fraction
    # Where "fits on the largest class" turns false; steers the search, never decides it.
    target_bytes = largest.usable * (1 - min_room)
    estimates: dict[tuple[str, str, Any], EstimateStatus] = {}

    def estimated(part: str, field: str, value: Any) -> tuple[GPUWorkloadSpec, EstimateStatus]:
        """The spec with ``spec.<part>.<field>`` set to ``value``, and its estimate, memoized:
        the searches and the fixes they report re-visit the same values."""
        changed = _with(spec, part, **{field: value})
        key = (part, field, value)
        if key not in estimates:
            estimates[key] = estimate(changed)
        return changed, estimates[key]

    def on_largest(e: EstimateStatus) -> bool:
        return fits(largest, e.per_gpu.total_bytes, min_room)

    def fix(
        path: str, value: Any, changed: GPUWorkloadSpec, what: str, e: EstimateStatus | None = None
    ) -> Fix:
        e = estimate(changed) if e is None else e
        host = e.host_bytes_per_node or 0
        pool = held_by_nodes(host, allowed, host_memory)
        choice = choose_class(e.per_gpu.total_bytes, min_room, pool) if pool else None
        if choice:
            where = f"{choice.gpu_class.name} x{e.gpu_count}"
        elif not pool:
            where = "more host memory per node than the allowed classes' nodes have"
        else:
            where = f"still too big for {largest.name}"
        # A fix that changes what the host holds, or how (an offload mode), says what the node
        # must hold: the GPU figure alone would not tell a platform engineer the RAM it needs.
        moved = _moves_to_host(spec, est.host_bytes_per_node or 0, changed, host)
        held = f", {gib(host)} host memory per node" if moved else ""
        return Fix(
            path,
            value,
            e.per_gpu.total_bytes,
            choice.gpu_class.name if choice else None,
            e.gpu_count,
            f"{what} ({gib(e.per_gpu.total_bytes)} per GPU{held}, {where})",
        )

    out: list[Fix] = []
    if spec.generation is not None:
        # Candidates come cheapest first (time per image). A searched field (batchSize, largest
        # first; ulyssesDegree, smallest first) reports its first value that fits; a batch that
        # never fits is reported at its floor (1) as not enough alone.
        searched = ("batchSize", "ulyssesDegree")
        tried: list[tuple[str, Fix]] = []
        for path, value, changed, what in generation_candidates(spec):
            if path.endswith(searched) and any(p == path and f.fits for p, f in tried):
                continue
            tried.append((path, fix(path, value, changed, what)))
        for i, (path, candidate) in enumerate(tried):
            if path.endswith(searched) and not candidate.fits:
                later = [f for p, f in tried[i + 1 :] if p == path]
                if (
                    later
                    or path.endswith("ulyssesDegree")
                    or any(p == path and f.fits for p, f in tried)
                ):
                    continue
            out.append(candidate)
        return out
    inf, tr = spec.inference, spec.training
    arch = spec.model.architecture
    # A fix that acts only on an uncounted component would change nothing in the figures.
    missing = {m.component for m in est.missing_components}
    if inf is not None and "kvCacheBytes" not in missing:
        seqs = _largest_fitting(
            1,
            inf.max_num_seqs - 1,
            lambda n: estimated("inference", "max_num_seqs", n)[1],
            on_largest,
            target_bytes=target_bytes,
            above=est,
        )
        if seqs is None and inf.max_num_seqs > 1:
            seqs = 1  # the floor: reported as not enough alone
        if seqs is not None:
            changed, e = estimated("inference", "max_num_seqs", seqs)
            out.append(fix("spec.inference.maxNumSeqs", seqs, changed, f"maxNumSeqs {seqs}", e))
        floor = MIN_FIX_MAX_MODEL_LEN
        length = _largest_fitting(
            floor,
            inf.max_model_len - 1,
            lambda n: estimated("inference", "max_model_len", n)[1],
            on_largest,
            target_bytes=target_bytes,
            above=est,
        )
        if length is None and inf.max_model_len > floor:
            length = floor  # the floor: reported as not enough alone
        if length is not None:
            if length >= 1024:
                length -= length % 256  # a readable figure; smaller still fits (monotonic)
            changed, e = estimated("inference", "max_model_len", length)
            out.append(
                fix("spec.inference.maxModelLen", length, changed, f"maxModelLen {length}", e)
            )
    if inf is not None:
        if (
            inf.kv_cache_dtype is KvCacheDtype.auto
            and spec.model.dtype not in (Dtype.float8_e4m3fn, Dtype.float8_e5m2)
            and est.per_gpu.kv_cache_bytes > 0
        ):
            out.append(
                fix(
                    "spec.inference.kvCacheDtype",
                    "fp8",
                    _with(spec, "inference", kv_cache_dtype=KvCacheDtype.fp8),
                    "kvCacheDtype fp8",
                )
            )
        if arch is not None and inf.engine in TP_ENGINES:
            for tp in range(inf.tensor_parallel_size + 1, MAX_TENSOR_PARALLEL + 1):
                if arch.num_attention_heads % tp or (arch.kv_heads % tp and tp % arch.kv_heads):
                    continue
                changed, e = estimated("inference", "tensor_parallel_size", tp)
                if choose_class(e.per_gpu.total_bytes, min_room, allowed):
                    out.append(
                        fix(
                            "spec.inference.tensorParallelSize",
                            tp,
                            changed,
                            f"tensorParallelSize {tp}",
                            e,
                        )
                    )
                    break
    if tr is not None:
        if not tr.activation_checkpointing and "activationBytes" not in missing:
            out.append(
                fix(
                    "spec.training.activationCheckpointing",
                    True,
                    _with(spec, "training", activation_checkpointing=True),
                    "activationCheckpointing true",
                )
            )
        par = tr.parallelism
        full_shard = (ParallelStrategy.zero3, ParallelStrategy.fsdp_full_shard)
        if par.data_parallel_size > 1 and par.strategy not in full_shard:
            changed = _with_strategy(spec, ParallelStrategy.zero3, par.data_parallel_size)
            out.append(
                fix(
                    "spec.training.parallelism.strategy",
                    "zero3",
                    changed,
                    f"parallelism.strategy zero3 over the {par.data_parallel_size} "
                    "data-parallel ranks",
                )
            )
        elif par.data_parallel_size == 1 or par.strategy in full_shard:
            strategy = par.strategy if par.strategy in full_shard else ParallelStrategy.zero3
            dp = par.data_parallel_size * 2
            while dp <= MAX_DATA_PARALLEL:
                changed = _with_strategy(spec, strategy, dp)
                e = estimate(changed)
                if choose_class(e.per_gpu.total_bytes, min_room, allowed):
                    out.append(
                        fix(
                            "spec.training.parallelism.dataParallelSize",
                            dp,
                            changed,
                            f"parallelism {strategy.value} with dataParallelSize {dp}",
                            e,
                        )
                    )
                    break
                dp *= 2
    # cheapest first (gpu_sizer.sizing.fix_cost); image and video fixes returned above keep theirs
    return sorted(out, key=lambda f: fix_cost(f.field))


def _moves_to_host(spec: GPUWorkloadSpec, before: int, changed: GPUWorkloadSpec, host: int) -> bool:
    """Whether the fix ``changed``, holding ``host`` bytes of host memory per node where
    ``spec`` holds ``before``, should say so: a fix that puts more there (an offload, a larger
    offloaded figure); for an image or video pipeline also one that changes the figure the
    other way (float8 weights offloaded) or changes how the host holds it (``Model`` to
    ``Group`` or ``Sequential``: the same bytes, but the fix line must not leave the reader to
    find the spec's figure in a warning). A fix that leaves both alone (vaeTiling under the
    spec's offload) repeats nothing."""
    if host <= 0:
        return False
    if spec.generation is None or changed.generation is None:
        return host > before
    return host != before or changed.generation.offload is not spec.generation.offload


def _with_strategy(spec: GPUWorkloadSpec, strategy: ParallelStrategy, dp: int) -> GPUWorkloadSpec:
    assert spec.training is not None
    tr = spec.training
    par = tr.parallelism.model_copy(update={"strategy": strategy, "data_parallel_size": dp})
    return spec.model_copy(update={"training": tr.model_copy(update={"parallelism": par})})
