"""The measurement GPU-seconds ledger: what each namespace was charged on the current UTC day,
kept where no tenant can write it.

A workload's ``status.measurementUsage`` is the tenant's object: deleting the workload (or
recreating it under the same name) erases the charge, so a namespace could measure past its
``measurementGpuSecondsPerDay`` by deleting what it measured. The charge belongs to the
namespace, so it is kept in one ConfigMap in the operator's own namespace
(``--operator-namespace``), named by ``--measurement-ledger`` (the chart: ``<release>-ledger``);
only the operator's ServiceAccount may write it (the chart's Role names it in
``resourceNames``).

**Layout.** One data key per tenant namespace (a namespace name is a DNS-1123 label, a valid
ConfigMap key); its value is JSON ``{"day": "YYYY-MM-DD", "gpuSeconds": N, "jobs": [uid...]}``:
the UTC day, the GPU-seconds charged that day, the uids of the Jobs charged that day (each Job
is charged once, whatever the number of replicas or restarts that see it end). A new UTC day
starts from zero. ``jobs`` keeps at most :data:`MAX_JOB_UIDS` uids (the newest): a Job's ending
is charged within moments of being observed, never days later, so only the recent ones can be
seen again.

**Writes** are JSON merge patches of one key carrying the ConfigMap's ``resourceVersion``
(the API server refuses a stale one with 409): two writers never lose each other's charge; the
loser reads again and re-applies its charges (:func:`apply`, idempotent by Job uid).

Pure: the controller does the API calls (see ``Reconciler._write_ledger``).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpu_sizer.measurement.gpu_time import day_of

__all__ = [
    "MAX_JOB_UIDS",
    "Charge",
    "Entry",
    "apply",
    "data_patch",
    "parse",
    "used_today",
]

#: Job uids kept per namespace and day (the newest): bounds the ConfigMap (about 37 bytes per
#: uid, so at most ~37 KiB per namespace; a ConfigMap holds 1 MiB).
MAX_JOB_UIDS = 1000


@dataclass(frozen=True)
class Entry:
    """One namespace's charges on UTC day ``day``: ``gpu_seconds`` (GPUs x seconds) over the
    Jobs whose uids are ``jobs``."""

    day: str
    gpu_seconds: int
    jobs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Charge:
    """GPU-seconds owed by the Job ``job_uid``, ended on UTC day ``day``."""

    job_uid: str
    day: str
    gpu_seconds: int


def _entry(raw: Any) -> Entry | None:
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    if not isinstance(value, Mapping):
        return None
    day, seconds, jobs = value.get("day"), value.get("gpuSeconds"), value.get("jobs") or []
    if not isinstance(day, str) or not isinstance(seconds, int) or isinstance(seconds, bool):
        return None
    if seconds < 0 or not isinstance(jobs, list):
        return None
    return Entry(day, seconds, tuple(str(j) for j in jobs if isinstance(j, str)))


def parse(data: Mapping[str, Any] | None) -> dict[str, Entry]:
    """The entries of a ledger ConfigMap's ``data``, by namespace; unreadable values are left
    out (the budget then falls back to the workloads' statuses for that namespace)."""
    out: dict[str, Entry] = {}
    for namespace, raw in (data or {}).items():
        entry = _entry(raw)
        if entry is not None:
            out[str(namespace)] = entry
    return out


def apply(entry: Entry | None, charges: Iterable[Charge]) -> Entry | None:
    """``entry`` with ``charges`` added, each once: a charge whose Job uid ``entry`` holds is
    skipped, one of an earlier day than the entry's is dropped (that day is over), one of a
    later day starts that day from zero. None when ``entry`` is None and nothing applies."""
    for c in charges:
        if c.gpu_seconds <= 0 or not c.job_uid:
            continue
        if entry is None or c.day > entry.day:
            entry = Entry(c.day, 0, ())
        elif c.day < entry.day or c.job_uid in entry.jobs:
            continue
        jobs = (*entry.jobs, c.job_uid)[-MAX_JOB_UIDS:]
        entry = Entry(entry.day, entry.gpu_seconds + c.gpu_seconds, jobs)
    return entry


def used_today(entry: Entry | None, now: _dt.datetime) -> int:
    """GPU-seconds ``entry`` holds for the UTC day of ``now`` (0 for another day)."""
    return entry.gpu_seconds if entry is not None and entry.day == day_of(now) else 0


def data_patch(namespace: str, entry: Entry, resource_version: str | None) -> dict[str, Any]:
    """The JSON merge patch writing ``entry`` under ``namespace``; with ``resource_version``, the
    API server applies it only to that version (409 otherwise)."""
    value = json.dumps(
        {"day": entry.day, "gpuSeconds": entry.gpu_seconds, "jobs": list(entry.jobs)},
        separators=(",", ":"),
    )
    patch: dict[str, Any] = {"data": {namespace: value}}
    if resource_version:
        patch["metadata"] = {"resourceVersion": resource_version}
    return patch
