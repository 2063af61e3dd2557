"""Probe result documents for the kubelet role the tests play (gpu_sizer.measurement.result).

Used where a test needs a specific ending (CUDA OOM, a GPU peak) that the CPU-only machine cannot
produce with the real probe; every document is built through the real ``ProbeResult`` model so a
schema change breaks these tests, not silently the operator.
"""

from __future__ import annotations

import json

from gpu_sizer.measurement.result import NvmlInfo, ProbeResult

GIB = 1 << 30


def gpu_success(
    peak_bytes: int, device_name: str = "NVIDIA A100-SXM4-80GB", total: int = 80 * GIB
) -> str:
    """A CUDA run that peaked at ``peak_bytes`` on the device (NVML) and a bit less in PyTorch."""
    return ProbeResult(
        status="Succeeded",
        mode="Synthetic",
        device="cuda",
        gpu_count=1,
        peak_allocated_bytes=peak_bytes - 2 * GIB,
        peak_reserved_bytes=peak_bytes - GIB,
        peak_device_used_bytes=peak_bytes,
        nvml=NvmlInfo(available=True, device_name=device_name, total_bytes=total),
        started_at="2026-01-01T00:00:00Z",
        completed_at="2026-01-01T00:01:00Z",
    ).model_dump_json(by_alias=True, exclude_none=True)


def gpu_oom(requested: int = 4 * GIB) -> str:
    """The probe caught torch.cuda.OutOfMemoryError while loading the model."""
    return ProbeResult(
        status="OutOfMemory",
        mode="Synthetic",
        device="cuda",
        gpu_count=1,
        out_of_memory=True,
        oom_phase="load",
        oom_requested_bytes=requested,
        message="CUDA out of memory",
        nvml=NvmlInfo(available=True, device_name="NVIDIA L4", total_bytes=23 * GIB),
    ).model_dump_json(by_alias=True, exclude_none=True)


def compact(doc: str) -> str:
    return json.dumps(json.loads(doc), separators=(",", ":"))
