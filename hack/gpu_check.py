#!/usr/bin/env python3
"""Estimate versus measurement on a real GPU: the driver behind hack/gpu-check.sh.

Runs the probe (``python -m gpu_sizer.probe``, one subprocess per configuration, as the
measurement Job does) on a fixed matrix of reference configurations and writes, under ``--out``:

- ``gpu-check.md``: a table of estimate vs measured per component it can isolate, with the
  relative error ``(estimate - measured) / measured``, and the probe's own overhead;
- ``results/<name>.json``: each probe result; ``specs/<name>.json``: each spec;
- ``environment.txt``: date, torch/CUDA versions, the device.

Components isolated from the probe's phases (all on one GPU, torch caching allocator):

- weights: ``load`` phase peak allocated (the model is built in place on the device) against
  the estimate's Load phase; for training, the Load phase of the spec's initialization;
- KV cache: ``kv-cache`` phase peak allocated minus the weights;
- inference activations: the highest prefill/decode peak allocated minus weights and KV cache;
- training step: the steady-state step (``step2.*``) peak allocated against everything but the
  runtime overhead; for the data-parallel configurations (FSDP2, FSDP1, DDP, ZeRO-2, one rank per
  visible GPU under ``torch.distributed.run``) the most loaded rank's;
- total: the NVML device peak less the device's used bytes before the probe started, against
  the estimate's total.

``--dry-run`` builds the matrix and the estimate column without CUDA (the tests use it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))  # tests.architectures: the shared config.json figures

from tests.architectures import LLAMA_2_7B, LLAMA_3_2_1B, LLAMA_3_8B  # noqa: E402

from gpu_sizer.api import EstimateStatus, GPUWorkloadSpec, parse_spec  # noqa: E402
from gpu_sizer.budget import estimate  # noqa: E402
from gpu_sizer.budget.estimate import parallel_groups  # noqa: E402
from gpu_sizer.budget.runtime import base_overhead_bytes  # noqa: E402
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass, class_for_product  # noqa: E402

GIB = float(1 << 30)


def _inference(kv: str, levels: list[int]) -> dict[str, Any]:
    return {
        "model": {"name": "synthetic Llama-3-8B shape", "architecture": LLAMA_3_8B},
        "inference": {
            "engine": "vllm",
            "maxModelLen": 8192,
            "maxNumSeqs": 16,
            "maxNumBatchedTokens": 8192,
            "kvCacheDtype": kv,
        },
        "measurement": {"concurrencyLevels": levels, "timeoutSeconds": 300},
    }


def _training(arch: dict[str, Any], **training: Any) -> dict[str, Any]:
    return {
        "model": {"architecture": arch},
        "training": {"precision": "bf16-mixed", "optimizer": "adamw", **training},
        "measurement": {"timeoutSeconds": 300},
    }


def _data_parallel_step(parallelism: dict[str, Any]) -> dict[str, Any]:
    """The 1B-shaped step with checkpointing under a data-parallel strategy (issue 11); the
    ranks are set to the visible GPUs when the check runs."""
    return _training(
        LLAMA_3_2_1B,
        microBatchSize=4,
        sequenceLength=2048,
        activationCheckpointing=True,
        parallelism=parallelism,
    )


#: name -> (description, spec). The matrix of issues 4 and 11.
MATRIX: dict[str, tuple[str, dict[str, Any]]] = {
    "llama8b-bf16": (
        "8B-shaped, vLLM-style bf16 inference, 16 x 8192, concurrency 1/8/16",
        _inference("auto", [1, 8, 16]),
    ),
    "llama8b-fp8kv": (
        "the same with an fp8 KV cache",
        _inference("fp8", [1, 8, 16]),
    ),
    "llama1b-full": (
        "1B-shaped full training step, AdamW, bf16-mixed, 4 x 2048, 2 micro-batches",
        _training(LLAMA_3_2_1B, microBatchSize=4, sequenceLength=2048, gradientAccumulationSteps=2),
    ),
    "llama1b-full-ckpt": (
        "the same with activation checkpointing",
        _training(
            LLAMA_3_2_1B,
            microBatchSize=4,
            sequenceLength=2048,
            gradientAccumulationSteps=2,
            activationCheckpointing=True,
        ),
    ),
    "llama7b-lora": (
        "7B-shaped LoRA r16 on q/k/v/o, bf16 base, 2 x 2048, checkpointing",
        _training(
            LLAMA_2_7B,
            microBatchSize=2,
            sequenceLength=2048,
            gradientAccumulationSteps=2,
            activationCheckpointing=True,
            finetuning={"method": "lora", "loraRank": 16},
        ),
    ),
    "llama1b-fsdp2": (
        "1B-shaped full step under FSDP2 (fully_shard) over every visible GPU via torchrun, "
        "AdamW, bf16-mixed, 4 x 2048, checkpointing",
        _data_parallel_step({"strategy": "fsdp-full-shard", "fsdp": {"version": 2}}),
    ),
    "llama1b-fsdp1": (
        "the same under FSDP1 (FullyShardedDataParallel, FlatParameter units)",
        _data_parallel_step({"strategy": "fsdp-full-shard"}),
    ),
    "llama1b-ddp": (
        "the same under DDP (gradient buckets as a second copy)",
        _data_parallel_step({"strategy": "ddp"}),
    ),
    "llama1b-zero2": (
        "the same under DeepSpeed ZeRO-2 (Unsupported when the image has no DeepSpeed)",
        _data_parallel_step({"strategy": "zero2"}),
    ),
}


def _published(name: str, **inference: Any) -> dict[str, Any]:
    """An inference spec from a published config.json fixture (tests/budget/configs/)."""
    import json

    from gpu_sizer.api.hf import model_from_hf_config

    config = json.loads((ROOT / "tests/budget/configs" / f"{name}.json").read_text())
    config.pop("_source")
    config.pop("quantization_config", None)
    return {
        "model": {"name": f"synthetic {name} shape", **model_from_hf_config(config)},
        "inference": {"engine": "vllm", "maxNumBatchedTokens": 8192, **inference},
        "measurement": {"concurrencyLevels": [1, inference["maxNumSeqs"]], "timeoutSeconds": 300},
    }


#: Issue 10: the new attention kinds, measured the same way (not yet run on a GPU).
MATRIX["deepseek-v2-lite-mla"] = (
    "DeepSeek-V2-Lite shape (MLA latent cache, shared experts), bf16, 16 x 8192",
    _published("deepseek-v2-lite", maxModelLen=8192, maxNumSeqs=16),
)
MATRIX["nemotron-nano-9b-hybrid"] = (
    "NVIDIA-Nemotron-Nano-9B-v2 shape (Mamba-2 state per sequence, 4 attention layers), 8 x 16384",
    _published("nvidia-nemotron-nano-9b-v2", maxModelLen=16384, maxNumSeqs=8),
)


# Issue 9: the pre-allocating engines' pools, sized the engine's way on this GPU (the probe's
# profile run and pool formula) against the estimate on the device's class.
MATRIX["llama8b-vllm-pool"] = (
    "8B-shaped, vLLM pool at the fraction gpu-sizer picks, 8192 tokens, concurrency 1/16",
    {
        "model": {"name": "synthetic Llama-3-8B shape", "architecture": LLAMA_3_8B},
        "inference": {"engine": "vllm", "maxModelLen": 8192, "maxNumSeqs": 16},
        "measurement": {"concurrencyLevels": [1, 16], "timeoutSeconds": 300},
    },
)
MATRIX["llama8b-sglang-pool"] = (
    "the same on SGLang's rules (mem_fraction_static)",
    {
        "model": {"name": "synthetic Llama-3-8B shape", "architecture": LLAMA_3_8B},
        "inference": {"engine": "sglang", "maxModelLen": 8192, "maxNumSeqs": 16},
        "measurement": {"concurrencyLevels": [1], "timeoutSeconds": 300},
    },
)
MATRIX["llama8b-tgi-pool"] = (
    "the same on TGI's rules (cuda_memory_fraction x 0.90)",
    {
        "model": {"name": "synthetic Llama-3-8B shape", "architecture": LLAMA_3_8B},
        "inference": {"engine": "tgi", "maxModelLen": 8192, "maxNumSeqs": 16},
        "measurement": {"concurrencyLevels": [1], "timeoutSeconds": 300},
    },
)

#: The overhead check: the 8B model at concurrency 1, with and without the NVML sampler.
OVERHEAD = _inference("auto", [1])


def _gib(value: int | None) -> str:
    return "—" if value is None else f"{value / GIB:.2f}"


def _err(est: int | None, measured: int | None) -> str:
    if est is None or measured is None or measured <= 0:
        return "—"
    return f"{(est - measured) / measured:+.1%}"


def _phase(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next((p for p in result.get("phases", []) if p["name"] == name), {})


def _max_alloc(result: dict[str, Any], keep: Callable[[str], bool]) -> int | None:
    values = [
        p["peakAllocatedBytes"]
        for p in result.get("phases", [])
        if keep(p["name"]) and p.get("peakAllocatedBytes") is not None
    ]
    return max(values) if values else None


def components(
    spec: GPUWorkloadSpec, est: EstimateStatus, result: dict[str, Any] | None
) -> list[tuple[str, int | None, int | None]]:
    """(component, estimate bytes, measured bytes) rows for one configuration."""
    g = est.per_gpu
    r = result or {}
    weights_measured = _phase(r, "load").get("peakAllocatedBytes")
    rows: list[tuple[str, int | None, int | None]] = []
    if spec.inference is not None:
        rows.append(("weights (after load)", g.weights_bytes, weights_measured))
        kv_alloc = _phase(r, "kv-cache").get("peakAllocatedBytes")
        kv = kv_alloc - weights_measured if kv_alloc and weights_measured else None
        rows.append(("KV cache allocation", g.kv_cache_bytes, kv))
        if est.kv_cache_capacity_tokens is not None:  # a pre-allocating engine's pool, in tokens
            rows.append(
                ("KV pool (tokens, not GiB)", est.kv_cache_capacity_tokens, r.get("kvCacheTokens"))
            )
        work = _max_alloc(r, lambda n: n.startswith(("prefill@", "decode@")))
        act = work - kv_alloc if work and kv_alloc else None
        rows.append(("activations (prefill/decode peak)", g.activation_bytes, act))
        rows.append(
            (
                "peak allocated",
                g.total_bytes - g.runtime_overhead_bytes,
                r.get("peakAllocatedBytes"),
            )
        )
    else:
        # The Load phase (model built, wrapped and sharded): its total less the runtime
        # overhead that the caching allocator does not see (CUDA context, cuBLAS, NCCL).
        load = next(p.total_bytes for p in est.phases if p.name == "Load")
        load_tensors = load - base_overhead_bytes(parallel_groups(spec))
        rows.append(
            ("load phase (parameters, shards, master copy)", load_tensors, weights_measured)
        )
        step = _max_alloc(r, lambda n: n.startswith("step2."))
        rows.append(
            ("step peak allocated (steady state)", g.total_bytes - g.runtime_overhead_bytes, step)
        )
    device = r.get("peakDeviceUsedBytes")
    baseline = None
    nvml = r.get("nvml") or {}
    if nvml.get("devices"):
        baseline = nvml["devices"][0].get("baselineUsedBytes")
    rows.append(
        (
            "peak reserved (torch)",
            g.total_bytes - g.runtime_overhead_bytes,
            r.get("peakReservedBytes"),
        )
    )
    rows.append(
        (
            "total: NVML peak less baseline",
            g.total_bytes,
            device - baseline if device is not None and baseline is not None else device,
        )
    )
    return rows


#: The whole check must finish within 8 minutes; each probe gets what is left, at most
#: PROBE_SECONDS, as its own --deadline-seconds (it then writes a Timeout result).
BUDGET_SECONDS = 440.0
PROBE_SECONDS = 110.0
_STARTED = time.monotonic()
#: Where the probes run: cuda, or cpu with --tiny (the tests' way through the measuring path).
DEVICE = ["cuda"]

TINY_ARCH = {
    "modelType": "llama",
    "numHiddenLayers": 2,
    "hiddenSize": 64,
    "intermediateSize": 128,
    "numAttentionHeads": 4,
    "numKeyValueHeads": 2,
    "vocabSize": 256,
    "maxPositionEmbeddings": 256,
}


def device_class() -> GPUClass | None:
    """The catalog class of the visible GPU (by its GFD-style product name), else ``None``
    (dry runs and unknown GPUs: the estimate is then the class-independent one)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        product = torch.cuda.get_device_name(0).replace(" ", "-")
    except ImportError:
        return None
    return class_for_product(DEFAULT_CATALOG, product)


