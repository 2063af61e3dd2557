"""Per-phase memory bookkeeping, out-of-memory recognition and the deadline. Needs torch.

On CUDA every phase starts with ``torch.cuda.reset_peak_memory_stats()`` and ends by reading
``max_memory_allocated()`` / ``max_memory_reserved()`` (PyTorch docs, "CUDA semantics: memory
management"), and the NVML sampler's window peak. On the CPU the basis is the peak resident set
size: the kernel's high-water mark ``VmHWM`` from ``/proc/self/status``, reset per phase by
writing ``5`` to ``/proc/self/clear_refs`` (Linux ``proc(5)``), with ``getrusage(2)``'s
``ru_maxrss`` as the whole-run figure where ``/proc`` is missing; with a
:class:`~gpu_sizer.probe.tensor_memory.TensorMeter` also the peak of live CPU tensor bytes, the
CPU's counterpart of ``max_memory_allocated``.
"""

from __future__ import annotations

import logging
import re
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from gpu_sizer.measurement.result import PhaseResult
from gpu_sizer.probe.errors import TERMINATED, DeadlineExceeded
from gpu_sizer.probe.nvml import NvmlSampler
from gpu_sizer.probe.tensor_memory import TensorMeter

__all__ = [
    "DeadlineExceeded",
    "OutOfMemory",
    "Recorder",
    "as_out_of_memory",
    "peak_rss_bytes",
    "requested_bytes",
]

log = logging.getLogger(__name__)

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
# CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): "Tried to allocate 2.00 GiB."
_CUDA_TRIED = re.compile(r"Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)")
# CPU allocator (c10/core/impl/alloc_cpu.cpp): "you tried to allocate 8589934592 bytes."
_CPU_TRIED = re.compile(r"tried to allocate (\d+) bytes")


class OutOfMemory(Exception):
    """An allocation failed; carries the phase and the failed allocation's size."""

    def __init__(self, phase: str, requested: int | None, message: str) -> None:
        super().__init__(message)
        self.phase = phase
        self.requested = requested
        self.message = message


def requested_bytes(message: str) -> int | None:
    """The size of the failed allocation named in an out-of-memory message, in bytes.

    CUDA prints a rounded figure with two decimals (``2.00 GiB``), so the value is exact to the
    message's precision only; the CPU allocator prints the exact byte count.
    """
    if m := _CUDA_TRIED.search(message):
        return int(float(m.group(1)) * _UNITS[m.group(2)])
    if m := _CPU_TRIED.search(message):
        return int(m.group(1))
    return None


def as_out_of_memory(exc: BaseException, phase: str) -> OutOfMemory | None:
    """An :class:`OutOfMemory` when ``exc`` is an allocation failure, else ``None``.

    ``torch.OutOfMemoryError`` (CUDA, and the caching allocator's per-process fraction cap) and
    the CPU allocator's ``RuntimeError`` ("DefaultCPUAllocator: can't allocate memory") count;
    ``MemoryError`` too, and a C++ ``operator new`` failure that PyTorch's autograd engine
    re-raises as ``RuntimeError("std::bad_alloc")`` (seen in the backward pass under an address
    space cap). Other errors are bugs and propagate.
    """
    text = str(exc)
    if isinstance(exc, torch.OutOfMemoryError | MemoryError) or (
        isinstance(exc, RuntimeError)
        and (
            "can't allocate memory" in text
            or "out of memory" in text.lower()
            or "std::bad_alloc" in text
        )
    ):
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return OutOfMemory(phase, requested_bytes(text), first[:500])
    return None


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes (``ru_maxrss`` is KiB on Linux,
    bytes on macOS)."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(maxrss if sys.platform == "darwin" else maxrss * 1024)


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Recorder:
    """Times phases and records their memory peaks; knows the phase running (for OOM reports).

    :param deadline: ``time.monotonic()`` value after which :meth:`check_deadline` raises.
    :param meter: on the CPU, the live tensor-byte meter whose peak each phase records.
    """

    def __init__(
        self,
        device: torch.device,
        sampler: NvmlSampler,
        deadline: float | None = None,
        meter: TensorMeter | None = None,
    ) -> None:
        self.device = device
        self.sampler = sampler
        self.deadline = deadline
        self.meter = meter
        self.phases: list[PhaseResult] = []
        self.current = "setup"
        self._cpu_phase_peaks = True

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def check_deadline(self) -> None:
        """:raises DeadlineExceeded: when the deadline has passed or SIGTERM arrived."""
        if TERMINATED.is_set():
            raise DeadlineExceeded(
                f"terminated by SIGTERM (Job deadline or pod deletion) during {self.current}"
            )
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise DeadlineExceeded(f"deadline reached during {self.current}")

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Measure one phase; allocation failures inside become :class:`OutOfMemory`."""
        self.check_deadline()
        self.current = name
        log.info("phase %s started", name)
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._cpu_phase_peaks = _reset_hwm()
        if self.meter is not None:
            self.meter.reset_peak()
        self.sampler.mark()
        started = time.perf_counter()
        try:
            yield
            if self.cuda:
                torch.cuda.synchronize(self.device)
        except DeadlineExceeded:
            self._record(f"{name} (interrupted)", started)
            raise
        except (RuntimeError, MemoryError) as exc:
            oom = as_out_of_memory(exc, name)
            if oom is None:
                raise
            self._record(name, started)
            raise oom from exc
        self._record(name, started)

    def _record(self, name: str, started: float) -> None:
        seconds = round(time.perf_counter() - started, 4)
        if self.cuda:
            phase = PhaseResult(
                name=name,
                seconds=seconds,
                peak_allocated_bytes=int(torch.cuda.max_memory_allocated(self.device)),
                peak_reserved_bytes=int(torch.cuda.max_memory_reserved(self.device)),
                peak_device_used_bytes=self.sampler.window_peak(),
            )
        else:
            rss = _vm_hwm() if self._cpu_phase_peaks else None
            tensors = self.meter.peak if self.meter is not None else None
            phase = PhaseResult(
                name=name, seconds=seconds, peak_rss_bytes=rss, peak_cpu_tensor_bytes=tensors
            )
        self.phases.append(phase)
        log.info(
            "phase %s took %.3f s; peaks in bytes: allocated %s, reserved %s, device used (NVML) "
            "%s, RSS %s",
            name,
            seconds,
            phase.peak_allocated_bytes,
            phase.peak_reserved_bytes,
            phase.peak_device_used_bytes,
            phase.peak_rss_bytes,
        )

    def peaks(self) -> dict[str, int | None]:
        """Maxima over phases: allocated, reserved, device used (NVML), RSS and live tensor
        bytes (CPU)."""

        def top(values: list[int | None]) -> int | None:
            present = [v for v in values if v is not None]
            return max(present) if present else None

        result = {
            "peak_allocated_bytes": top([p.peak_allocated_bytes for p in self.phases]),
            "peak_reserved_bytes": top([p.peak_reserved_bytes for p in self.phases]),
            "peak_device_used_bytes": self.sampler.peak_used(),
            "peak_rss_bytes": None,
            "peak_cpu_tensor_bytes": top([p.peak_cpu_tensor_bytes for p in self.phases]),
        }
        if not self.cuda:
            result["peak_rss_bytes"] = max(
                peak_rss_bytes(), top([p.peak_rss_bytes for p in self.phases]) or 0
            )
        return result
