"""Command mode: run the workload's own command under the NVML sampler. No torch.

The command (``spec.measurement.command``) runs as a child in its own process group. Its stdout
and stderr are merged and passed through, line by line, to the probe's **stderr** (the probe's
stdout carries only the result document), while the lines are scanned for vLLM's startup memory
report and for CUDA out-of-memory errors.

Exit status: the command's own (``128 + N`` when a signal N ended it, the shell convention). At
the deadline the process group gets SIGTERM, then SIGKILL after a grace period; the result is
``Timeout`` and the probe exits 124 (coreutils ``timeout``'s status). A SIGTERM sent to the
probe itself (the Job's ``activeDeadlineSeconds``) is forwarded the same way, so a result is
still written.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO

from gpu_sizer.probe.errors import TERMINATED, sigterm_sets_terminated
from gpu_sizer.probe.nvml import NvmlSampler
from gpu_sizer.probe.vllm_log import VllmLogParser

__all__ = ["TIMEOUT_EXIT_CODE", "CommandOutcome", "run_command"]

#: Exit status when the deadline stopped the command (as coreutils ``timeout``).
TIMEOUT_EXIT_CODE = 124
#: Seconds between SIGTERM and SIGKILL.
DEFAULT_GRACE_SECONDS = 10.0

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_TRIED = re.compile(r"Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


@dataclass
class CommandOutcome:
    """How the command ended and what its output said."""

    exit_code: int
    timed_out: bool
    seconds: float
    out_of_memory: bool = False
    oom_requested_bytes: int | None = None
    oom_line: str | None = None
    vllm: VllmLogParser = field(default_factory=VllmLogParser)
    error: str | None = None


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _pump(stream: IO[bytes], outcome: CommandOutcome, sink: IO[str]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        sink.write(line)
        sink.flush()
        outcome.vllm.feed(line)
        if _OOM.search(line):
            outcome.out_of_memory = True
            outcome.oom_line = outcome.oom_line or line.strip()[:500]
        if m := _TRIED.search(line):
            outcome.oom_requested_bytes = int(float(m.group(1)) * _UNITS[m.group(2)])
    stream.close()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def run_command(
    command: list[str],
    *,
    deadline: float | None,
    sampler: NvmlSampler,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    sink: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> CommandOutcome:
    """Run ``command`` until it exits or ``deadline`` (a ``time.monotonic()`` value) passes.

    :param sink: where the command's output goes (default the probe's stderr).
    :param env: the command's environment (default the probe's own).
    """
    sink = sink or sys.stderr
    started = time.monotonic()
    with sigterm_sets_terminated():
        if TERMINATED.is_set():  # SIGTERM came while the probe was starting: do not start
            return CommandOutcome(exit_code=TIMEOUT_EXIT_CODE, timed_out=True, seconds=0.0)
        try:
            proc = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=None if env is None else dict(env),
            )
        except OSError as exc:
            return CommandOutcome(
                exit_code=127 if isinstance(exc, FileNotFoundError) else 126,
                timed_out=False,
                seconds=0.0,
                error=f"cannot run {command[0]!r}: {exc.strerror or exc}",
            )
        outcome = CommandOutcome(exit_code=0, timed_out=False, seconds=0.0)
        assert proc.stdout is not None
        pump = threading.Thread(target=_pump, args=(proc.stdout, outcome, sink), daemon=True)
        pump.start()
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if TERMINATED.is_set() or (remaining is not None and remaining <= 0):
                outcome.timed_out = True
                _signal_group(proc, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace_seconds)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
                break
            try:
                proc.wait(timeout=0.2 if remaining is None else min(0.2, remaining))
                break
            except subprocess.TimeoutExpired:
                continue
    pump.join(timeout=5)
    outcome.seconds = round(time.monotonic() - started, 3)
    outcome.exit_code = TIMEOUT_EXIT_CODE if outcome.timed_out else _exit_status(proc.returncode)
    if outcome.timed_out:
        # Grandchildren that ignored the group signal must not outlive the measurement.
        _signal_group(proc, signal.SIGKILL)
    return outcome
