"""Namespace labels for the admission policy, read from the API with a short TTL cache.

Admission requests carry the object but not its Namespace's labels, so the webhook reads the
Namespace (``get namespaces`` is in the operator's RBAC). A webhook must answer within the API
server's ``timeoutSeconds``, so reads are bounded (``timeout`` seconds) and cached for ``ttl``
seconds; when a read fails, the last labels seen are used even if stale, and only when none were
ever seen does :meth:`NamespaceLabels.get` raise :class:`NamespaceLookupError`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = [
    "Labels",
    "LabelsFetcher",
    "NamespaceLabels",
    "NamespaceLookupError",
    "describe",
    "kubernetes_fetcher",
]

Labels = Mapping[str, str]
#: Blocking function returning the labels of the named Namespace (run in a worker thread).
LabelsFetcher = Callable[[str], Labels]


class NamespaceLookupError(RuntimeError):
    """The namespace's labels could not be read and none are cached."""


@dataclass
class _Entry:
    labels: Labels
    fetched_at: float


class NamespaceLabels:
    """TTL cache of namespace labels in front of a blocking fetcher, one read per namespace at once.

    Reads are single-flight: concurrent reviews for a namespace whose labels are missing or
    expired share one read (a burst of 300 applies to a new namespace makes one API call, not
    300 threads that each queue for the executor and time out). A review waits for the read at
    most ``timeout`` seconds; then, or when the read fails, it falls back to the freshest labels
    cached for the namespace, with a warning; only when none were ever read does :meth:`get`
    raise. A read that outlasts its waiters still completes (up to ``read_deadline``) and fills
    the cache for the reviews that follow: on a busy node a slow first read must not leave
    every later review without labels.

    :param fetcher: returns a Namespace's labels; raises on any failure.
    :param ttl: seconds a successful read is reused (default 30 s: label changes apply within
        half a minute, and a burst of applies costs one API read).
    :param timeout: seconds a review waits for a read before the cached or failing answer is used.
    :param read_deadline: seconds after which a read is abandoned (default ``5 x timeout``); the
        fetcher should bound its own request too (:func:`kubernetes_fetcher` does).
    """

    def __init__(
        self,
        fetcher: LabelsFetcher,
        *,
        ttl: float = 30.0,
        timeout: float = 2.0,
        read_deadline: float | None = None,
    ) -> None:
        self._fetcher = fetcher
        self._ttl = ttl
        self._timeout = timeout
        self._read_deadline = 5 * timeout if read_deadline is None else read_deadline
        self._entries: dict[str, _Entry] = {}
        self._reads: dict[str, asyncio.Task[Labels]] = {}
        self._clock: Callable[[], float] = time.monotonic

    async def get(self, namespace: str) -> tuple[Labels, str | None]:
        """Labels of ``namespace`` and, when they are stale, a warning saying why.

        :raises NamespaceLookupError: the read failed and nothing was cached.
        """
        entry = self._entries.get(namespace)
        if entry is not None and self._clock() - entry.fetched_at < self._ttl:
            return entry.labels, None
        read = self._reads.get(namespace)
        if read is None:
            read = asyncio.ensure_future(self._read(namespace))
            self._reads[namespace] = read
            read.add_done_callback(functools.partial(self._read_done, namespace))
        try:
            # shield: a review that gives up (its timeout, or its client went away) must not
            # cancel the read the other reviews wait for, nor the cache filling after it.
            return await asyncio.wait_for(asyncio.shield(read), self._timeout), None
        except Exception as exc:  # any failure of the read: API error, timeout, config
            reason = describe(exc)
            entry = self._entries.get(namespace)  # the freshest, whoever read it
            if entry is None:
                raise NamespaceLookupError(
                    f"could not read the labels of namespace {namespace!r} to apply the "
                    f"namespace policy ({reason})"
                ) from exc
            age = self._clock() - entry.fetched_at
            return entry.labels, (
                f"namespace policy applied with labels of namespace {namespace!r} read "
                f"{age:.0f} s ago; the fresh read failed ({reason})"
            )

    async def _read(self, namespace: str) -> Labels:
        started = self._clock()
        labels = await asyncio.wait_for(
            asyncio.to_thread(self._fetcher, namespace), timeout=self._read_deadline
        )
        self._entries[namespace] = _Entry(dict(labels), started)
        return labels

    def _read_done(self, namespace: str, read: asyncio.Task[Labels]) -> None:
        if self._reads.get(namespace) is read:
            del self._reads[namespace]
        if not read.cancelled():
            read.exception()  # retrieved here, so a read nobody awaited any more is not logged


def describe(exc: BaseException) -> str:
    """One short line: API errors carry a whole response, keep only status and reason."""
    status, why = getattr(exc, "status", None), getattr(exc, "reason", None)
    if status is not None:
        return f"API answered HTTP {status} {why or ''}".rstrip()
    if isinstance(exc, TimeoutError):
        return "no answer from the API in time"
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


def kubernetes_fetcher(timeout: float = 2.0) -> LabelsFetcher:
    """A fetcher reading the Namespace with the official client (:func:`.kube.api_client`)."""

    def fetch(namespace: str) -> Labels:
        from kubernetes.client import CoreV1Api

        from gpu_sizer.kube.client import api_client

        ns = CoreV1Api(api_client()).read_namespace(namespace, _request_timeout=timeout)
        return dict((ns.metadata and ns.metadata.labels) or {})

    return fetch
