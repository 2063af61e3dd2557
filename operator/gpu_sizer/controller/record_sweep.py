"""Deleting shared measurement records once they expire.

A record holds its result for ``--measurement-record-ttl`` from when it was recorded (a record
claiming a later expiry is capped by the TTL). The sweep wakes at the next expiry (at most an
hour apart, and on every new record) and deletes what expired; the workloads that reused a
record keep their results, and their statuses are not reopened because the record went.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gpu_sizer.api import GROUP, VERSION
from gpu_sizer.api.record import RECORD_PLURAL, effective_expiry, parse_record
from gpu_sizer.controller import kube

__all__ = ["RecordSweeper"]

log = logging.getLogger("gpu_sizer.controller")


class RecordSweeper:
    """The expiry sweep over the record watch's index.

    :param ttl: ``--measurement-record-ttl`` (seconds).
    :param client: the API client once the operator is connected (None before).
    :param index: the record watch's index (by name).
    """

    def __init__(
        self,
        ttl: float,
        client: Callable[[], kube.Client | None],
        index: Callable[[], Mapping[Any, Iterable[Mapping[str, Any]]]],
    ) -> None:
        self._ttl = ttl
        self._client = client
        self._index = index
        #: Records this process deleted because they expired (their users keep their results).
        self.expired: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._now = asyncio.Event()

    def start(self) -> None:
        """Start sweeping (in the running loop)."""
        self._task = asyncio.create_task(self._sweep(), name="gpu-sizer records")

    async def stop(self) -> None:
        """Stop sweeping."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def poke(self) -> None:
        """A record came or changed: look again now (its expiry may be the next)."""
        self._now.set()

    async def _sweep(self) -> None:
        """Delete expired records, waking at the next expiry (at most an hour apart, and on
        every new record)."""
        while True:
            now = datetime.datetime.now(datetime.UTC)
            soonest: float = 3600.0
            for name, store in list(self._index().items()):
                for body in list(store):
                    rec = parse_record(body)
                    if rec is None or rec.metadata.get("deletionTimestamp"):
                        continue
                    # Capped by the TTL from recordedAt: a record claiming to live until the
                    # year 9991 is deleted when any other would be.
                    expires = effective_expiry(rec, self._ttl)
                    if expires is not None and expires > now:
                        soonest = min(soonest, (expires - now).total_seconds())
                        continue
                    soonest = min(soonest, await self._expire(str(name)))
            self._now.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.5, soonest)):
                    await self._now.wait()

    async def _expire(self, name: str) -> float:
        """Delete one expired record; seconds until the sweep should look again."""
        client = self._client()
        assert client is not None
        self.expired.add(name)
        try:
            await client.delete(kube.object_path(GROUP, VERSION, RECORD_PLURAL, None, name))
        except kube.NotFound:
            pass
        except kube.ApiError as exc:
            log.warning("GPUMeasurement %s expired but could not be deleted: %s", name, exc)
            return 30.0
        log.info("GPUMeasurement %s expired (--measurement-record-ttl): deleted", name)
        return 3600.0
