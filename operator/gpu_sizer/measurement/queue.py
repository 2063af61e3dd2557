"""Measurement slots: a cluster-wide cap on concurrent measurement Jobs, per-namespace limits and
a fair queue across namespaces. Pure: the controller says what runs and who
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

import bisect
import heapq
import itertools
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

__all__ = ["Admission", "MeasurementQueue", "QueueReason"]

Key = tuple[str, str]
#: Per-namespace limit of concurrent measurement Jobs; None: no limit of its own.
LimitOf = Callable[[str], int | None]
#: A waiting entry as kept in its namespace's list: (since, seq, key), sorted; seq is unique,
#: so the key never takes part in a comparison.
_Item = tuple[str, int, Key]


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


def _no_limit(_: str) -> int | None:
    return None


@dataclass(frozen=True)
class _Standing:
    """One namespace's waiting entries against the slots it holds (for one question)."""

    items: list[_Item]
    held: int
    #: How many of its first entries may take a free slot (its limit, a quota refusal).
    eligible: int


class MeasurementQueue:
    """Who waits for a measurement slot, in fair order.

    Each namespace keeps its entries sorted by (``since``, arrival); an entry's rank is
    ``(held + i, since, arrival)`` for the ``i``-th entry of a namespace holding ``held`` slots.
    Within a namespace the ranks grow with ``i``, so the entries of another namespace that rank
    before a given rank are a prefix of its list whose length is one subtraction and at most one
    comparison away: :meth:`admit` answers in O(namespaces) and the first ``k`` entries in fair
    order (:meth:`startable`, :meth:`positions` with ``first``) come from a merge of the
    namespaces' lists in O(namespaces + k log namespaces), whatever the queue's length. Entering
    and leaving cost a binary search (and a list insertion or deletion) in the namespace.

    :param cap: at most this many measurement Jobs at once, cluster-wide; None: no cap.
    """

    def __init__(self, cap: int | None) -> None:
        if cap is not None and cap < 1:
            raise ValueError(f"the cap on concurrent measurements must be at least 1, not {cap}")
        self.cap = cap
        self._waiting: dict[Key, _Item] = {}
        self._by_ns: dict[str, list[_Item]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

    def enter(self, key: Key, since: str) -> None:
        """``key`` waits from ``since`` (RFC 3339); an entry already waiting keeps its place."""
        if key not in self._waiting:
            item = (since, next(self._seq), key)
            self._waiting[key] = item
            bisect.insort(self._by_ns.setdefault(key[0], []), item)

    def leave(self, key: Key) -> None:
        """``key`` no longer waits (started, no longer needs a Job, or deleted)."""
        item = self._waiting.pop(key, None)
        if item is None:
            return
        items = self._by_ns[key[0]]
        del items[bisect.bisect_left(items, item)]
        if not items:
            del self._by_ns[key[0]]

    def waiting_by_namespace(self) -> dict[str, int]:
        """How many entries wait, per namespace."""
        return {ns: len(items) for ns, items in self._by_ns.items()}

    def _standings(
        self, running: Mapping[str, int], limit_of: LimitOf, blocked: Collection[str]
    ) -> dict[str, _Standing]:
        out: dict[str, _Standing] = {}
        for ns, items in self._by_ns.items():
            held = running.get(ns, 0)
            limit = limit_of(ns)
            if ns in blocked:
                eligible = 0
            elif limit is None:
                eligible = len(items)
            else:
                eligible = min(len(items), max(0, limit - held))
            out[ns] = _Standing(items, held, eligible)
        return out

    @staticmethod
    def _merged(standings: Mapping[str, _Standing], *, eligible_only: bool) -> Iterator[Key]:
        """The entries in fair order (only those that may take a free slot, when asked)."""

        def ranked(s: _Standing) -> Iterator[tuple[int, str, int, Key]]:
            stop = s.eligible if eligible_only else len(s.items)
            for i in range(stop):
                since, seq, key = s.items[i]
                yield s.held + i, since, seq, key

        for *_, key in heapq.merge(*(ranked(s) for s in standings.values())):
            yield key

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
        item = self._waiting.get(key)
        if item is None:
            raise KeyError(f"{key} is not waiting; enter() it first")
        standings = self._standings(running, limit_of, blocked)
        mine = standings[key[0]]
        index = bisect.bisect_left(mine.items, item)
        rank = mine.held + index
        ahead = eligible_ahead = 0
        for s in standings.values():
            # Entries j < rank - held rank lower; entry j == rank - held ties on the first
            # figure and goes first when it waited longer (its own entry: j == index, not less).
            j = rank - s.held
            before = min(len(s.items), max(0, j))
            if 0 <= j < len(s.items) and s.items[j][:2] < item[:2]:
                before += 1
            ahead += before
            eligible_ahead += min(before, s.eligible)
        eligible = index < mine.eligible
        free = self._free(running)
        if eligible and (free is None or eligible_ahead < free):
            return Admission(True)
        if key[0] in blocked:
            reason = QueueReason.Quota
        elif not eligible:
            reason = QueueReason.NamespaceLimit
        else:
            reason = QueueReason.Cap
        return Admission(False, ahead + 1, reason)

    def startable(
        self,
        running: Mapping[str, int],
        limit_of: LimitOf = _no_limit,
        blocked: Collection[str] = (),
    ) -> list[Key]:
        """The entries that :meth:`admit` would let start now (to wake them)."""
        free = self._free(running)
        merged = self._merged(self._standings(running, limit_of, blocked), eligible_only=True)
        return list(merged if free is None else itertools.islice(merged, free))

    def positions(
        self,
        running: Mapping[str, int],
        limit_of: LimitOf = _no_limit,
        blocked: Collection[str] = (),
        *,
        first: int | None = None,
    ) -> list[Key]:
        """The waiting entries in fair order (only the ``first`` ones when given)."""
        merged = self._merged(self._standings(running, limit_of, blocked), eligible_only=False)
        return list(merged if first is None else itertools.islice(merged, first))
