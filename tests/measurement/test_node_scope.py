"""A job wider than one node is measured as one node's ranks; the job's figure is derived."""

from __future__ import annotations

import json
from typing import Any

from gpu_sizer.api import GPUWorkloadStatus, Phase, parse_spec, spec_hash
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.lifecycle import Config, StartJob, Workload, plan_outcome, plan_spec
from gpu_sizer.measurement.job import JobRequest, job_gpu_count, job_manifest
from gpu_sizer.measurement.node_scope import derive, node_scope
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind
from gpu_sizer.measurement.result import NvmlInfo, ProbeResult
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_8B

GIB = 1 << 30
H100 = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-h100-80gb")
CONFIG = Config(catalog=DEFAULT_CATALOG, unschedulable_timeout_seconds=600)
PRESENT = frozenset({H100.name})


def _doc(dp: int, strategy: str = "fsdp-full-shard") -> dict[str, Any]:
    return {
        "model": {"name": "m", "architecture": LLAMA_3_8B},
        "training": {
            "microBatchSize": 2,
            "sequenceLength": 4096,
            "activationCheckpointing": True,
            "parallelism": {"strategy": strategy, "dataParallelSize": dp},
        },
        "placement": {"gpuClasses": [H100.name]},
    }


def test_a_job_on_one_node_is_measured_whole() -> None:
    assert node_scope(parse_spec(_doc(8))) is None
    assert node_scope(parse_spec(_doc(1, "none"))) is None


def test_a_16_rank_job_runs_one_nodes_8_ranks_with_its_micro_batch() -> None:
    spec = parse_spec(_doc(16))
    scope = node_scope(spec)
    assert scope is not None
    assert (scope.measured_ranks, scope.job_ranks) == (8, 16)
    one = scope.spec.training
    assert one is not None and one.parallelism.data_parallel_size == 8
    assert (one.micro_batch_size, one.sequence_length) == (2, 4096)
    assert job_gpu_count(spec, spec.gpu_count) == 8
    req = JobRequest("ns", "w", "uid", "h", H100, 16, 64 * GIB, "probe:1", "job-1")
    manifest = job_manifest(spec, req)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = {e["name"]: e.get("value") for e in container["env"]}
    probed = json.loads(env["GPU_SIZER_SPEC"])
    assert probed["training"]["parallelism"]["dataParallelSize"] == 8


def test_the_derived_peak_is_the_measurement_less_the_modelled_sharding_difference() -> None:
    spec = parse_spec(_doc(16))
    scope = node_scope(spec)
    assert scope is not None
    delta = estimate(scope.spec).per_gpu.total_bytes - estimate(spec).per_gpu.total_bytes
    assert delta > 0  # sharded over 8 ranks, each holds more of the model states
    derived, text = derive(spec, scope, 50 * GIB)
    assert derived == 50 * GIB - delta
    assert "measured one node's 8 ranks of the 16-rank fsdp-full-shard job" in text
    assert "derived for the job" in text


def _gpu_result(peak: int) -> Outcome:
    r = ProbeResult(
        status="Succeeded",
        mode="Synthetic",
        device="cuda",
        peak_device_used_bytes=peak,
        nvml=NvmlInfo(
            available=True, device_name="NVIDIA H100 80GB HBM3", total_bytes=H100.memory_bytes
        ),
    )
    return Outcome(OutcomeKind.Succeeded, result=r, node_name="n1")


def test_the_status_says_what_was_measured_and_what_was_derived() -> None:
    spec = parse_spec(_doc(16))
    wl = Workload("w", "ns", 1, spec, spec_hash(spec), None)

    def namer(cls: str, mem: int, retry: int) -> str:
        return f"job-{cls}-{retry}"

    first = plan_spec(
        wl,
        assess(spec, DEFAULT_CATALOG, present=PRESENT),
        CONFIG,
        present=PRESENT,
        now="T1",
        job_name=namer,
        memory_bytes=64 * GIB,
    )
    (job,) = [a for a in first.actions if isinstance(a, StartJob)]
    measuring: GPUWorkloadStatus = first.status
    wl = Workload("w", "ns", 1, spec, spec_hash(spec), measuring)
    done = plan_outcome(
        wl, _gpu_result(40 * GIB), CONFIG, present=PRESENT, now="T2", job_name=namer
    ).status
    m = done.measurement
    assert m is not None
    assert (m.measured_ranks, m.job_ranks) == (8, 16)
    assert m.peak_device_used_bytes == 40 * GIB  # what the node measured, unchanged
    assert m.derived_peak_bytes is not None and m.derived_peak_bytes < 40 * GIB
    measured = next(c for c in done.conditions if c.type == "Measured")
    assert measured.reason == "MeasuredOneNode"
    assert "derived for the job" in measured.message
    assert done.phase is Phase.Ready
    rec = done.recommendation
    assert rec is not None and rec.required_bytes_per_gpu == m.derived_peak_bytes
    assert (rec.gpu_count, rec.worker_count, rec.gpus_per_worker) == (16, 2, 8)
    assert job.gpus >= 8
