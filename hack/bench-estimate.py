#!/usr/bin/env python3
"""Benchmark the admission path on one core: parse + validate + estimate + choose class.

Each iteration takes one example document (plain data, as the webhook receives it after JSON
decoding), runs ``parse_workload`` (pydantic validation with every cross-field rule) and
``sizing.assess`` (the memory model and the class choice), timed with ``time.perf_counter_ns``
after a warm-up. The headline figure cycles over the examples that fit, which is exactly
parse + validate + estimate + choose class. Examples with no safe headroom are timed apart:
their assessment also computes the fixes, re-estimating changed specs a few dozen times
(bisection over maxNumSeqs and maxModelLen, tensor-parallel sizes), which only happens when a
spec is rejected.

Usage: ``PYTHONPATH=operator python hack/bench-estimate.py [--iterations N] [--warmup N]``.
The process pins itself to one core (``os.sched_setaffinity``) where the OS allows it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import yaml

from gpu_sizer.api import parse_workload
from gpu_sizer.sizing import Verdict, assess

ROOT = Path(__file__).resolve().parent.parent


def _us(ns: float) -> str:
    return f"{ns / 1000:.1f} µs"


def _run(docs: list[tuple[str, Any]], iterations: int, warmup: int) -> tuple[float, list[int]]:
    """Run ``iterations`` assessments cycling over ``docs``; return (per second, sorted ns)."""
    for i in range(warmup):
        assess(parse_workload(docs[i % len(docs)][1]))
    clock = time.perf_counter_ns
    samples: list[int] = []
    start = clock()
    for i in range(iterations):
        doc = docs[i % len(docs)][1]
        t0 = clock()
        assess(parse_workload(doc))
        samples.append(clock() - t0)
    wall = (clock() - start) / 1e9
    samples.sort()
    return iterations / wall, samples


def _line(label: str, rate: float, samples: list[int]) -> str:
    p99 = samples[min(len(samples) - 1, int(0.99 * len(samples)))]
    return (
        f"{label}: {rate:,.0f} estimates/s, median {_us(statistics.median(samples))}, "
        f"p99 {_us(p99)} ({len(samples)} iterations)"
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
        doc = yaml.safe_load(path.read_text())
        verdict = assess(parse_workload(doc)).verdict
        (fitting if verdict is Verdict.Fits else rejected).append((path.name, doc))
    print(
        f"python {platform.python_version()}, pydantic, one core; "
        f"{len(fitting)} fitting examples, {len(rejected)} with no safe headroom"
    )
    rate, samples = _run(fitting, args.iterations, args.warmup)
    print(_line("parse + validate + estimate + choose class", rate, samples))
    for name, doc in fitting:
        rate, samples = _run([(name, doc)], max(1, args.iterations // 10), args.warmup // 10)
        print("  " + _line(name, rate, samples))
    for name, doc in rejected:
        rate, samples = _run([(name, doc)], max(1, args.iterations // 20), args.warmup // 20)
        print(_line(f"rejected with computed fixes, {name}", rate, samples))


if __name__ == "__main__":
    main()
