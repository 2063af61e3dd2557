"""Plain data from the read-only views kopf and the watch indexes hand out.

kopf delivers bodies as its own ``Mapping`` views, and a watch index holds them as long as the
operator lives; what the operator keeps (slim workloads, Job bodies, ResourceSlices) is copied
into plain ``dict`` and ``list`` so that it can be compared, serialised and kept without holding
kopf's objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["plain"]


def plain(value: Any) -> Any:
    """``value`` with every ``Mapping`` turned into a ``dict`` and every ``list`` copied, at
    every depth; other values as they are."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
