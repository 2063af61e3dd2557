"""Data-parallel training measured for real: two CPU processes over gloo, end to end.

The probe runs as the measurement Job runs it (``python -m gpu_sizer.probe``), starts
``torch.distributed.run`` with one process per rank, and reports every rank's peak. On the CPU
the comparable figure is ``peakCpuTensorBytes`` (live CPU tensor storages, counted through the
dispatcher), which the estimate's tensor components (every component but the runtime overhead:
CUDA context, cuBLAS, NCCL and allocator reserve, which a CPU run does not have) predict. The
estimate adds the components of its peak instant as if all coexisted, so it may exceed the
measurement; it must not fall short of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.budget import estimate
from gpu_sizer.measurement.result import ProbeResult, parse_result
from gpu_sizer.probe.launch import _status, rank_command
from gpu_sizer.probe.rank import RankReport
from gpu_sizer.probe.run import Options, measure

from .conftest import run_probe

#: Large enough that fixed costs (RNG state, scalars) do not dominate, small enough for CI.
ARCH: dict[str, Any] = {
    "modelType": "llama",
    "numHiddenLayers": 4,
    "hiddenSize": 256,
    "intermediateSize": 688,
    "numAttentionHeads": 8,
    "numKeyValueHeads": 4,
    "vocabSize": 4096,
    "maxPositionEmbeddings": 1024,
}


def _spec(**training: Any) -> dict[str, Any]:
    tr = {"microBatchSize": 2, "sequenceLength": 128, **training}
    return {"model": {"architecture": ARCH}, "training": tr}


def _probe(spec: dict[str, Any], tmp_path: Path) -> tuple[ProbeResult, ProbeResult]:
    """Run the probe like the Job does; (stdout result, termination-message result)."""
    code, out, log, proc = run_probe(
        spec, "--device", "cpu", "--deadline-seconds", "900", tmp_path=tmp_path, timeout=1200
    )
    assert code == 0, proc.stderr[-3000:]
    return ProbeResult.model_validate(out), parse_result(log)


def _tensor_estimate(spec: dict[str, Any]) -> int:
    g = estimate(parse_spec(spec)).per_gpu
    return g.total_bytes - g.runtime_overhead_bytes


@pytest.mark.probe
@pytest.mark.timeout(1200)
def test_fsdp2_on_two_cpu_processes_matches_the_estimate(tmp_path: Path) -> None:
    """FSDP2 full-shard over 2 ranks: every rank measured; the most loaded rank's peak of live
    CPU tensors is at most the estimate's tensor bytes, and at least 60% of them (the estimate
    adds the backward instant's components as if they all peaked together; measured 79% on
    2026-11-30)."""
    spec = _spec(
        parallelism={"strategy": "fsdp-full-shard", "dataParallelSize": 2, "fsdp": {"version": 2}}
    )
    full, compact = _probe(spec, tmp_path)
    assert full.status == "Succeeded", full.message
    assert compact.status == "Succeeded"
    assert full.world_size == 2 and [r.rank for r in full.ranks] == [0, 1]
    assert compact.ranks == full.ranks  # the termination message carries every rank
    peaks = [r.peak_cpu_tensor_bytes for r in full.ranks]
    assert all(p is not None and p > 0 for p in peaks)
    assert full.peak_cpu_tensor_bytes == max(p for p in peaks if p is not None)
    expected = _tensor_estimate(spec)
    assert 0.6 * expected <= full.peak_cpu_tensor_bytes <= expected  # type: ignore[operator]
    # The phases are the most loaded rank's: load, then forward/backward/optimizer of two steps.
    names = [p.name for p in full.phases]
    assert names[0] == "load" and names[-1] == "step2.optimizer"
    assert full.parameter_count == estimate(parse_spec(spec)).parameter_count
    assert any("each rank ran on the CPU over gloo" in n for n in full.notes)


@pytest.mark.probe
@pytest.mark.timeout(1200)
def test_ddp_on_two_cpu_processes_holds_its_bucket_copies(tmp_path: Path) -> None:
    """DDP over 2 ranks: the reducer's buckets are a second copy of the fp32 gradients, which
    the estimate reports as communication buffers; without them the measured peak would fall
    below 60% of the estimate."""
    spec = _spec(parallelism={"strategy": "ddp", "dataParallelSize": 2})
    full, _ = _probe(spec, tmp_path)
    assert full.status == "Succeeded", full.message
    est = estimate(parse_spec(spec)).per_gpu
    assert est.communication_buffer_bytes > 0.15 * _tensor_estimate(spec)
    expected = _tensor_estimate(spec)
    assert 0.6 * expected <= full.peak_cpu_tensor_bytes <= expected  # type: ignore[operator]


def test_torchrun_command_has_one_process_per_rank(tmp_path: Path) -> None:
    cmd = rank_command(8, tmp_path / "spec.json", tmp_path, "cuda", 600.0)
    assert cmd[1:3] == ["-m", "torch.distributed.run"]
    assert "--standalone" in cmd and "--nproc-per-node=8" in cmd and "--max-restarts=0" in cmd
    assert cmd[cmd.index("--device") + 1] == "cuda"
    assert cmd[cmd.index("-m", 3) + 1] == "gpu_sizer.probe.rank"


def _report(rank: int, status: str, **kw: Any) -> RankReport:
    return RankReport(rank=rank, local_rank=rank, world_size=2, status=status, **kw)  # type: ignore[arg-type]


def test_a_rank_out_of_memory_is_the_result() -> None:
    reports = [
        _report(0, "Failed", message="rank 0: killed"),
        _report(1, "OutOfMemory", message="rank 1: Tried to allocate 2.00 GiB", oom_phase="x"),
    ]
    status, message, culprit = _status(reports, 2, 1)
    assert status == "OutOfMemory" and message is not None and "rank 1" in message
    assert culprit is reports[1]


def test_a_missing_rank_report_fails_with_the_launchers_status() -> None:
    status, message, _ = _status([_report(0, "Succeeded")], 2, -9)
    assert status == "Failed" and message is not None
    assert "rank(s) 1 of 2 wrote no report" in message and "-9" in message


@pytest.mark.parametrize(
    ("parallelism", "words"),
    [
        ({"strategy": "zero2", "dataParallelSize": 2}, "DeepSpeed ZeRO, which is not installed"),
        ({"strategy": "fsdp-full-shard", "dataParallelSize": 2}, "fsdp.version 2"),
        (
            {"strategy": "ddp", "dataParallelSize": 2, "tensorParallelSize": 2},
            "data parallelism (ddp) only",
        ),
        ({"strategy": "ddp", "dataParallelSize": 16, "gpusPerNode": 8}, "more than one node"),
        ({"strategy": "ddp", "dataParallelSize": 16}, "more than one node"),
    ],
)
def test_what_the_distributed_run_cannot_measure_is_unsupported(
    parallelism: dict[str, Any], words: str
) -> None:
    result, code = measure(parse_spec(_spec(parallelism=parallelism)), Options(device="cpu"))
    assert code == 0 and result.status == "Unsupported"
    assert words in (result.message or ""), result.message


def test_master_weights_without_deepspeed_is_unsupported() -> None:
    spec = _spec(precisionRecipe="MasterWeights")
    result, _ = measure(parse_spec(spec), Options(device="cpu"))
    assert result.status == "Unsupported" and "MasterWeights" in (result.message or "")
