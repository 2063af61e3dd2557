"""Exceptions the probe turns into results rather than crashes, and its SIGTERM flag. No torch."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["TERMINATED", "DeadlineExceeded", "sigterm_sets_terminated"]

#: Set by the probe's SIGTERM handler; the workload checks it between forward passes. (Raising
#: from the handler itself could land inside logging's emit, which swallows exceptions.)
TERMINATED = threading.Event()


class DeadlineExceeded(Exception):
    """The probe's deadline passed, or SIGTERM arrived, before the workload finished."""


def _on_sigterm(signum: int, frame: object) -> None:
    TERMINATED.set()


@contextmanager
def sigterm_sets_terminated() -> Iterator[None]:
    """While inside, SIGTERM (the Job's ``activeDeadlineSeconds``, a pod deletion) sets
    :data:`TERMINATED` instead of killing the process, so a ``Timeout`` result is still written.

    The outermost use clears :data:`TERMINATED` first; nested uses keep a signal that already
    arrived. Off the main thread, where handlers cannot be set, this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not _on_sigterm:
        TERMINATED.clear()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