def tiny(doc: dict[str, Any]) -> dict[str, Any]:
    """The same configuration on a tiny architecture with short sequences (CPU plumbing test)."""
    doc = json.loads(json.dumps(doc))
    doc["model"]["architecture"] = TINY_ARCH
    if "inference" in doc:
        doc["inference"].update(maxModelLen=64, maxNumSeqs=4, maxNumBatchedTokens=64)
        doc["measurement"]["concurrencyLevels"] = [
            min(c, 4) for c in doc["measurement"].get("concurrencyLevels", [1])
        ]
    else:
        doc["training"].update(microBatchSize=1, sequenceLength=32)
    return doc


def run_probe(name: str, spec: dict[str, Any], out: Path, *extra: str) -> dict[str, Any]:
    """One probe subprocess; its stdout result (or a Failed stand-in)."""
    left = BUDGET_SECONDS - (time.monotonic() - _STARTED)
    if left < 40:
        return {"status": "Skipped", "message": "the 8-minute budget is spent", "_wallSeconds": 0}
    deadline = min(PROBE_SECONDS, left - 25)
    (out / "specs").mkdir(parents=True, exist_ok=True)
    (out / "results").mkdir(parents=True, exist_ok=True)
    spec_path = out / "specs" / f"{name}.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "gpu_sizer.probe",
            "--spec",
            str(spec_path),
            "--termination-log",
            str(out / "results" / f"{name}.termination-log"),
            "--device",
            DEVICE[0],
            "--deadline-seconds",
            f"{deadline:.0f}",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    (out / "results" / f"{name}.stderr.txt").write_text(proc.stderr)
    try:
        result: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        result = {"status": "Failed", "message": f"no result (exit {proc.returncode}): {tail}"}
    result["_wallSeconds"] = round(time.monotonic() - started, 1)
    (out / "results" / f"{name}.json").write_text(json.dumps(result, indent=2))
    return result


