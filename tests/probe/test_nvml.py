"""The NVML sampler against a scripted stand-in for ``pynvml`` (no driver on this machine).

The stand-in implements the nvidia-ml-py calls the sampler makes, with memory use that follows
a script over the sampler's queries (not over wall-clock time: these tests run on loaded
machines where a 100 Hz thread is not scheduled at 100 Hz), so the per-device and per-process
peaks, the phase window and CUDA_VISIBLE_DEVICES handling are all checked without a GPU. The
sampling rate a real driver allows is a figure of the GPU check (``nvml.sampleHz`` in each
result of hack/gpu-check.sh), not an assertion here.
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


def _fake_pynvml(used: dict[int, list[tuple[int, int]]]) -> ModuleType:
    """Devices 0..n-1 of 80 GiB; device i's used bytes follow ``used[i]`` = [(q, bytes)...]:
    from its q-th memory query on (counting from 0), the device reports ``bytes``."""
    queries: dict[int, int] = {}
    module = ModuleType("pynvml")
    module.NVMLError = _Error  # type: ignore[attr-defined]
    module.queries = queries  # type: ignore[attr-defined]

    def level(handle: int, q: int) -> int:
        return [b for at, b in used[handle] if at <= q][-1]

    def memory(handle: int) -> Any:
        q = queries.get(handle, 0)
        queries[handle] = q + 1
        value = level(handle, q)
        return SimpleNamespace(used=value, total=80 * GIB, free=80 * GIB - value)

    def processes(handle: int) -> list[Any]:
        q = max(queries.get(handle, 0) - 1, 0)
        return [SimpleNamespace(pid=4242, usedGpuMemory=level(handle, q) // 2)]

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


def _until_queried(module: Any, handle: int, count: int) -> None:
    """Wait until the sampler thread has queried device ``handle`` ``count`` times (a generous
    deadline: the thread runs whenever the loaded machine schedules it)."""
    give_up = time.monotonic() + 120
    while module.queries.get(handle, 0) < count:
        assert time.monotonic() < give_up, f"sampler made {module.queries} queries in 120 s"
        time.sleep(0.01)


def test_sampler_keeps_a_short_spike_between_plateaus(fake: Any) -> None:
    # Queries 15-23 see a 70 GiB spike between 1 GiB and 2 GiB plateaus; the sampler's thread
    # sees it whenever it runs, and the peak keeps it after the level has fallen back.
    module = fake({0: [(0, GIB), (15, 70 * GIB), (24, 2 * GIB)]})
    sampler = NvmlSampler(hz=100).start()
    _until_queried(module, 0, 30)
    sampler.stop()
    info = sampler.info()
    assert info.available and info.device_name == "NVIDIA H100 80GB HBM3"
    assert info.driver_version == "550.54.15" and info.cuda_version == "12.4"
    assert info.total_bytes == 80 * GIB
    assert sampler.peak_used() == 70 * GIB
    assert info.samples is not None and info.samples >= 30
    assert info.sample_hz is not None and info.sample_hz > 0
    assert info.devices[0].baseline_used_bytes == GIB
    assert info.process_peak_bytes == {"4242": 35 * GIB}
    assert info.sampler_cpu_seconds is not None


def test_phase_window_restarts_from_the_current_level(fake: Any) -> None:
    module = fake({0: [(0, 10 * GIB), (10, 3 * GIB)]})
    sampler = NvmlSampler(hz=200).start()
    _until_queried(module, 0, 12)
    sampler.mark()  # a new phase after the 10 GiB peak
    _until_queried(module, 0, 20)
    assert sampler.window_peak() == 3 * GIB
    assert sampler.peak_used() == 10 * GIB
    sampler.stop()


def test_visible_devices_by_index_and_uuid(fake: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake({0: [(0, GIB)], 1: [(0, 5 * GIB)], 2: [(0, 9 * GIB)]})
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
    module = fake({0: [(0, GIB)]})

    def fail() -> None:
        raise module.NVMLError("Driver Not Loaded")

    module.nvmlInit = fail
    sampler = NvmlSampler().start()
    info = sampler.info()
    assert not info.available and info.reason == "NVML unavailable: Driver Not Loaded"
