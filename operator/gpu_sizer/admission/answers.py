"""Answers the validating webhook has already given, kept in a bounded LRU keyed by the spec.

The API server sends the same spec many times: its webhook client retries a review shed with
429/503 within its timeout; ``kubectl diff`` and ``kubectl apply --dry-run=server`` send it
before the real apply; Argo CD and Flux send it on every sync that finds a difference elsewhere
in the object; one Helm chart installs the same GPUWorkload in many namespaces. Its verdict is a
pure function of the spec, the namespace (messages name it), the namespace's effective policy
and the GPU catalog (:func:`gpu_sizer.admission.verdict.review`), so an answer once computed is
the answer: repeating the estimate and the search for fixes (a few hundred microseconds for an
LLM spec, milliseconds for a denied diffusion pipeline) buys nothing.

The key is immutable and normalized: the spec as canonical JSON text (keys sorted, no
whitespace; equal for equal documents, different for any difference the validator can see,
``1`` against ``1.0`` or ``true`` included), the namespace, and the
:class:`~gpu_sizer.policy.namespace.EffectivePolicy` (a frozen dataclass). The catalog is not in
the key: a cache belongs to one :class:`~gpu_sizer.admission.handlers.AdmissionConfig` and is
replaced with it. Memory is bounded twice, by entries and by characters held (keys, messages
and warnings); a spec whose text alone is longer than :data:`MAX_KEY_CHARS` is never stored.
Answers that are not a function of the spec alone are never stored: a sizing failure (a bug,
logged on every occurrence) and the namespace lookup's own failures.

An answer being computed is computed once: reviews of the same key that arrive meanwhile wait
for it (a burst of retries of one spec, or one chart applied in a loop, costs one verdict), and
compute their own only if that computation failed (shed, or a bug).

Used from one event loop (no lock): lookups and insertions happen on it, never in a thread.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from gpu_sizer.admission.verdict import Answer, Outcome
from gpu_sizer.policy.namespace import EffectivePolicy

__all__ = [
    "MAX_ENTRIES",
    "MAX_HELD_CHARS",
    "MAX_KEY_CHARS",
    "AnswerCache",
    "AnswerKey",
    "spec_key",
]

#: Answers kept at most: more than the distinct specs a cluster sends in minutes.
MAX_ENTRIES: Final = 4096
#: Characters kept at most over all entries (keys, messages, warnings): 4 Mi characters, 4 MiB
#: for ASCII text (the API's fields are ASCII; at most 16 MiB if every character took 4 bytes).
MAX_HELD_CHARS: Final = 4 << 20
#: Longest spec text stored, in characters. A GPUWorkload spec is 0.5-3 KiB of JSON; a diffusion
#: pipeline with every component's config a few KiB more.
MAX_KEY_CHARS: Final = 64 << 10
#: Outcomes that depend on more than the key (see the module docstring): never stored.
UNCACHED: Final = frozenset({Outcome.SizingFailed, Outcome.PolicyUnavailable})

AnswerKey = tuple[str, str, EffectivePolicy]


def spec_key(spec: Any) -> str | None:
    """The spec as canonical JSON text, or ``None`` when it is not worth storing (longer than
    :data:`MAX_KEY_CHARS`, or not JSON data: then the validator's error is computed each time).
    """
    try:
        text = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):  # not from a JSON document: no canonical form
        return None
    return text if len(text) <= MAX_KEY_CHARS else None


def _chars(key: AnswerKey, answer: Answer) -> int:
    return len(key[0]) + len(key[1]) + len(answer.message) + sum(map(len, answer.warnings))


class AnswerCache:
    """A least-recently-used map of :data:`AnswerKey` to :class:`Answer`, bounded by
    ``max_entries`` and ``max_chars`` (see the module docstring)."""

    def __init__(self, *, max_entries: int = MAX_ENTRIES, max_chars: int = MAX_HELD_CHARS) -> None:
        if max_entries < 0 or max_chars < 0:
            raise ValueError("cache bounds must not be negative")
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._entries: collections.OrderedDict[AnswerKey, Answer] = collections.OrderedDict()
        self._chars = 0
        #: Answers being computed now, by key: their result, or None when the computation failed.
        self._computing: dict[AnswerKey, asyncio.Future[Answer | None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def chars(self) -> int:
        """Characters held now (keys, messages and warnings)."""
        return self._chars

    def get(self, key: AnswerKey) -> Answer | None:
        """The answer stored for ``key`` (now the most recently used), or ``None``."""
        answer = self._entries.get(key)
        if answer is not None:
            self._entries.move_to_end(key)
        return answer

    def put(self, key: AnswerKey, answer: Answer) -> None:
        """Store ``answer`` under ``key``, evicting the least recently used entries beyond the
        bounds; an outcome in :data:`UNCACHED` or an entry larger than the whole budget is not
        stored."""
        size = _chars(key, answer)
        if answer.outcome in UNCACHED or size > self.max_chars or self.max_entries == 0:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._chars -= _chars(key, old)
        self._entries[key] = answer
        self._chars += size
        while len(self._entries) > self.max_entries or self._chars > self.max_chars:
            evicted_key, evicted = self._entries.popitem(last=False)
            self._chars -= _chars(evicted_key, evicted)

    async def answer(
        self, key: AnswerKey | None, compute: Callable[[], Awaitable[Answer]]
    ) -> Answer:
        """The answer stored for ``key``; else the one being computed for it, once ready; else
        ``compute()``'s, stored. ``key`` ``None`` (not storable): ``compute()``'s.

        :raises: whatever ``compute()`` raises (the reviews waiting on it then compute their own).
        """
        if key is None:
            return await compute()
        known = self.get(key)
        if known is not None:
            return known
        running = self._computing.get(key)
        if running is not None:
            result = await asyncio.shield(running)
            if result is not None:
                return result
            return await compute()  # the first computation failed: not ours to inherit
        done: asyncio.Future[Answer | None] = asyncio.get_running_loop().create_future()
        self._computing[key] = done
        result = None
        try:
            result = await compute()
        finally:
            del self._computing[key]
            done.set_result(result)
        self.put(key, result)
        return result

    def clear(self) -> None:
        self._entries.clear()
        self._chars = 0
