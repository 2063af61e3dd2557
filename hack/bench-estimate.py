#!/usr/bin/env python3
"""Benchmark the admission path on one core: parse + validate + estimate + choose class.

Each iteration takes one example document (plain data, as the webhook receives it after JSON
decoding), runs ``parse_workload`` (pydantic validation with every cross-field rule) and
``sizing.assess`` (the memory model and the class choice), timed with ``time.perf_counter_ns``
after a warm-up. The headline figure cycles over the examples that fit, which is exactly
parse + validate + estimate + choose class. Examples with no safe headroom are timed apart:
their assessment also computes the fixes, re-estimating changed specs (the search for the largest
maxNumSeqs and maxModelLen that fit, tensor-parallel sizes), which only happens when a spec is
rejected; so is Llama-3-70B in bf16 without tensor parallelism (issue 13's slowest rejection),
with the number of estimates one assessment makes.

Diffusion examples (``spec.generation``) get lines of their own: the warm figure (the component
models built and the estimate memoised: what a webhook pays for a workload it has seen), the
cost of new sizes of a known pipeline (the estimate memo cleared before every iteration, the
component models kept), and the first sight of the pipeline (every diffusion cache cleared:
module trees built and walked again). The target (issue 23) is every diffusion example under
200 µs median warm.

Usage: ``PYTHONPATH=operator python hack/bench-estimate.py [--iterations N] [--warmup N]``.
The process pins itself to one core (``os.sched_setaffinity``) where the OS allows it. Each line
also gives the rate in the process's CPU time (``time.process_time``), the figure that stays
meaningful on a machine shared with other jobs. The memory model memoises per-architecture work
(layer plan, layouts, KV geometry); the ``first sight`` line clears those caches before every
iteration, the cost of an architecture the process has not seen yet.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from gpu_sizer.api import parse_workload
from gpu_sizer.budget.activations import activation_token_elements
from gpu_sizer.budget.diffusion.estimate import estimates_clear
from gpu_sizer.budget.diffusion.resolved import cache_clear as components_clear
from gpu_sizer.budget.kv_cache import kv_geometry
from gpu_sizer.budget.params import layer_plan, layout
from gpu_sizer.sizing import verdict as sizing
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

ROOT = Path(__file__).resolve().parent.parent
#: The mid-size MoE the throughput target names (issue 10): Qwen3-30B-A3B.
MID_SIZE_MOE = "qwen3-30b-a3b-vllm-tp2.yaml"
sys.path.insert(0, str(ROOT))  # tests.architectures: the shared config.json figures

from tests.architectures import LLAMA_3_70B  # noqa: E402

#: Llama-3-70B, bf16, one GPU, 256 sequences of 8k tokens: no class fits; fixes are searched.
LLAMA_3_70B_NO_TP = {
    "apiVersion": "gpusizer.dev/v1alpha1",
    "kind": "GPUWorkload",
    "metadata": {"name": "llama-3-70b-no-tp", "namespace": "bench"},
    "spec": {
        "model": {"revision": "x", "architecture": LLAMA_3_70B},
        "inference": {"maxModelLen": 8192, "maxNumSeqs": 256},
    },
}


def _estimates_per_assessment(doc: Any) -> int:
    spec = parse_workload(doc)
    real, calls = sizing.estimate, [0]

    def count(s: Any) -> Any:
        calls[0] += 1
        return real(s)

    sizing.estimate = count  # type: ignore[assignment]
    try:
        assess(spec)
    finally:
        sizing.estimate = real
    return calls[0]


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f} µs"


def _clear_memos() -> None:
    for memo in (layer_plan, layout, kv_geometry, activation_token_elements):
        memo.cache_clear()


def _clear_diffusion() -> None:
    components_clear()
    estimates_clear()


def _run(
    docs: list[tuple[str, Any]],
    iterations: int,
    warmup: int,
    cold: bool = False,
    clear: Any = _clear_memos,
) -> tuple[float, float, list[int]]:
    """Run ``iterations`` assessments cycling over ``docs``; return (per wall second, per CPU
    second, sorted wall ns)."""
    for i in range(warmup):
        assess(parse_workload(docs[i % len(docs)][1]))
    clock = time.perf_counter_ns
    samples: list[int] = []
    start, cpu = clock(), time.process_time()
    for i in range(iterations):
        doc = docs[i % len(docs)][1]
        if cold:
            clear()
        t0 = clock()
        assess(parse_workload(doc))
        samples.append(clock() - t0)
    wall = (clock() - start) / 1e9
    cpu = time.process_time() - cpu
    samples.sort()
    return iterations / wall, iterations / cpu, samples


def _line(label: str, rate: float, cpu_rate: float, samples: list[int]) -> str:
    p99 = samples[min(len(samples) - 1, int(0.99 * len(samples)))]
    return (
        f"{label}: {rate:,.0f} estimates/s ({cpu_rate:,.0f}/s of CPU time), median "
        f"{_us(statistics.median(samples))}, p99 {_us(p99)} ({len(samples)} iterations)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=2000)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    fitting: list[tuple[str, Any]] = []
    rejected: list[tuple[str, Any]] = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "GPUWorkload":  # 00-namespaces.yaml
                continue
            verdict = assess(parse_workload(doc)).verdict
            (fitting if verdict is Verdict.Fits else rejected).append((path.name, doc))
    print(
        f"python {platform.python_version()}, pydantic, one core; "
        f"{len(fitting)} fitting examples, {len(rejected)} with no safe headroom"
    )
    print(
        _line(
            "parse + validate + estimate + choose class",
            *_run(fitting, args.iterations, args.warmup),
        )
    )
    per_example = max(1, args.iterations // 10)
    diffusion = [(n, d) for n, d in fitting + rejected if "generation" in d["spec"]]
    for name, doc in fitting:
        if "generation" in doc["spec"]:
            continue
        result = _run([(name, doc)], per_example, args.warmup // 10)
        print("  " + _line(name, *result))
        if name == MID_SIZE_MOE:
            cold = _run([(name, doc)], max(1, args.iterations // 10), 0, cold=True)
            print("  " + _line(f"{name}, first sight of the architecture", *cold))
    print(f"diffusion examples ({len(diffusion)}), warm: component models built, estimate memoised")
    slowest = 0.0
    for name, doc in diffusion:
        if name in {n for n, _ in rejected}:
            continue  # timed with the rejections below
        result = _run([(name, doc)], per_example, args.warmup // 10)
        slowest = max(slowest, statistics.median(result[2]))
        print("  " + _line(name, *result))
    print(f"  slowest warm median {_us(slowest)} (target: under 200 µs)")
    print("diffusion, new sizes of a known pipeline (estimate memo cleared each iteration)")
    for name, doc in diffusion:
        result = _run([(name, doc)], per_example // 4, 0, cold=True, clear=estimates_clear)
        print("  " + _line(name, *result))
    print("diffusion, first sight of the pipeline (every diffusion cache cleared each iteration)")
    for name, doc in diffusion:
        result = _run(
            [(name, doc)], max(1, per_example // 20), 0, cold=True, clear=_clear_diffusion
        )
        print("  " + _line(name, *result))
    rejected.append(("llama-3-70b bf16 without tensor parallelism", LLAMA_3_70B_NO_TP))
    for name, doc in rejected:
        result = _run([(name, doc)], max(1, args.iterations // 20), args.warmup // 20)
        count = _estimates_per_assessment(doc)
        print(_line(f"rejected with computed fixes, {name}", *result) + f", {count} estimates")


if __name__ == "__main__":
    main()
