"""Measurement slots: a cluster-wide cap on concurrent measurement Jobs, per-namespace limits and
a fair queue across namespaces (issue 15, item 1). Pure: the controller says what runs and who
waits; this module says who may start now and where the others stand.

Fairness is the interleaving Kubernetes' own API Priority and Fairness and Kueue's fair sharing
aim at, in its simplest form: a namespace's ``i``-th waiting measurement (oldest first) ranks as
if it were its namespace's ``running + i``-th Job, so a namespace with nothing running goes before
one that already holds slots, and 300 entries from one team do not starve one entry of another.
Ties go to the entry that waited longest (``since``, RFC 3339 strings compare in time order, then
the order of arrival in this process).

A namespace at its own limit (namespace policy ``maxConcurrentMeasurements``) or refused by its
ResourceQuota keeps its entries in the queue, in place, but they cannot take a free slot; the
slot goes to the next eligible entry.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

__all__ = ["Admission", "MeasurementQueue", "QueueReason"]

Key = tuple[str, str]
#: Per-namespace limit of concurrent measurement Jobs; None: no limit of its own.
LimitOf = Callable[[str], int | None]


class QueueReason:
    """Why an entry waits (the words used in messages and tests)."""

    Cap = "Cap"
    NamespaceLimit = "NamespaceLimit"
    Quota = "Quota"


@dataclass(frozen=True)
class Admission:
    """The answer for one entry: ``admitted``, or its 1-based ``position`` in the fair order of
    every waiting entry and the ``reason`` it waits."""

    admitted: bool
    position: int = 0
    reason: str = ""


@dataclass(frozen=True)
class _Entry:
    since: str
    seq: int


def _no_limit(_: str) -> int | None:
    return None


class MeasurementQueue:
    """Who waits for a measurement slot, in fair order.

    :param cap: at most this many measurement Jobs at once, cluster-wide; None: no cap.
    """

    def __init__(self, cap: int | None) -> None:
        if cap is not None and cap < 1:
            raise ValueError(f"the cap on concurrent measurements must be at least 1, not {cap}")
        self.cap = cap
        self._waiting: dict[Key, _Entry] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

    def enter(self, key: Key, since: str) -> None:
        """``key`` waits from ``since`` (RFC 3339); an entry already waiting keeps its place."""
        if key not in self._waiting:
            self._waiting[key] = _Entry(since, next(self._seq))

    def leave(self, key: Key) -> None:
        """``key`` no longer waits (started, no longer needs a Job, or deleted)."""
        self._waiting.pop(key, None)

    def waiting_by_namespace(self) -> dict[str, int]:
        """How many entries wait, per namespace."""
        out: dict[str, int] = {}
        for ns, _ in self._waiting:
            out[ns] = out.get(ns, 0) + 1
        return out

    def _ranked(
        self,
        running: Mapping[str, int],
        limit_of: LimitOf,
        blocked: Collection[str],
    ) -> list[tuple[Key, bool]]:
        """Every waiting entry in fair order, each with whether it may take a free slot."""
        by_ns: dict[str, list[tuple[_Entry, Key]]] = {}
        for key, entry in self._waiting.items():
            by_ns.setdefault(key[0], []).append((entry, key))
        ranked: list[tuple[tuple[int, str, int], Key, bool]] = []
        for ns, entries in by_ns.items():
            entries.sort(key=lambda e: (e[0].since, e[0].seq))
            held = running.get(ns, 0)
            limit = limit_of(ns)
            for i, (entry, key) in enumerate(entries):
                eligible = ns not in blocked and (limit is None or held + i < limit)
                ranked.append(((held + i, entry.since, entry.seq), key, eligible))
        ranked.sort(key=lambda r: r[0])
        return [(key, eligible) for _, key, eligible in ranked]

    def _free(self, running: Mapping[str, int]) -> int | None:
        if self.cap is None:
            return None
        return max(0, self.cap - sum(running.values()))

    def admit(
        self,
        key: Key,
        running: Mapping[str, int],
        limit_of: LimitOf = _no_limit,
        blocked: Collection[str] = (),
    ) -> Admission:
        """Whether waiting entry ``key`` may start now, given the measurement Jobs ``running``
        per namespace (reservations included), per-namespace limits and the namespaces whose
        ResourceQuota refused a Job (``blocked``). An entry not waiting is entered first."""
        if key not in self._waiting:
            raise KeyError(f"{key} is not waiting; enter() it first")
        free = self._free(running)
        ranked = self._ranked(running, limit_of, blocked)
        eligible = [k for k, ok in ranked if ok]
        if key in eligible and (free is None or eligible.index(key) < free):
            return Admission(True)
        position = next(i for i, (k, _) in enumerate(ranked, 1) if k == key)
        if key[0] in blocked:
            reason = QueueReason.Quota
        elif key not in eligible:
            reason = QueueReason.NamespaceLimit
        else:
            reason = QueueReason.Cap
        return Admission(False, position, reason)

    def startable(
        self,
        running: Mapping[str, int],
        limit_of: LimitOf = _no_limit,
        blocked: Collection[str] = (),
    ) -> list[Key]:
        """The entries that :meth:`admit` would let start now (to wake them)."""
        free = self._free(running)
        eligible = [k for k, ok in self._ranked(running, limit_of, blocked) if ok]
        return eligible if free is None else eligible[:free]

    def positions(
        self,
        running: Mapping[str, int],
        limit_of: LimitOf = _no_limit,
        blocked: Collection[str] = (),
        *,
        first: int | None = None,
    ) -> list[Key]:
        """The waiting entries in fair order (only the ``first`` ones when given)."""
        keys = [k for k, _ in self._ranked(running, limit_of, blocked)]
        return keys if first is None else keys[:first]
