"""One fix to kopf 1.45's start-up over many existing objects, until kopf carries it.

kopf pre-populates every index before any handler runs (``kopf/_core/reactor/queueing.py``,
``watcher``: one ``Toggle`` per object of the initial listing in the ``operator_indexed``
``ToggleSet``; ``processing.py``, ``process_resource_event``: each object's first event drops its
toggle, then waits with ``operator_indexed.wait_for(True)``). ``ToggleSet.drop_toggle`` (and
``make_toggle``) in ``kopf/_cogs/aiokits/aiotoggles.py`` call ``notify_all`` on every change, so
each of the N drops wakes every object already waiting: N**2 / 2 wake-ups in all. Restarting over
500 workloads and their 500 Jobs cost 257,000 wake-ups and 13.5 ms of CPU per workload, more
than creating them; at 10,000 it would take the better part of an hour.

The waiters of a ``ToggleSet`` wait for its overall state (``is_on()``), and the waiters of its
toggles for their own toggle's state, which adding or dropping another toggle never changes. So
waking them only when a drop or an addition changes the set's overall state wakes every waiter
whose condition changed, and none other: the same semantics, N wake-ups instead of N**2 / 2.

The same change, as a patch to kopf 1.45.2, is hack/upstream/kopf-1.45.2-toggleset-notify-on-
change.patch; pyproject pins kopf to 1.45 and tests/controller/test_kopf_upstream.py fails when
kopf's ``ToggleSet`` code differs from the one this replaces.
"""

from __future__ import annotations

import logging
from typing import Any

from kopf._cogs.aiokits import aiotoggles  # not re-exported by kopf

__all__ = ["quiet_toggle_sets"]

log = logging.getLogger(__name__)


async def _make_toggle(
    self: aiotoggles.ToggleSet, __val: bool = False, *, name: str | None = None
) -> aiotoggles.Toggle:
    toggle = aiotoggles.Toggle(__val, name=name, condition=self._condition)
    async with self._condition:
        before = self.is_on()
        self._toggles.add(toggle)
        if self.is_on() != before:
            self._condition.notify_all()
    return toggle


async def _drop_toggle(self: aiotoggles.ToggleSet, toggle: aiotoggles.Toggle) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.discard(toggle)
        if self.is_on() != before:
            self._condition.notify_all()


async def _drop_toggles(self: aiotoggles.ToggleSet, toggles: Any) -> None:
    async with self._condition:
        before = self.is_on()
        self._toggles.difference_update(toggles)
        if self.is_on() != before:
            self._condition.notify_all()


def quiet_toggle_sets() -> bool:
    """Install the fix on kopf's ``ToggleSet``; False (and nothing changed) when this kopf's
    ``ToggleSet`` is not the shape the fix was written for."""
    cls = aiotoggles.ToggleSet
    probe = cls(all)
    shaped = all(hasattr(cls, m) for m in ("make_toggle", "drop_toggle", "drop_toggles")) and all(
        hasattr(probe, a) for a in ("_condition", "_toggles")
    )
    if not shaped:
        log.warning("kopf's ToggleSet changed shape: start-up over many objects stays quadratic")
        return False
    cls.make_toggle = _make_toggle  # type: ignore[method-assign]
    cls.drop_toggle = _drop_toggle  # type: ignore[method-assign]
    cls.drop_toggles = _drop_toggles  # type: ignore[method-assign]
    return True