def overhead_section(out: Path, dry_run: bool, small: bool = False) -> list[str]:
    """The probe's own overhead: the same run with the sampler off and at 100 Hz."""
    lines = ["", "## The probe's own overhead", ""]
    if dry_run:
        return [*lines, "Not measured (dry run)."]
    doc = tiny(OVERHEAD) if small else OVERHEAD
    off = run_probe("overhead-sampler-off", doc, out, "--sampler-hz", "0")
    on = run_probe("overhead-sampler-100hz", doc, out, "--sampler-hz", "100")
    peak = on.get("peakDeviceUsedBytes") or on.get("peakReservedBytes")
    nvml = on.get("nvml") or {}
    phase_s_on = sum(p["seconds"] for p in on.get("phases", []))
    phase_s_off = sum(p["seconds"] for p in off.get("phases", []))
    cpu = nvml.get("samplerCpuSeconds")

    def row(label: str, key: str) -> tuple[str, int | None]:
        a, b = off.get(key), on.get(key)
        delta = b - a if a is not None and b is not None else None
        fraction = f"{delta / peak:.4%}" if delta is not None and peak else "—"
        shown = "—" if delta is None else f"{delta} B"
        return f"| {label} (GiB) | {_gib(a)} | {_gib(b)} | {shown} | {fraction} |", delta

    alloc_row, d_alloc = row("peak allocated", "peakAllocatedBytes")
    reserved_row, d_reserved = row("peak reserved", "peakReservedBytes")
    if d_reserved is None or not peak:
        verdict = "Overhead under 1 % of the peak: not measurable here (no GPU figures)."
    else:
        worst = max(d_reserved, d_alloc or 0) / peak
        verdict = (
            f"Overhead under 1 % of the peak: {'yes' if worst < 0.01 else 'NO'} ({worst:.4%})."
        )
    lines += [
        "Same configuration (8B-shaped, concurrency 1) with the NVML sampler off and at 100 Hz.",
        "The sampler and the phase bookkeeping allocate nothing on the device; any difference",
        "in the PyTorch peaks below is the probe's device overhead. The peak is the NVML one.",
        "",
        "| figure | sampler off | sampler 100 Hz | overhead | fraction of peak |",
        "|---|---|---|---|---|",
        alloc_row,
        reserved_row,
        f"| measured phases (s) | {phase_s_off:.2f} | {phase_s_on:.2f} | "
        f"{phase_s_on - phase_s_off:+.2f} s | — |",
        f"| sampler thread CPU (s) | — | {cpu if cpu is not None else '—'} | "
        f"{nvml.get('sampleHz', '—')} samples/s achieved | — |",
        "",
        verdict,
    ]
    return lines


