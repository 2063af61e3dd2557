"""Kubernetes Events about GPUWorkloads, and the operator's say-once memory of its warnings.

Events are best effort: the status carries the same facts, so an Event that cannot be queued
(10,000 waiting) or posted (three tries while the API is unavailable) is dropped rather than
delaying a decision. Posting runs in its own task so that a decision never waits for the API's
answer to an Event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpu_sizer.api import API_VERSION, KIND
from gpu_sizer.controller import kube
from gpu_sizer.lifecycle import Emit

__all__ = ["EventRecorder", "Key", "Said"]

Key = tuple[str, str]
log = logging.getLogger("gpu_sizer.controller")


class Said:
    """What was last logged per workload and topic, so that the same warning is not repeated
    while nothing changes (a failing decision is retried with backoff for as long as it
    fails)."""

    def __init__(self) -> None:
        self._said: dict[Key, dict[str, str]] = {}

    def say(self, key: Key, topic: str, text: str) -> bool:
        """True the first time ``text`` is said about ``key`` on ``topic`` in a row."""
        said = self._said.setdefault(key, {})
        if said.get(topic) == text:
            return False
        said[topic] = text
        return True

    def unsay(self, key: Key, topic: str) -> None:
        """Forget ``topic`` for ``key``: the next :meth:`say` of it is said again."""
        said = self._said.get(key)
        if said is not None:
            said.pop(topic, None)
            if not said:
                del self._said[key]

    def forget(self, key: Key) -> None:
        """The workload is gone: forget everything said about it."""
        self._said.pop(key, None)


class EventRecorder:
    """Queue of Events to post, drained by one task (:meth:`start`, :meth:`stop`).

    :param client: the API client once the operator is connected (None before).
    """

    def __init__(self, client: Callable[[], kube.Client | None]) -> None:
        self._client = client
        self._events: asyncio.Queue[tuple[dict[str, Any], str, str, str]] | None = None
        self._poster: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start posting (in the running loop)."""
        self._events = asyncio.Queue(maxsize=10_000)
        self._poster = asyncio.create_task(self._post_events(), name="gpu-sizer events")

    async def stop(self) -> None:
        """Post the Events still queued (for at most 2 s), then stop the poster."""
        if self._poster is None:
            return
        if self._events is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._events.join()
        self._poster.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._poster
        self._poster = None

    def emit(self, body: Mapping[str, Any], action: Emit) -> None:
        """Queue ``action`` as an Event about the GPUWorkload ``body`` (dropped when the queue
        is full or the recorder is not started)."""
        if self._events is None:
            return
        meta = body.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        involved = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        }
        with contextlib.suppress(asyncio.QueueFull):  # Events are best effort
            self._events.put_nowait((involved, action.type_, action.reason, action.message))

    async def _post_events(self) -> None:
        assert self._events is not None
        while True:
            involved, type_, reason, message = await self._events.get()
            try:
                await self._post(involved, type_, reason, message)
            finally:
                self._events.task_done()

    async def _post(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post one Event: three tries while the API is unavailable, then dropped (Events are
        best effort; the status carries the same facts)."""
        client = self._client()
        assert client is not None
        for attempt in range(3):
            try:
                await client.post_event(involved, type_=type_, reason=reason, message=message)
                return
            except kube.Unavailable:
                await asyncio.sleep(0.5 * 2**attempt)
            except kube.ApiError as exc:
                log.debug("event %s on %s not posted: %s", reason, involved.get("name"), exc)
                return
