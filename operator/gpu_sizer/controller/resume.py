"""The operator's resume after a (re)start: which workloads it took over, and when it was done.

Over 10,000 settled workloads a restart must write nothing and say little: each workload's
takeover is said once (at INFO only when it is in flight), and one line says when every
workload known at the start has been decided and how many statuses that wrote.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpu_sizer.api import Phase
from gpu_sizer.controller.status_writer import record_metrics
from gpu_sizer.controller.workloads import Key
from gpu_sizer.lifecycle import Plan

__all__ = ["ResumeLog"]

log = logging.getLogger("gpu_sizer.controller")


class ResumeLog:
    """Which workloads this process decided, and the resume's count."""

    def __init__(self) -> None:
        #: Workloads decided at least once by this process (to log a restart's takeover once).
        self._resumed: set[Key] = set()
        #: The workloads known when the first decision was made, not decided yet since the
        #: start (None before that, and after each was decided once); see :meth:`counted`.
        self._resuming: set[Key] | None = None
        self._resume_done = False
        self._resume_writes = 0
        self.started = time.monotonic()

    def begin(self, known: Callable[[], Iterable[Key]]) -> None:
        """Before a decision: on the first one, take the workloads ``known`` now as those to
        resume (kopf fills every index before any event handler runs, so the workloads'
        index holds every workload there is at the first decision)."""
        if self._resuming is None and not self._resume_done:
            self._resuming = set(known())

    def forget(self, key: Key) -> None:
        """The workload is gone."""
        self._resumed.discard(key)

    def decided(
        self,
        key: Key,
        stored: Mapping[str, Any],
        plan: Plan,
        changed: bool,
        meta: Mapping[str, Any],
    ) -> None:
        """A decision of ``key`` ended (its status ``changed`` or not): say a takeover once,
        count the resume, update the workload's gauges."""
        if key not in self._resumed:
            self._resumed.add(key)
            if stored.get("phase"):
                # After a restart: which workloads this process took over; its Job actions
                # (an adoption, a deletion) are done by now. Said at INFO for a workload in
                # flight (measuring, or its status changed); for a settled one at DEBUG: a
                # line each costs more than the decision over 10,000 settled workloads, and
                # the resume's summary line counts them.
                in_flight = changed or plan.status.phase is Phase.Measuring
                log.log(
                    logging.INFO if in_flight else logging.DEBUG,
                    "%s/%s: resumed in phase %s",
                    *key,
                    plan.status.phase,
                )
        self.counted(key, changed)
        record_metrics(key, plan.status)
        log.debug(
            "%s/%s: decided: %s, status %s (on resourceVersion %s)",
            *key,
            plan.status.phase,
            "written" if changed else "unchanged",
            meta.get("resourceVersion"),
        )

    def counted(self, key: Key, wrote: bool) -> None:
        """Count the resume after a (re)start: once every workload known at the first decision
        has been decided, say how long that took and how many statuses it wrote (over settled
        workloads: none)."""
        if self._resuming is None:
            return
        self._resume_writes += wrote
        self._resuming.discard(key)
        if not self._resuming:
            self._resuming = None
            self._resume_done = True
            log.info(
                "resumed: every workload known at the start decided, %.1f s after the start, "
                "%d status writes",
                time.monotonic() - self.started,
                self._resume_writes,
            )
