"""``python -m gpu_sizer.probe.rank``: one rank of a distributed measurement. Torch.

``gpu_sizer.probe.launch`` starts one of these per GPU (or per CPU process over gloo) under
``torch.distributed.run``, which sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and the
rendezvous. Each rank initialises the process group (NCCL on CUDA, gloo on the CPU), runs
:func:`gpu_sizer.probe.sharded.run_sharded_training` with its own
:class:`~gpu_sizer.probe.memory.Recorder` (on the CPU with a
:class:`~gpu_sizer.probe.tensor_memory.TensorMeter` active from the first allocation, so the
Load phase is counted too), and writes its report to ``OUT/rank-<RANK>.json``. It exits 0 when
its run succeeded and 1 otherwise (out of memory, deadline, failure: the report says which), so
that the launcher's agent stops the other ranks, which would otherwise wait in a collective for
it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gpu_sizer.measurement.result import PhaseResult, ResultStatus
from gpu_sizer.probe.errors import DeadlineExceeded, sigterm_sets_terminated

__all__ = ["RankReport", "main"]


class RankReport(BaseModel):
    """What one rank measured (bytes, seconds), as ``rank-<RANK>.json``."""

    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True, extra="ignore"
    )

    rank: int
    local_rank: int
    world_size: int
    status: ResultStatus
    message: str | None = None
    oom_phase: str | None = None
    oom_requested_bytes: int | None = None
    phases: list[PhaseResult] = Field(default_factory=list)
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_rss_bytes: int | None = None
    peak_cpu_tensor_bytes: int | None = None
    parameter_count: int | None = None
    trainable_parameter_count: int | None = None
    weights_bytes: int | None = None
    notes: list[str] = Field(default_factory=list)


def _write(out: Path, report: RankReport) -> None:
    path = out / f"rank-{report.rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report.model_dump(mode="json", by_alias=True, exclude_none=True)))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    """Run this rank; the process exit status (0: it succeeded; its report is written either
    way)."""
    parser = argparse.ArgumentParser(prog="python -m gpu_sizer.probe.rank")
    parser.add_argument("--spec", required=True, help="spec file (JSON)")
    parser.add_argument("--out", required=True, help="directory for rank-<RANK>.json")
    parser.add_argument("--device", choices=["cuda", "cpu"], required=True)
    parser.add_argument("--deadline-seconds", type=float, required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    out = Path(args.out)
    base: dict[str, Any] = {"rank": rank, "local_rank": local_rank, "world_size": world}
    deadline = time.monotonic() + args.deadline_seconds
    with sigterm_sets_terminated():
        try:
            report = _run(args.spec, args.device, local_rank, deadline, base)
        except Exception as exc:  # the rank's own failure: still report it
            traceback.print_exc(file=sys.stderr)
            report = RankReport(
                status="Failed", message=f"rank {rank}: {type(exc).__name__}: {exc}"[:2000], **base
            )
    _write(out, report)
    return 0 if report.status == "Succeeded" else 1


def _run(
    spec_path: str, kind: str, local_rank: int, deadline: float, base: dict[str, Any]
) -> RankReport:
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
    import torch.distributed as dist

    from gpu_sizer.api import parse_spec
    from gpu_sizer.probe.memory import OutOfMemory, Recorder
    from gpu_sizer.probe.nvml import NvmlSampler
    from gpu_sizer.probe.sharded import run_sharded_training
    from gpu_sizer.probe.tensor_memory import TensorMeter

    spec = parse_spec(json.loads(Path(spec_path).read_text()))
    if kind == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    meter = TensorMeter(device) if kind == "cpu" else None
    sampler = NvmlSampler(0).start()  # the launcher samples every device
    recorder = Recorder(device, sampler, deadline, meter=meter)
    status: ResultStatus = "Succeeded"
    message = None
    oom: OutOfMemory | None = None
    figures: Any = None
    try:
        if meter is not None:
            meter.__enter__()
        figures = run_sharded_training(spec, device, recorder, base["rank"])
    except OutOfMemory as exc:
        status, oom, message = "OutOfMemory", exc, f"rank {base['rank']}: {exc.message}"
    except DeadlineExceeded as exc:
        status, message = "Timeout", f"rank {base['rank']}: {exc}"
    finally:
        if meter is not None:
            meter.__exit__(None, None, None)
    peaks = recorder.peaks()
    if status == "Succeeded":
        dist.barrier()
        dist.destroy_process_group()
    return RankReport(
        status=status,
        message=message,
        oom_phase=oom.phase if oom else None,
        oom_requested_bytes=oom.requested if oom else None,
        phases=recorder.phases,
        peak_allocated_bytes=peaks["peak_allocated_bytes"],
        peak_reserved_bytes=peaks["peak_reserved_bytes"],
        peak_rss_bytes=peaks["peak_rss_bytes"],
        peak_cpu_tensor_bytes=peaks["peak_cpu_tensor_bytes"],
        parameter_count=getattr(figures, "parameter_count", None),
        trainable_parameter_count=getattr(figures, "trainable_parameter_count", None),
        weights_bytes=getattr(figures, "weights_bytes", None),
        notes=list(getattr(figures, "notes", [])),
        **base,
    )


if __name__ == "__main__":
    sys.exit(main())
