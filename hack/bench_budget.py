#!/usr/bin/env python3
"""Benchmark the memory model on one core: estimate() alone, and parse + estimate + class choice.

Prints the median and 99th percentile per call in microseconds and calls per second for a few
representative specs (architectures from the models' config.json). Run from the repository root:

    PYTHONPATH=operator python hack/bench_budget.py

No caching: every call parses and estimates from scratch.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.sizing import assess

LLAMA_3_8B: dict[str, Any] = {
    "modelType": "llama",
    "numHiddenLayers": 32,
    "hiddenSize": 4096,
    "intermediateSize": 14336,
    "numAttentionHeads": 32,
    "numKeyValueHeads": 8,
    "vocabSize": 128256,
    "maxPositionEmbeddings": 8192,
}
MIXTRAL_8X7B: dict[str, Any] = {
    **LLAMA_3_8B,
    "modelType": "mixtral",
    "vocabSize": 32000,
    "maxPositionEmbeddings": 32768,
    "numLocalExperts": 8,
    "numExpertsPerTok": 2,
}
SPECS: dict[str, dict[str, Any]] = {
    "llama-3-8b vllm bf16": {
        "model": {"architecture": LLAMA_3_8B},
        "inference": {"maxModelLen": 8192, "maxNumSeqs": 16},
    },
    "mixtral awq tp2": {
        "model": {"architecture": MIXTRAL_8X7B, "quantization": {"method": "awq"}},
        "inference": {"maxModelLen": 8192, "maxNumSeqs": 16, "tensorParallelSize": 2},
    },
    "llama-3-8b lora fsdp8": {
        "model": {"architecture": LLAMA_3_8B},
        "training": {
            "microBatchSize": 4,
            "sequenceLength": 4096,
            "finetuning": {"method": "lora"},
            "parallelism": {"strategy": "fsdp-full-shard", "dataParallelSize": 8},
        },
    },
}


def _time(fn: Callable[[], object], n: int = 5000) -> tuple[float, float]:
    for _ in range(200):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return statistics.median(samples) * 1e6, samples[int(0.99 * n)] * 1e6


def main() -> None:
    print(f"{'spec':26} {'what':28} {'median µs':>10} {'p99 µs':>8} {'per s':>8}")
    for name, doc in SPECS.items():
        spec = parse_spec(doc)
        cases: dict[str, Callable[[], object]] = {
            "estimate()": lambda spec=spec: estimate(spec),
            "parse+estimate+choose class": lambda doc=doc: assess(parse_spec(doc)),
        }
        for what, fn in cases.items():
            median, p99 = _time(fn)
            print(f"{name:26} {what:28} {median:10.1f} {p99:8.1f} {1e6 / median:8.0f}")


if __name__ == "__main__":
    main()
