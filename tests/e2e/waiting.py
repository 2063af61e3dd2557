"""Waiting on conditions, never on the clock: the e2e suite's one way to wait."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

__all__ = ["PATIENCE", "eventually"]

T = TypeVar("T")

#: How long a test waits for the operator to reach a state. Generous on purpose: the machines
#: that run this suite are shared and loaded (2 cores, several test runs at once), and a wait
#: returns as soon as its condition holds, so a long deadline costs nothing when all is well.
PATIENCE = 120.0


async def eventually(
    fn: Callable[[], Awaitable[T | None]], timeout: float = PATIENCE, what: str = "condition"
) -> T:
    """Poll ``fn`` every 0.1 s until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await fn()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")
