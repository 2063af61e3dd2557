"""Calibration on the emulator (issue 15, item 4): five measured workloads teach the operator a
factor; with --calibration=apply the next workload of the same engine and GPU class gets the
calibrated estimate, visible in status.estimate.calibration."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.measurement.result import NvmlInfo, ProbeResult
from tests.e2e.conftest import GW, NS, Kubelet, eventually, spec, workload

GIB = 1 << 30


def _result(tensors: int, runtime: int) -> str:
    """A CUDA run whose allocator peak is 1.25 x the estimated tensors and whose device peak
    adds 1.2 x the estimated runtime overhead."""
    allocated = tensors * 5 // 4
    device = allocated + runtime * 6 // 5
    return ProbeResult(
        status="Succeeded",
        mode="Synthetic",
        device="cuda",
        gpu_count=1,
        peak_allocated_bytes=allocated,
        peak_reserved_bytes=allocated,
        peak_device_used_bytes=device,
        nvml=NvmlInfo(available=True, device_name="NVIDIA L4", total_bytes=23034 << 20),
    ).model_dump_json(by_alias=True, exclude_none=True)


def _transformers(image: str | None = None) -> dict[str, Any]:
    """The same model and engine; ``image`` (a probe image of the tenant's) gives each of the
    five its own measurement key, so that each runs and publishes a record of its own."""
    measurement = {"image": image} if image else {}
    return spec(inference={"engine": "transformers"}, measurement=measurement)


async def _status(cluster, name: str, phase: str | None = None) -> dict[str, Any] | None:
    status = (await cluster.get(GW, NS, name)).get("status") or {}
    if phase is not None and status.get("phase") != phase:
        return None
    return status if status.get("estimate") else None


@pytest.mark.emulated_kubelet
async def test_apply_calibrates_the_next_estimate_from_five_measurements(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    # Calibration learns from measurement records: sharing on. A tenant's image makes each
    # record private to the namespace (scope Namespace), whose own estimates it then raises.
    start_operator(
        "--calibration",
        "apply",
        "--max-concurrent-measurements",
        "8",
        "--measurement-sharing",
        "Enabled",
    )
    names = [f"rec-{i}" for i in range(1, 6)]
    for name in names:
        await cluster.create(GW, workload(name, _transformers(f"registry.test/probe:{name}")))
    analytic: dict[str, Any] = {}
    for name in names:
        status = await eventually(lambda name=name: _status(cluster, name), 60, f"{name} estimated")
        per = analytic = status["estimate"]["perGpu"]  # the same spec: the same estimate
        runtime = per["runtimeOverheadBytes"]

        async def job_of(name: str = name) -> dict[str, Any] | None:
            for job in await kubelet.jobs():
                if job["metadata"]["annotations"].get("gpusizer.dev/workload-name") == name:
                    return job
            return None

        job = await eventually(job_of, 60, f"the Job of {name}")
        await kubelet.succeed(job, _result(per["totalBytes"] - runtime, runtime), node="l4-1")
    for name in names:
        await eventually(lambda name=name: _status(cluster, name, "Ready"), 60, f"{name} Ready")
    await cluster.create(GW, workload("calibrated", _transformers()))

    async def calibrated() -> dict[str, Any] | None:
        status = await _status(cluster, "calibrated")
        return status if status and status["estimate"].get("calibration") else None

    status = await eventually(calibrated, 60, "a calibrated estimate")
    cal = status["estimate"]["calibration"]
    assert cal["mode"] == "Apply" and cal["adjusted"] is True
    factors = {f["component"]: f for f in cal["factors"]}
    assert factors["Tensors"]["records"] == 5 and factors["Tensors"]["factor"] == 1.25
    assert factors["RuntimeOverhead"]["factor"] == 1.2
    assert factors["Tensors"]["applied"] and not factors["Total"]["applied"]
    per = status["estimate"]["perGpu"]
    assert cal["analyticTotalBytes"] == analytic["totalBytes"]
    assert per["totalBytes"] > analytic["totalBytes"]
    assert per["weightsBytes"] == -(-analytic["weightsBytes"] * 5 // 4)
    assert status["recommendation"]["requiredBytesPerGpu"] == per["totalBytes"]