def environment() -> str:
    lines = [
        f"date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        f"host: {platform.node()} {platform.platform()}",
        f"python: {sys.version.split()[0]}",
    ]
    try:
        import torch

        lines.append(f"torch: {torch.__version__} (CUDA {torch.version.cuda})")
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            lines.append(f"device: {props.name}, {props.total_memory} bytes")
    except ImportError:
        lines.append("torch: not installed")
    return "\n".join(lines) + "\n"


def _data_parallel(doc: dict[str, Any]) -> bool:
    training = doc.get("training") or {}
    return (training.get("parallelism") or {}).get("strategy", "none") != "none"


def _with_ranks(doc: dict[str, Any], world: int) -> dict[str, Any]:
    """``doc`` with ``dataParallelSize`` = ``world`` (one rank per visible GPU)."""
    par = {**doc["training"]["parallelism"], "dataParallelSize": world}
    return {**doc, "training": {**doc["training"], "parallelism": par}}


def _cuda_devices() -> int:
    import torch

    return max(1, torch.cuda.device_count())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check-out"))
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="build the matrix and the estimate column only (no CUDA)",
    )
    parser.add_argument("--only", action="append", help="run only these configurations")
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="tiny architectures on the CPU: checks the script's measuring path without a GPU "
        "(its figures are not GPU figures)",
    )
    args = parser.parse_args(argv)
    if args.tiny:
        DEVICE[0] = "cpu"
        # The 8-minute budget is for a leased GPU; the tiny CPU run is a plumbing check on
        # shared, loaded CI machines, where it must finish rather than skip configurations.
        global BUDGET_SECONDS, PROBE_SECONDS
        BUDGET_SECONDS, PROBE_SECONDS = 3600.0, 900.0
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "environment.txt").write_text(environment())
    started = time.monotonic()
    title = (
        "dry run: estimates only, nothing measured"
        if args.dry_run
        else "TINY CPU PLUMBING RUN: not GPU figures"
        if args.tiny
        else "measured"
    )
    lines = [f"# gpu-sizer GPU check ({title})", "", "```", environment().strip(), "```", ""]
    lines += ["Relative error is (estimate - measured) / measured; sizes in GiB (2^30 bytes).", ""]
    lines += [
        "| configuration | component | estimate (GiB) | measured (GiB) | error |",
        "|---|---|---|---|---|",
    ]
    statuses = []
    world = 1 if args.dry_run or args.tiny else _cuda_devices()
    for name, (description, doc) in MATRIX.items():
        if args.only and name not in args.only:
            continue
        distributed = _data_parallel(doc)
        if distributed and args.tiny:
            statuses.append(
                f"- `{name}`: skipped in the tiny run (tests/probe/test_distributed.py runs the "
                "distributed path on CPU processes)"
            )
            continue
        if distributed:
            doc = _with_ranks(doc, world)
            description += f" ({world} rank(s))"
        if args.tiny:
            doc = tiny(doc)
        spec = parse_spec(doc)
        gpu = None if args.tiny else device_class()
        est = estimate(spec, gpu)  # pre-allocating engines: on this GPU's class
        extra = ("--gpu-class", gpu.name) if gpu is not None else ()
        result = None if args.dry_run else run_probe(name, doc, out, *extra)
        if result is not None:
            statuses.append(
                f"- `{name}` ({description}): {result.get('status')}"
                f" in {result.get('_wallSeconds')} s"
                + (f" — {result['message']}" if result.get("message") else "")
            )
        else:
            statuses.append(f"- `{name}`: {description}")
        for component, e, m in components(spec, est, result):
            show = (lambda v: "—" if v is None else f"{v:,}") if "tokens" in component else _gib
            lines.append(f"| {name} | {component} | {show(e)} | {show(m)} | {_err(e, m)} |")
    lines += ["", "## Runs", "", *statuses]
    if not args.only:
        lines += overhead_section(out, args.dry_run, small=args.tiny)
    lines += ["", f"Total wall time: {time.monotonic() - started:.0f} s."]
    (out / "gpu-check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
