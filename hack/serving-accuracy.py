#!/usr/bin/env python3
"""The serving tables of docs/accuracy.md: published runs, gpu-sizer, aiconfigurator.

Reads ``tests/serving/figures.py`` (each run's spec, GPU and what the engine logged: vLLM,
SGLang and TGI), plans it with gpu-sizer and, where NVIDIA's aiconfigurator (PyPI
``aiconfigurator-core``, a dev tool here, never a runtime dependency) has the model, the GPU and
the engine (vLLM and SGLang; no TGI), asks ``aiconfigurator_core.sdk.memory.estimate_kv_cache``
for the same run: the same engine, the run's tensor/pipeline/data/expert parallelism, batched
tokens and sequences, memory fraction and usable GPU memory, and the checkpoint's quantization
modes (``Figure.peer_quant``: FP8, block FP8, MXFP4, FP8 KV cache). Prints Markdown: the case
table (case, engine, published, gpu-sizer, peer), the counts, and the KV-pool error by engine and
regime.

"Within" is 10 % of the logged pool, or not admitted where the engine refused; an *unsafe miss*
admits a run the engine refused, or over-predicts the pool by more than 10 %, which admits what
does not fit.

    PYTHONPATH=. python hack/serving-accuracy.py
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.serving.figures import FIGURES, GIB, Figure

from gpu_sizer.budget.engines import EnginePlan
from gpu_sizer.budget.estimate import engine_plans
from gpu_sizer.sizing.pool_verdict import serves

TOLERANCE = 0.10


def plan(figure: Figure) -> EnginePlan:
    spec = figure.parsed()
    return engine_plans(spec, [figure.gpu], spec.placement.min_headroom_fraction)[0]


def ours(figure: Figure) -> tuple[float, bool]:
    """(planned KV pool GiB, admitted on the run's GPU)."""
    spec = figure.parsed()
    p = plan(figure)
    return p.kv_pool / GIB, serves(spec, p)


def _peer_args(figure: Figure, p: EnginePlan) -> dict[str, Any]:
    spec = figure.parsed()
    inf = spec.inference
    assert inf is not None
    tp, dp = inf.tensor_parallel_size, inf.data_parallel_size
    if inf.enable_expert_parallel:
        moe = {"moe_tp_size": 1, "moe_ep_size": tp * dp}
    else:
        moe = {"moe_tp_size": tp * dp, "moe_ep_size": 1}
    return {
        "max_num_tokens": p.max_num_batched_tokens,
        "max_batch_size": inf.max_num_seqs,
        "memory_fraction_kind": "of_total",
        "memory_fraction_value": p.fraction,
        "tp_size": tp,
        "pp_size": inf.pipeline_parallel_size,
        "attention_dp_size": dp,
        **moe,
        "gpu_memory_capacity_bytes_override": figure.gpu.usable,
        **figure.peer_quant,
    }


def peer(figure: Figure) -> tuple[float, bool] | None:
    """aiconfigurator's (KV pool GiB, admitted), or None where it has no model, GPU or engine."""
    if figure.peer is None or figure.engine not in ("vllm", "sglang"):
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
            model, system, figure.engine, version, **_peer_args(figure, plan(figure))
        )
    except ValueError as exc:
        if "no KV" in str(exc) or "budget" in str(exc).lower():
            return 0.0, False  # aiconfigurator: no KV budget (it refuses the run)
        return None  # unsupported model/backend/GPU
    pool = out["total_kv_size_bytes"] / GIB
    need = inf.max_model_len if figure.engine == "vllm" else 1  # each engine's start rule
    return pool, pool > 0 and out["total_kv_size_tokens"] >= need


def verdict(figure: Figure, pool: float, admitted: bool) -> tuple[bool, bool]:
    """(within tolerance, unsafe miss)."""
    if figure.refused:
        return not admitted, admitted
    assert figure.kv_gib is not None
    error = (pool - figure.kv_gib) / figure.kv_gib
    return abs(error) <= TOLERANCE, error > TOLERANCE


