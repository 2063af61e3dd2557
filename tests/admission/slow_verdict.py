"""A verdict that waits for a file before it answers, importable by the webhook's worker
processes (they unpickle a function by its module and name, so a test's local function cannot
cross over)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from gpu_sizer.admission import workers


def review_when(gate: str, started: str, *args: Any, **kwargs: Any) -> Any:
    """Write this process's id to ``started``, wait (up to 120 s) until ``gate`` exists, then
    answer as :func:`gpu_sizer.admission.workers.review` does."""
    Path(started).write_text(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not os.path.exists(gate):
        assert time.monotonic() < deadline, "never released"
        time.sleep(0.01)
    return workers.review(*args, **kwargs)


def hold(started: str) -> None:
    """Write this process's id to ``started`` and wait for a signal (the test kills it)."""
    Path(started).write_text(str(os.getpid()))
    signal.pause()


class TwoArguments(Exception):
    """An exception whose constructor takes more than its message: it pickles, but cannot be
    unpickled (as ``PolicyError`` or ``FieldError`` could not)."""

    def __init__(self, what: str, why: str) -> None:
        super().__init__(f"{what}: {why}")


def fail_unpicklably() -> None:
    raise TwoArguments("verdict", "a bug")
