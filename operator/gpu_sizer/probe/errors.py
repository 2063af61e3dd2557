"""Exceptions the probe turns into results rather than crashes. No torch."""

from __future__ import annotations

__all__ = ["DeadlineExceeded"]


class DeadlineExceeded(Exception):
    """The probe's deadline passed, or SIGTERM arrived, before the workload finished."""
