"""Device-memory sampler on NVML (nvidia-ml-py's ``pynvml``), in a background thread.

``torch.cuda.max_memory_reserved`` only sees PyTorch's caching allocator. What the GPU really
spends also includes the CUDA context, cuBLAS/cuDNN/NCCL workspaces and any other process, and
only the driver knows it: NVML's ``nvmlDeviceGetMemoryInfo().used`` (NVML API reference, "Device
Queries"). The sampler polls it on every visible device at ``hz`` (default 100 Hz, at least the
50 Hz the measurement protocol asks for) and keeps the per-device peak, plus the per-process
``usedGpuMemory`` of ``nvmlDeviceGetComputeRunningProcesses`` where the driver gives it (inside
containers the PIDs are the host's).

Without NVML (no driver, CPU machine, laptop) :meth:`NvmlSampler.start` records why and the
sampler stays idle; nothing is ever invented.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from gpu_sizer.measurement.result import NvmlDevice, NvmlInfo

__all__ = ["DEFAULT_HZ", "NvmlSampler"]

#: Default sampling rate in samples per second per device.
DEFAULT_HZ = 100.0


@dataclass
class _Device:
    index: int
    handle: Any
    name: str
    total: int
    baseline: int = -1
    peak: int = 0


@dataclass
class _State:
    devices: list[_Device] = field(default_factory=list)
    process_peaks: dict[int, int] = field(default_factory=dict)
    samples: int = 0
    started: float = 0.0
    stopped: float = 0.0
    thread_cpu: float = 0.0


class NvmlSampler:
    """Sample device memory used on every visible GPU until :meth:`stop`.

    Use as a context manager or call :meth:`start` / :meth:`stop`. :meth:`peak_used` gives the
    running maximum over devices (bytes), usable between phases; :meth:`mark` starts a new phase
    window whose maximum :meth:`window_peak` returns.
    """

    def __init__(self, hz: float = DEFAULT_HZ) -> None:
        self.hz = hz
        self.reason: str | None = None
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        self._nvml: Any = None
        self._state = _State()
        self._window_peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def available(self) -> bool:
        """NVML initialised and at least one device is visible."""
        return self.reason is None and bool(self._state.devices)

    def start(self) -> NvmlSampler:
        """Initialise NVML, take a first sample and start the thread (no-op without NVML)."""
        if self.hz <= 0:
            self.reason = "sampler disabled (--sampler-hz 0)"
            return self
        try:
            import pynvml
        except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
            self.reason = f"nvidia-ml-py is not installed ({exc})"
            return self
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.reason = f"NVML unavailable: {exc}"
            return self
        self._nvml = pynvml
        try:
            self.driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
            version = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
            self.cuda_version = f"{version // 1000}.{version % 1000 // 10}"
            self._state.devices = _visible_devices(pynvml)
        except pynvml.NVMLError as exc:
            self.reason = f"NVML query failed: {exc}"
            self._shutdown()
            return self
        if not self._state.devices:
            self.reason = "NVML found no visible GPU (CUDA_VISIBLE_DEVICES hides them all?)"
            self._shutdown()
            return self
        self._state.started = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take a last sample, stop the thread and shut NVML down. Idempotent."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()
            self._state.stopped = time.monotonic()
            self._shutdown()

    def __enter__(self) -> NvmlSampler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def peak_used(self) -> int | None:
        """Highest used bytes seen on the most loaded device so far, or None without NVML."""
        if not self._state.devices:
            return None
        with self._lock:
            return max(d.peak for d in self._state.devices)

    def mark(self) -> None:
        """Start a new phase window (see :meth:`window_peak`)."""
        if self._state.devices:
            self._sample()
        with self._lock:
            self._window_peak = self._current_max()

    def window_peak(self) -> int | None:
        """Highest used bytes on any device since the last :meth:`mark` (sampled now too)."""
        if not self._state.devices:
            return None
        self._sample()
        with self._lock:
            return self._window_peak

    def info(self) -> NvmlInfo:
        """What NVML reported, for the result."""
        if not self.available:
            return NvmlInfo(available=False, reason=self.reason)
        state = self._state
        elapsed = (state.stopped or time.monotonic()) - state.started
        first = state.devices[0]
        return NvmlInfo(
            available=True,
            device_name=first.name,
            total_bytes=first.total,
            driver_version=self.driver_version,
            cuda_version=self.cuda_version,
            sample_hz=round(state.samples / elapsed, 1) if elapsed > 0 else None,
            samples=state.samples,
            sampler_cpu_seconds=round(state.thread_cpu, 4),
            devices=[
                NvmlDevice(
                    index=d.index,
                    name=d.name,
                    total_bytes=d.total,
                    peak_used_bytes=d.peak,
                    baseline_used_bytes=max(d.baseline, 0),
                )
                for d in state.devices
            ],
            process_peak_bytes={str(pid): peak for pid, peak in state.process_peaks.items()},
        )

    def _run(self) -> None:
        period = 1.0 / self.hz
        next_at = time.monotonic()
        cpu_start = time.thread_time()
        while not self._stop.is_set():
            self._sample()
            next_at += period
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow driver call): do not burst to catch up
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)
        self._state.thread_cpu = time.thread_time() - cpu_start

    def _sample(self) -> None:
        nvml = self._nvml
        if nvml is None:
            return
        for dev in self._state.devices:
            try:
                used = int(nvml.nvmlDeviceGetMemoryInfo(dev.handle).used)
            except nvml.NVMLError:
                continue
            procs: list[Any] = []
            with contextlib.suppress(nvml.NVMLError):
                procs = list(nvml.nvmlDeviceGetComputeRunningProcesses(dev.handle))
            with self._lock:
                if dev.baseline < 0:
                    dev.baseline = used
                dev.peak = max(dev.peak, used)
                self._window_peak = max(self._window_peak, used)
                for proc in procs:
                    mem = getattr(proc, "usedGpuMemory", None)
                    if isinstance(mem, int) and mem >= 0:
                        pid = int(proc.pid)
                        self._state.process_peaks[pid] = max(
                            self._state.process_peaks.get(pid, 0), mem
                        )
        with self._lock:
            self._state.samples += 1

    def _current_max(self) -> int:
        # Caller holds the lock; the latest sample is folded into the device peaks only, so
        # re-read it: the window restarts from the current level, not from the global peak.
        nvml = self._nvml
        best = 0
        for dev in self._state.devices:
            try:
                best = max(best, int(nvml.nvmlDeviceGetMemoryInfo(dev.handle).used))
            except nvml.NVMLError:
                continue
        return best

    def _shutdown(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._nvml = None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _visible_devices(pynvml: Any) -> list[_Device]:
    """The devices CUDA_VISIBLE_DEVICES exposes (indices or GPU-UUIDs), or every device."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = int(pynvml.nvmlDeviceGetCount())
    handles: list[tuple[int, Any]] = []
    if visible is None or visible.strip() == "":
        if visible is not None:
            return []
        handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    else:
        for n, entry in enumerate(e.strip() for e in visible.split(",")):
            if entry.isdigit() and int(entry) < count:
                handles.append((n, pynvml.nvmlDeviceGetHandleByIndex(int(entry))))
            elif entry.startswith(("GPU-", "MIG-")):
                try:
                    handles.append((n, pynvml.nvmlDeviceGetHandleByUUID(entry)))
                except pynvml.NVMLError:
                    continue
            else:
                break  # CUDA stops at the first invalid entry
    devices = []
    for index, handle in handles:
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        devices.append(
            _Device(
                index=index,
                handle=handle,
                name=_text(pynvml.nvmlDeviceGetName(handle)),
                total=int(mem.total),
            )
        )
    return devices
