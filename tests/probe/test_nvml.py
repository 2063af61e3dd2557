"""The NVML sampler against a scripted stand-in for ``pynvml`` (no driver on this machine).

The stand-in implements the nvidia-ml-py calls the sampler makes, with memory use that follows
a script over time, so the sampling rate, the per-device and per-process peaks, the phase window
and CUDA_VISIBLE_DEVICES handling are all checked without a GPU.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from gpu_sizer.probe.nvml import NvmlSampler

GIB = 1 << 30


class _Error(Exception):
    pass


def _fake_pynvml(used: dict[int, list[tuple[float, int]]]) -> ModuleType:
    """Devices 0..n-1 of 80 GiB; device i's used bytes follow ``used[i]`` = [(t, bytes)...]
    from the first query on."""
    t0: list[float] = []
    module = ModuleType("pynvml")
    module.NVMLError = _Error  # type: ignore[attr-defined]
    module.calls = 0  # type: ignore[attr-defined]

    def now() -> float:
        if not t0:
            t0.append(time.monotonic())
        return time.monotonic() - t0[0]

    def memory(handle: int) -> Any:
        module.calls += 1  # type: ignore[attr-defined]
        at = now()
        value = [b for t, b in used[handle] if t <= at][-1]
        return SimpleNamespace(used=value, total=80 * GIB, free=80 * GIB - value)

    def processes(handle: int) -> list[Any]:
        return [SimpleNamespace(pid=4242, usedGpuMemory=memory(handle).used // 2)]

    module.nvmlInit = lambda: None  # type: ignore[attr-defined]
    module.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    module.nvmlSystemGetDriverVersion = lambda: "550.54.15"  # type: ignore[attr-defined]
    module.nvmlSystemGetCudaDriverVersion_v2 = lambda: 12040  # type: ignore[attr-defined]
    module.nvmlDeviceGetCount = lambda: len(used)  # type: ignore[attr-defined]
    module.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]

    def by_uuid(uuid: str) -> int:
        if uuid == "GPU-1111":
            return 1
        raise _Error("Not Found")

    module.nvmlDeviceGetHandleByUUID = by_uuid  # type: ignore[attr-defined]
    module.nvmlDeviceGetName = lambda h: b"NVIDIA H100 80GB HBM3"  # type: ignore[attr-defined]
    module.nvmlDeviceGetMemoryInfo = memory  # type: ignore[attr-defined]
    module.nvmlDeviceGetComputeRunningProcesses = processes  # type: ignore[attr-defined]
    return module


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def install(used: dict[int, list[tuple[float, int]]]) -> ModuleType:
        module = _fake_pynvml(used)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield install


def test_sampler_catches_a_short_spike_at_at_least_50_hz(fake: Any) -> None:
    # A 90 ms spike to 70 GiB between 1 GiB plateaus: a 10 Hz poller would likely miss it.
    fake({0: [(0.0, GIB), (0.15, 70 * GIB), (0.24, 2 * GIB)]})
    sampler = NvmlSampler(hz=100).start()
    time.sleep(0.6)
    sampler.stop()
    info = sampler.info()
    assert info.available and info.device_name == "NVIDIA H100 80GB HBM3"
    assert info.driver_version == "550.54.15" and info.cuda_version == "12.4"
    assert info.total_bytes == 80 * GIB
    assert sampler.peak_used() == 70 * GIB
    assert info.sample_hz is not None and info.sample_hz >= 50
    assert info.devices[0].baseline_used_bytes == GIB
    assert info.process_peak_bytes == {"4242": 35 * GIB}
    assert info.sampler_cpu_seconds is not None


def test_phase_window_restarts_from_the_current_level(fake: Any) -> None:
    fake({0: [(0.0, 10 * GIB), (0.1, 3 * GIB)]})
    sampler = NvmlSampler(hz=200).start()
    time.sleep(0.2)
    sampler.mark()  # a new phase after the 10 GiB peak
    time.sleep(0.05)
    assert sampler.window_peak() == 3 * GIB
    assert sampler.peak_used() == 10 * GIB
    sampler.stop()


def test_visible_devices_by_index_and_uuid(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake({0: [(0.0, GIB)], 1: [(0.0, 5 * GIB)], 2: [(0.0, 9 * GIB)]})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1111")
    sampler = NvmlSampler(hz=100).start()
    sampler.stop()
    assert [d.index for d in sampler.info().devices] == [0]
    assert sampler.peak_used() == 5 * GIB  # only the visible device counts
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    sampler = NvmlSampler(hz=100).start()
    sampler.stop()
    assert sampler.peak_used() == 9 * GIB
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    sampler = NvmlSampler(hz=100).start()
    assert not sampler.available and "no visible GPU" in (sampler.reason or "")


def test_init_failure_gives_the_reason(fake: Any) -> None:
    module = fake({0: [(0.0, GIB)]})

    def fail() -> None:
        raise module.NVMLError("Driver Not Loaded")

    module.nvmlInit = fail
    sampler = NvmlSampler().start()
    info = sampler.info()
    assert not info.available and info.reason == "NVML unavailable: Driver Not Loaded"
