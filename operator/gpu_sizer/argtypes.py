"""argparse ``type=`` functions shared by the ``gpu-sizer`` subcommands.

A bad flag value is argparse's usage error (exit 2, naming the flag), never a traceback and never
silently the default; every subcommand says it the same way.
"""

from __future__ import annotations

import argparse

__all__ = ["nonnegative_seconds", "positive_int", "positive_seconds"]


def positive_int(text: str) -> int:
    """An integer >= 1 (0 or less is an error, never silently the default)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, not {text!r}") from None


def positive_seconds(text: str) -> float:
    """A finite number of seconds more than 0."""
    value = _seconds(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def nonnegative_seconds(text: str) -> float:
    """A finite number of seconds, 0 or more (0: give up at once)."""
    value = _seconds(text)
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text}")
    return value
