"""Exceptions the probe turns into results rather than crashes. No torch."""

from __future__ import annotations

import threading

__all__ = ["TERMINATED", "DeadlineExceeded"]

#: Set by the probe's SIGTERM handler; the workload checks it between forward passes. (Raising
#: from the handler itself could land inside logging's emit, which swallows exceptions.)
TERMINATED = threading.Event()


class DeadlineExceeded(Exception):
    """The probe's deadline passed, or SIGTERM arrived, before the workload finished."""
