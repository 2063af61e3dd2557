"""argparse ``type=`` functions shared by the ``gpu-sizer`` subcommands.

A bad flag value is argparse's usage error (exit 2, naming the flag), never a traceback and never
silently the default; every subcommand says it the same way.
"""

from __future__ import annotations

import argparse
import ipaddress
import re

__all__ = ["listen_address", "nonnegative_seconds", "port", "positive_int", "positive_seconds"]

#: A host name as RFC 1123 allows it (labels of letters, digits and hyphens).
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def _integer(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, not {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, not {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (0 or less is an error, never silently the default)."""
    return _integer(text, 1)


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    return _integer(text, 0)


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


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (0: the kernel picks one, or the listener is off, as the flag's
    help says). Outside that range the socket call would fail with ``OverflowError`` at start-up,
    long after the flags were read."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a TCP port number, not {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port from 0 to 65535, not {value}")
    return value


def listen_address(text: str) -> str:
    """An address to listen on: an IPv4 or IPv6 literal (``0.0.0.0``, ``127.0.0.1``, ``::``)
    or a host name."""
    value = text.strip()
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not _HOST.match(value):
            raise argparse.ArgumentTypeError(
                f"must be an IP address (0.0.0.0, 127.0.0.1, ::) or a host name, not {text!r}"
            ) from None
    return value
