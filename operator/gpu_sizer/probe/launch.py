"""Measure data-parallel training for real: one process per GPU under ``torch.distributed.run``.

A DDP, FSDP or ZeRO replica's per-GPU memory depends on every rank being there (shards, the
collectives' buffers, NCCL's own memory), so the probe does not emulate it on one process: it
runs ``python -m torch.distributed.run --standalone --nproc-per-node N -m
gpu_sizer.probe.rank`` (PyTorch's ``torchrun``; ``--standalone`` picks a free rendezvous port,
``--max-restarts 0``) with N the replica's GPUs (``dataParallelSize``), one rank per local GPU
(NCCL), or N CPU processes over gloo where no GPU is visible. The child runs in its own process
group under the probe's deadline and SIGTERM forwarding (``command_mode.run_command``); the
probe's NVML sampler watches every device meanwhile.

Each rank writes its own report (``gpu_sizer.probe.rank``); the result's top-level peaks are the
most loaded rank's, ``ranks`` lists every rank's, ``phases`` are the most loaded rank's phases,
and ``peakDeviceUsedBytes`` is NVML's most loaded device. A rank out of memory makes the result
``OutOfMemory`` (the message names the rank); a rank that wrote no report (killed, crashed) makes
it ``Failed`` with the launcher's exit status.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gpu_sizer
from gpu_sizer.api import GPUWorkloadSpec, spec_to_wire
from gpu_sizer.measurement.result import ProbeResult, RankPeaks, ResultStatus
from gpu_sizer.probe.command_mode import DEFAULT_GRACE_SECONDS, run_command
from gpu_sizer.probe.nvml import NvmlSampler
from gpu_sizer.probe.rank import RankReport

__all__ = ["measure_distributed", "rank_command"]

#: Seconds the ranks get less than the probe, to write their reports before it stops them.
_REPORT_MARGIN_SECONDS = 15.0


def rank_command(world: int, spec_path: Path, out: Path, kind: str, seconds: float) -> list[str]:
    """The ``torch.distributed.run`` command line of a ``world``-rank measurement."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={world}",
        "--max-restarts=0",
        "-m",
        "gpu_sizer.probe.rank",
        "--spec",
        str(spec_path),
        "--out",
        str(out),
        "--device",
        kind,
        "--deadline-seconds",
        f"{seconds:.1f}",
    ]


def _env() -> dict[str, str]:
    """The ranks' environment: the probe's, with this ``gpu_sizer`` importable."""
    env = dict(os.environ)
    root = str(Path(gpu_sizer.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def measure_distributed(
    spec: GPUWorkloadSpec,
    kind: str,
    deadline: float,
    sampler_hz: float,
    base: dict[str, Any],
    notes: list[str],
) -> ProbeResult:
    """Run the spec's data-parallel training on ``kind`` (``cuda`` or ``cpu``) devices and build
    the result (module docstring). ``deadline`` is a ``time.monotonic()`` value."""
    assert spec.training is not None
    world = spec.training.parallelism.gpus
    seconds = max(1.0, deadline - time.monotonic() - _REPORT_MARGIN_SECONDS)
    sampler = NvmlSampler(sampler_hz).start()
    with tempfile.TemporaryDirectory(prefix="gpu-sizer-ranks-") as tmp:
        out = Path(tmp)
        spec_path = out / "spec.json"
        spec_path.write_text(json.dumps(spec_to_wire(spec)))
        try:
            outcome = run_command(
                rank_command(world, spec_path, out, kind, seconds),
                deadline=deadline,
                sampler=sampler,
                grace_seconds=DEFAULT_GRACE_SECONDS,
                env=_env(),
            )
        finally:
            sampler.stop()
        reports = sorted(
            (RankReport.model_validate_json(p.read_text()) for p in out.glob("rank-*.json")),
            key=lambda r: r.rank,
        )
    return _result(spec, kind, world, reports, outcome.exit_code, sampler, base, notes)


def _status(
    reports: list[RankReport], world: int, exit_code: int
) -> tuple[ResultStatus, str | None, RankReport | None]:
    """The run's status, message and the report it comes from."""
    for wanted in ("OutOfMemory", "Failed", "Timeout"):
        for r in reports:
            if r.status == wanted:
                return r.status, r.message, r
    missing = sorted(set(range(world)) - {r.rank for r in reports})
    if missing:
        return (
            "Failed",
            f"rank(s) {', '.join(map(str, missing))} of {world} wrote no report "
            f"(torch.distributed.run exited with status {exit_code})",
            None,
        )
    return "Succeeded", None, None


def _peak(r: RankReport) -> int:
    return max(
        r.peak_allocated_bytes or 0,
        r.peak_reserved_bytes or 0,
        r.peak_cpu_tensor_bytes or 0,
        r.peak_rss_bytes or 0,
    )


def _result(
    spec: GPUWorkloadSpec,
    kind: str,
    world: int,
    reports: list[RankReport],
    exit_code: int,
    sampler: NvmlSampler,
    base: dict[str, Any],
    notes: list[str],
) -> ProbeResult:
    status, message, culprit = _status(reports, world, exit_code)
    nvml = sampler.info()
    device_peaks = {d.index: d.peak_used_bytes for d in nvml.devices}
    ranks = [
        RankPeaks(
            rank=r.rank,
            status=r.status,
            peak_allocated_bytes=r.peak_allocated_bytes,
            peak_reserved_bytes=r.peak_reserved_bytes,
            peak_device_used_bytes=device_peaks.get(r.local_rank) if kind == "cuda" else None,
            peak_rss_bytes=r.peak_rss_bytes,
            peak_cpu_tensor_bytes=r.peak_cpu_tensor_bytes,
            oom_phase=r.oom_phase,
        )
        for r in reports
    ]
    loaded = max(reports, key=_peak, default=None)
    notes = list(notes)
    if loaded is not None:
        notes.append(f"phases are rank {loaded.rank}'s, the most loaded of {world}")
        notes.extend(n for n in loaded.notes if n not in notes)

    def top(attr: str) -> int | None:
        values = [getattr(r, attr) for r in reports if getattr(r, attr) is not None]
        return max(values) if values else None

    first = reports[0] if reports else None
    return ProbeResult(
        status=status,
        mode="Synthetic",
        device="cuda" if kind == "cuda" else "cpu",
        gpu_count=world if kind == "cuda" else 0,
        world_size=world,
        ranks=ranks,
        peak_allocated_bytes=top("peak_allocated_bytes"),
        peak_reserved_bytes=top("peak_reserved_bytes"),
        peak_device_used_bytes=sampler.peak_used(),
        peak_rss_bytes=top("peak_rss_bytes"),
        peak_cpu_tensor_bytes=top("peak_cpu_tensor_bytes"),
        out_of_memory=status == "OutOfMemory",
        oom_phase=culprit.oom_phase if culprit else None,
        oom_requested_bytes=culprit.oom_requested_bytes if culprit else None,
        message=message,
        notes=notes,
        nvml=nvml,
        phases=loaded.phases if loaded else [],
        parameter_count=first.parameter_count if first else None,
        trainable_parameter_count=first.trainable_parameter_count if first else None,
        weights_bytes=loaded.weights_bytes if loaded else None,
        **base,
    )
