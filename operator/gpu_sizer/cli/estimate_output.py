"""What ``gpu-sizer estimate`` prints: the table (GiB per GPU on the most loaded GPU) and the
pod-template patches (``-o patch``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from gpu_sizer.cli.documents import Doc, row_name

__all__ = ["print_patches", "print_table"]

GIB = 1 << 30

_COLUMNS = (
    ("weights_bytes", "WEIGHTS"),
    ("quantization_overhead_bytes", "QUANT"),
    ("kv_cache_bytes", "KV-CACHE"),
    ("activation_bytes", "ACTIV"),
    ("gradient_bytes", "GRADS"),
    ("optimizer_state_bytes", "OPTIM"),
    ("master_weight_bytes", "MASTER"),
    ("communication_buffer_bytes", "COMM"),
    ("runtime_overhead_bytes", "RUNTIME"),
)
"""Component columns of the table (GiB per GPU on the most loaded GPU); all-zero ones are hidden."""


def print_patches(
    rows: Sequence[tuple[Doc, Any]],
    objects: Sequence[dict[str, Any]],
    container: str | None,
    out: TextIO,
    err: TextIO,
) -> None:
    """One strategic-merge patch per workload with a recommendation (YAML; with several workloads
    each is headed by a comment naming it, separated by ``---``); the others are said on
    stderr."""
    from gpu_sizer.sizing.placement import memory_request, pod_template_patch

    patches: list[tuple[str, dict[str, Any]]] = []
    for (doc, assessment), obj in zip(rows, objects, strict=True):
        who = row_name(doc)
        rec = assessment.recommendation
        if rec is None:
            print(f"{who}: no patch: {assessment.verdict.value}, no recommendation", file=err)
            for line in assessment.message.splitlines():
                print(f"{who}: {line}", file=err)
            continue
        name = container or str(doc.data["metadata"].get("name") or "main")
        spec_hash = obj.get("status", {}).get("specHash")
        args = _engine_container_args(doc, rec.engine_command_args)
        if rec.engine_command_args and args is None:
            # Args without the model flag would replace the container's own (a strategic merge
            # replaces the list): leave them out and say what to add.
            print(f"{who}: the patch leaves the container's args alone: spec.model.name is not "
                  "set, and the engine's args must name the model; set spec.model.name, or add "
                  f"{' '.join(rec.engine_command_args)} to the container's args yourself",
                  file=err)  # fmt: skip
        if args:
            print(f"{who}: the patch sets the args of container {name!r} to the engine's "
                  "(--model and the memory flag): a strategic merge replaces the whole list, so "
                  "add your own flags (--port, --served-model-name) to the patch before applying "
                  "it", file=err)  # fmt: skip
        patches.append(
            (who, pod_template_patch(rec, container=name, spec_hash=spec_hash, args=args))
        )
        if rec.host_memory_bytes_per_worker:
            print(
                f"{who}: the patch requests {memory_request(rec.host_memory_bytes_per_worker)} "
                "of host memory per worker (hostMemoryBytesPerWorker: the loading path and "
                "offload); no memory limit is set, and an existing limit below it must be "
                "raised (a request may not exceed its limit)",
                file=err,
            )
        if rec.launch is not None and (rec.worker_count or 1) > 1:
            # The patch is one worker's template: say how many workers the launcher starts.
            launch = rec.launch
            print(
                f"{who}: the patch is one worker's pod template ({rec.gpus_per_worker} GPUs); "
                f"run {rec.worker_count} workers: torchrun {' '.join(launch.torchrun_args)}; "
                f"PyTorchJob replicas {launch.pytorch_job_replicas}; JobSet parallelism "
                f"{launch.job_set_parallelism}; LeaderWorkerSet size "
                f"{launch.leader_worker_set_size}; interconnect {launch.interconnect}",
                file=err,
            )
    for i, (who, patch) in enumerate(patches):
        if len(rows) > 1:
            if i:
                out.write("---\n")
            out.write(f"# {who}\n")
        yaml.safe_dump(patch, out, sort_keys=False, width=100)


#: The flag that names the model on each pre-allocating engine's command line.
_MODEL_FLAG = {"vllm": "--model", "sglang": "--model-path", "tgi": "--model-id"}


def _engine_container_args(doc: Doc, command: list[str] | None) -> list[str] | None:
    """The engine container's args: the model (``spec.model.name``) and ``engineCommandArgs``;
    ``None`` without ``engineCommandArgs``, and when the engine names its model by a flag and
    ``spec.model.name`` is not set (args without it would start no model)."""
    if not command:
        return None
    spec = doc.data.get("spec") or {}
    engine = str((spec.get("inference") or {}).get("engine") or "vllm")
    if engine not in _MODEL_FLAG:
        return list(command)
    name = (spec.get("model") or {}).get("name")
    return [f"{_MODEL_FLAG[engine]}={name}", *command] if name else None


def _class_cell(rec: Any) -> str:
    """The CLASS cell: ``CLASS xN`` for one pod of N GPUs, ``CLASS WxG`` for a job of W workers
    of G GPUs each (``nvidia-a100-80gb 2x8``), as launchers count them."""
    workers = rec.worker_count or 1
    if workers > 1 and rec.gpus_per_worker:
        return f"{rec.gpu_class} {workers}x{rec.gpus_per_worker}"
    return f"{rec.gpu_class} x{rec.gpu_count}"


def print_table(rows: Sequence[tuple[Doc, Any]], out: TextIO) -> None:
    """kubectl-style: upper-case headers, columns padded with three spaces, GiB per GPU."""
    if not rows:
        return
    columns = [
        (attr, title)
        for attr, title in _COLUMNS
        if any(getattr(a.estimate.per_gpu, attr) for _, a in rows)
    ]
    pools = any(a.estimate.kv_cache_capacity_tokens is not None for _, a in rows)
    header = [
        "NAMESPACE/NAME",
        "CLASS",
        *(t for _, t in columns),
        "TOTAL/GPU",
        *(("KV-TOKENS", "MAX-CONC") if pools else ()),
        "HEADROOM",
        "VERDICT",
    ]
    table = [header]
    for doc, a in rows:
        est = a.estimate
        per = est.per_gpu
        rec = a.recommendation
        pool: tuple[str, ...] = ()
        if pools:
            tokens = est.kv_cache_capacity_tokens
            conc = est.max_concurrency
            pool = (
                f"{tokens:,}" if tokens is not None else "-",
                f"{conc:.2f}x" if conc is not None else "-",
            )
        table.append(
            [
                row_name(doc),
                _class_cell(rec) if rec else "-",
                *(f"{getattr(per, attr) / GIB:.1f}" for attr, _ in columns),
                f"{per.total_bytes / GIB:.1f} GiB",
                *pool,
                f"{rec.headroom_fraction:.0%}" if rec else "-",
                str(a.verdict),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        out.write("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")