def regime(figure: Figure, p: EnginePlan) -> str:
    """The engine, release and regime a run belongs to (for the error table)."""
    spec = figure.parsed()
    inf = spec.inference
    arch = spec.model.architecture
    assert inf is not None and arch is not None
    engine = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI"}[figure.engine]
    release = (
        p.version
        if figure.engine != "vllm"
        else ("V0" if p.version.startswith("0.6") else p.version.rsplit(".", 1)[0] + " V1")
    )
    moe = "MoE" if arch.experts else "dense"
    gpus = inf.tensor_parallel_size * inf.pipeline_parallel_size * inf.data_parallel_size
    layout = "1 GPU" if gpus == 1 else f"{gpus} GPUs"
    return f"{engine} {release}, {moe}, {layout}"


def _fmt(pool: float, refused: bool, admitted: bool) -> str:
    text = f"{pool:.2f} GiB"
    return text + ("" if not refused else (", admitted" if admitted else ", not admitted"))


def main() -> None:
    rows = []
    counts: dict[str, list[int]] = {"ours": [0, 0, 0], "both": [0, 0, 0, 0, 0]}
    errors: dict[str, list[float]] = defaultdict(list)
    refusals: dict[str, list[bool]] = defaultdict(list)
    for f in FIGURES:
        if f.kv_gib is None and not f.refused:
            continue
        p = plan(f)
        published = "refused" if f.refused else f"{f.kv_gib:.2f} GiB"
        if f.refused and f.kv_gib is not None:
            published = f"refused ({f.kv_gib:.2f} GiB)"
        pool, admitted = ours(f)
        ok, unsafe = verdict(f, pool, admitted)
        counts["ours"][0] += 1
        counts["ours"][1] += ok
        counts["ours"][2] += unsafe
        key = regime(f, p)
        if f.refused:
            refusals[key].append(admitted)
        else:
            assert f.kv_gib is not None
            errors[key].append(100 * (pool - f.kv_gib) / f.kv_gib)
        other = peer(f)
        theirs = "n/a (model, GPU or engine not in its data)"
        if other is not None:
            p_pool, p_admitted = other
            p_ok, p_unsafe = verdict(f, p_pool, p_admitted)
            theirs = _fmt(p_pool, f.refused, p_admitted)
            both = counts["both"]
            both[0] += 1
            both[1] += ok
            both[2] += unsafe
            both[3] += p_ok
            both[4] += p_unsafe
        case = f.id + (" (calibration)" if "calibration" in f.tags else "")
        rows.append(f"| {case} | {f.engine} | {published} | {_fmt(pool, f.refused, admitted)} "
                    f"| {theirs} |")  # fmt: skip
    print("| case | engine | published | gpu-sizer | aiconfigurator |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    o, b = counts["ours"], counts["both"]
    print(
        f"\ngpu-sizer: {o[1]} of {o[0]} runs within {TOLERANCE:.0%} (or not admitted where the "
        f"engine refused), {o[2]} unsafe misses."
    )
    print(
        f"On the {b[0]} runs aiconfigurator can size: gpu-sizer {b[1]} within, {b[2]} unsafe; "
        f"aiconfigurator {b[3]} within, {b[4]} unsafe."
    )
    print("\n| engine, release, regime | logged pools | KV-pool error (planned - logged) "
          "| refusals (none admitted?) |")  # fmt: skip
    print("|---|---|---|---|")
    for key in sorted(set(errors) | set(refusals)):
        errs = sorted(errors.get(key, []))
        spread = (
            ""
            if not errs
            else (
                f"{errs[0]:+.1f} %" if len(errs) == 1 else f"{errs[0]:+.1f} % to {errs[-1]:+.1f} %"
            )
        )
        ref = refusals.get(key, [])
        refused = "" if not ref else f"{len(ref)}: " + ("none admitted" if not any(ref)
                                                         else f"{sum(ref)} admitted")  # fmt: skip
        print(f"| {key} | {len(errs)} | {spread} | {refused} |")


if __name__ == "__main__":
    main()
