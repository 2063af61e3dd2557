#!/usr/bin/env python3
"""The KV-pool table of docs/accuracy.md: published serving runs, gpu-sizer, aiconfigurator.

Reads ``tests/serving/figures.py`` (each run's spec, GPU and what the engine logged), plans it
with gpu-sizer and, where NVIDIA's aiconfigurator (PyPI ``aiconfigurator-core``, a dev tool
here, never a runtime dependency) has the model and GPU, asks
``aiconfigurator_core.sdk.memory.estimate_kv_cache`` for the same run. Prints a Markdown table
(case, published, gpu-sizer, peer) and the counts: runs within 10 % of the logged pool, and
unsafe misses (a run the engine refused that the estimate admits, or a pool over-predicted by
more than 10 %, which admits what does not fit).

    PYTHONPATH=. python hack/serving-accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.serving.figures import FIGURES, GIB, Figure

from gpu_sizer.budget.estimate import engine_plans
from gpu_sizer.pool_verdict import serves

TOLERANCE = 0.10


def ours(figure: Figure) -> tuple[float, bool]:
    """(planned KV pool GiB, admitted on the run's GPU)."""
    spec = figure.parsed()
    plan = engine_plans(spec, [figure.gpu], spec.placement.min_headroom_fraction)[0]
    return plan.kv_pool / GIB, serves(spec, plan)


def peer(figure: Figure) -> tuple[float, bool] | None:
    """aiconfigurator's (KV pool GiB, admitted), or None where it has no model or no data."""
    if figure.peer is None:
        return None
    try:
        from aiconfigurator_core.sdk.memory import estimate_kv_cache
    except ImportError:
        return None
    model, system, version = figure.peer
    spec = figure.parsed()
    inf = spec.inference
    assert inf is not None
    try:
        out = estimate_kv_cache(
            model, system, "vllm", version,
            max_num_tokens=inf.max_num_batched_tokens or 8192,
            max_batch_size=inf.max_num_seqs,
            memory_fraction_kind="of_total",
            memory_fraction_value=inf.gpu_memory_utilization or 0.9,
            tp_size=inf.tensor_parallel_size,
            gpu_memory_capacity_bytes_override=figure.gpu.usable,
        )  # fmt: skip
    except ValueError:
        return 0.0, False  # aiconfigurator: no KV budget (it refuses the run)
    pool = out["total_kv_size_bytes"] / GIB
    per_token = out["kv_size_per_token_bytes"]
    admitted = pool > 0 and out["total_kv_size_tokens"] >= inf.max_model_len
    del per_token
    return pool, admitted


def verdict(figure: Figure, pool: float, admitted: bool) -> tuple[bool, bool]:
    """(within tolerance, unsafe miss)."""
    if figure.refused:
        return not admitted, admitted
    assert figure.kv_gib is not None
    error = (pool - figure.kv_gib) / figure.kv_gib
    return abs(error) <= TOLERANCE, error > TOLERANCE


def main() -> None:
    rows = []
    counts = {"ours": [0, 0, 0], "peer": [0, 0, 0]}
    for f in FIGURES:
        if f.kv_gib is None and not f.refused:
            continue
        published = "refused" if f.refused else f"{f.kv_gib:.2f} GiB"
        if f.refused and f.kv_gib is not None:
            published = f"refused ({f.kv_gib:.2f} GiB)"
        pool, admitted = ours(f)
        ok, unsafe = verdict(f, pool, admitted)
        counts["ours"][0] += 1
        counts["ours"][1] += ok
        counts["ours"][2] += unsafe
        mine = f"{pool:.2f} GiB" + (
            "" if not f.refused else (", admitted" if admitted else ", not admitted")
        )
        other = peer(f)
        theirs = "n/a (model or GPU not in its data)"
        if other is not None:
            p_pool, p_admitted = other
            p_ok, p_unsafe = verdict(f, p_pool, p_admitted)
            counts["peer"][0] += 1
            counts["peer"][1] += p_ok
            counts["peer"][2] += p_unsafe
            theirs = f"{p_pool:.2f} GiB" + (
                "" if not f.refused else (", admitted" if p_admitted else ", not admitted")
            )
            counts.setdefault("both", [0, 0, 0, 0, 0])
            both = counts["both"]
            both[0] += 1
            both[1] += ok
            both[2] += unsafe
            both[3] += p_ok
            both[4] += p_unsafe
        rows.append(f"| {f.id} | {published} | {mine} | {theirs} |")
    print("| case | published | gpu-sizer | aiconfigurator |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    o = counts["ours"]
    print(
        f"\ngpu-sizer: {o[1]} of {o[0]} runs within {TOLERANCE:.0%} (or not admitted where the "
        f"engine refused), {o[2]} unsafe misses."
    )
    if "both" in counts:
        b = counts["both"]
        print(
            f"On the {b[0]} runs aiconfigurator can size: gpu-sizer {b[1]} within, {b[2]} unsafe; "
            f"aiconfigurator {b[3]} within, {b[4]} unsafe."
        )


if __name__ == "__main__":
    main()
