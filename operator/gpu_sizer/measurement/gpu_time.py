"""GPU-seconds per day per namespace: what each measurement Job is charged and
whether a namespace's daily budget (namespace policy ``measurementGpuSecondsPerDay``) lets a new
measurement start. Pure: the controller passes the statuses and the time.

**Charge.** A measurement Job that ended (its result, a CUDA OOM, a failure read from the Job)
is charged ``GPUs of one replica x seconds from status.measurement.startedAt (the Job's creation)
to the moment its ending is observed``, rounded up to whole seconds (Kubernetes timestamps have
second resolution) and at least 1 GPU-second per Job. A pod that never ran on a GPU (no node of
its class, the Job gone before it ran) is not charged. Each Job is charged once: the workload's
``status.measurementUsage`` names the last Job charged.

**Window: the UTC day**, not a rolling 24 hours. The charge of a Job belongs to the UTC day its
ending was observed. Why: (1) what a workload must remember is one day and one sum
(``status.measurementUsage``), whatever the number of Jobs; a rolling window would need each
Job's end time to know when its charge expires; (2) when the budget frees is one instant that a
message can name exactly (the next 00:00 UTC), the same for every namespace; (3) it reads like a
quota and a bill. The price: a namespace may spend its budget twice within a few hours across
midnight.

**Where the charge lives.** The charge is the namespace's, not the workload's: each Job's is
kept in the ledger ConfigMap in the operator's own namespace (:mod:`gpu_sizer.measurement.ledger`,
which no tenant can write), so deleting or recreating a workload does not give its GPU-seconds
back, and a restarted operator reads them again. The workload's ``status.measurementUsage``
still records its own charges (what it spent, for its owner). The used figure of a namespace is
``max(ledger, sum of its workloads' measurementUsage of today)`` (the larger of the two: a
ledger written by no earlier release, or a ledger write that has not landed yet, loses nothing)
plus the running measurements' seconds so far (``status.measurement.startedAt`` of a workload in
phase ``Measuring``). Without an operator namespace there is no ledger, and the budget bounds
what a namespace's live workloads spent today.

**Gate, not kill.** The budget decides whether a *new* measurement may start; a running Job is
never stopped because the budget ran out during it (it is charged in full when it ends).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_sizer.api.status import (
    EstimateStatus,
    GPUWorkloadStatus,
    MeasurementStatus,
    MeasurementUsage,
    PerGpuBreakdown,
    Phase,
)
from gpu_sizer.api.times import parse_time, rfc3339

__all__ = [
    "BudgetState",
    "budget_state",
    "charge",
    "charge_view",
    "charged_today",
    "day_of",
    "job_gpu_seconds",
    "next_day_start",
    "running_seconds",
    "used_today",
]


def day_of(moment: _dt.datetime) -> str:
    """The UTC day of ``moment`` (an aware datetime), ``YYYY-MM-DD``."""
    return moment.astimezone(_dt.UTC).strftime("%Y-%m-%d")


def next_day_start(moment: _dt.datetime) -> _dt.datetime:
    """00:00 UTC after ``moment``: when a budget of the day of ``moment`` frees."""
    day = moment.astimezone(_dt.UTC).date() + _dt.timedelta(days=1)
    return _dt.datetime(day.year, day.month, day.day, tzinfo=_dt.UTC)


def job_gpu_seconds(gpus: int, started_at: str | None, ended: _dt.datetime) -> int:
    """GPU-seconds of one Job: ``gpus`` x seconds from ``started_at`` (RFC 3339) to ``ended``,
    rounded up, at least ``gpus`` x 1 s; 0 when ``started_at`` is unreadable."""
    start = parse_time(started_at)
    if start is None:
        return 0
    seconds = max(1, math.ceil((ended - start).total_seconds()))
    return max(1, gpus) * seconds


def charge(
    usage: MeasurementUsage | None,
    ended: MeasurementStatus | None,
    gpus: int,
    now: _dt.datetime,
) -> MeasurementUsage | None:
    """``usage`` after charging the measurement Job ``ended`` (observed finished at ``now``).

    ``ended`` None, without a Job name or start, or already charged (``usage.lastJobName``):
    ``usage`` unchanged. A charge on a new UTC day starts that day's sum from zero.
    """
    if ended is None or not ended.job_name or not ended.started_at:
        return usage
    if usage is not None and usage.last_job_name == ended.job_name:
        return usage
    seconds = job_gpu_seconds(gpus, ended.started_at, now)
    if seconds == 0:
        return usage
    today = day_of(now)
    before = usage.gpu_seconds if usage is not None and usage.day == today else 0
    return MeasurementUsage(day=today, gpu_seconds=before + seconds, last_job_name=ended.job_name)


def charged_today(statuses: Iterable[GPUWorkloadStatus], now: _dt.datetime) -> int:
    """GPU-seconds of the Jobs charged on the UTC day of ``now`` in ``statuses``
    (``measurementUsage``)."""
    today = day_of(now)
    return sum(
        s.measurement_usage.gpu_seconds
        for s in statuses
        if s.measurement_usage is not None and s.measurement_usage.day == today
    )


def running_seconds(statuses: Iterable[GPUWorkloadStatus], now: _dt.datetime) -> int:
    """GPU-seconds so far of the measurements still running in ``statuses``, not charged yet."""
    total = 0
    for status in statuses:
        usage = status.measurement_usage
        m = status.measurement
        if status.phase is Phase.Measuring and m is not None and not m.completed_at:
            if usage is not None and usage.last_job_name == m.job_name:
                continue  # charged already (its ending is being written)
            gpus = status.estimate.gpu_count if status.estimate is not None else 1
            total += job_gpu_seconds(gpus, m.started_at, now)
    return total


def used_today(statuses: Iterable[GPUWorkloadStatus], now: _dt.datetime, ledger: int = 0) -> int:
    """GPU-seconds a namespace used on the UTC day of ``now``: the larger of ``ledger`` (its
    ledger's charges of today) and its workloads' (``statuses``) charges of today, plus the
    running measurements' GPU-seconds so far."""
    seen = list(statuses)
    return max(ledger, charged_today(seen, now)) + running_seconds(seen, now)


def charge_view(raw: Any) -> GPUWorkloadStatus | None:
    """The part of a stored status (plain data) that :func:`used_today` reads: phase, the
    measurement's Job and times, ``measurementUsage`` and the GPU count; None when unreadable.
    Cheaper than validating a whole status, which a namespace's budget reads for every one of
    its workloads."""
    if not isinstance(raw, Mapping) or not raw.get("phase"):
        return None
    m = raw.get("measurement")
    est = raw.get("estimate")
    gpus = est.get("gpuCount") if isinstance(est, Mapping) else None
    try:
        return GPUWorkloadStatus(
            phase=Phase(raw["phase"]),
            measurement=(
                MeasurementStatus(
                    spec_hash=str(m.get("specHash") or ""),
                    job_name=m.get("jobName"),
                    started_at=m.get("startedAt"),
                    completed_at=m.get("completedAt"),
                )
                if isinstance(m, Mapping)
                else None
            ),
            measurement_usage=(
                MeasurementUsage.model_validate(raw["measurementUsage"])
                if isinstance(raw.get("measurementUsage"), Mapping)
                else None
            ),
            estimate=(
                EstimateStatus(parameter_count=0, gpu_count=gpus, per_gpu=PerGpuBreakdown())
                if isinstance(gpus, int) and not isinstance(gpus, bool)
                else None
            ),
        )
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True)
class BudgetState:
    """A namespace's daily measurement budget at one moment."""

    used: int
    limit: int
    day: str
    frees_at: str

    @property
    def exhausted(self) -> bool:
        """No new measurement may start before :attr:`frees_at`."""
        return self.used >= self.limit

    def message(self, namespace: str) -> str:
        """Why a measurement waits, with the figures and the policy field."""
        return (
            f"namespace {namespace} used {self.used} of its {self.limit} measurement "
            f"GPU-seconds of UTC day {self.day} (namespace policy measurementGpuSecondsPerDay); "
            f"the budget frees at {self.frees_at}"
        )


def budget_state(
    statuses: Iterable[GPUWorkloadStatus], limit: int, now: _dt.datetime, ledger: int = 0
) -> BudgetState:
    """The budget of a namespace whose workloads have ``statuses`` and whose ledger holds
    ``ledger`` GPU-seconds of today, under ``limit`` GPU-seconds per UTC day, at ``now``."""
    return BudgetState(
        used=used_today(statuses, now, ledger),
        limit=limit,
        day=day_of(now),
        frees_at=rfc3339(next_day_start(now)),
    )
