"""API faults for the end-to-end suite and the soak (issue 13): what a busy or failing API server
does to an operator.

Install on the loopback emulator (:class:`gpu_sizer_testbed.emulator.ApiServerEmulator`
calls :meth:`Faults.before` for every request and passes every watch stream through
:meth:`Faults.watch`)::

    cluster.emulator.faults = Faults(patch_conflict=0.05, watch_delay=1.0, seed=7)

- ``patch_conflict`` / ``patch_error``: the share of PATCH requests answered 409 Conflict / 500,
  with nothing stored (an API server that rejects a write does not apply it);
- ``create_error``: the share of POSTs (Jobs, Events) answered 500, nothing stored;
- ``watch_gone``: the share of WATCH requests answered HTTP 410 Gone at the request level (kopf
  1.45 treats that as fatal: the operator must exit promptly so that its Deployment restarts it);
- ``stream_expiry``: each watch stream ends, after a random 0..``stream_expiry`` seconds, with an
  in-stream ``ERROR`` event of code 410 ("too old resource version"), as API servers do when
  their watch cache has moved on; the client re-lists;
- ``watch_delay``: every watch event reaches the client that many seconds late, in order (a busy
  API server's watch cache); a mapping gives each resource (plural) its own delay, as separate
  watch streams lag differently;
- ``resources``: the plurals faults apply to (None: all); ``status_only``: PATCH faults hit
  only ``/status`` writes (what the operator writes), not the test's own spec changes;
- ``clients``: only requests whose User-Agent starts with this (``"kopf/"``: the operator's, all
  of which go through kopf's session) get faults; the test's own client and kubelet never do.

Decisions are drawn from a seeded generator, so a run can be repeated; ``injected`` counts what
was done.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import kmock

__all__ = ["Faults", "gone_event"]


def gone_event() -> dict[str, Any]:
    """The in-stream error an API server sends when a watch's resourceVersion is too old."""
    return {
        "type": "ERROR",
        "object": {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version (injected)",
        },
    }


@dataclass
class Faults:
    """Faults to inject; see the module docstring. ``enabled`` switches all of them off at once
    (a soak stops the faults, then checks that everything settles)."""

    patch_conflict: float = 0.0
    patch_error: float = 0.0
    create_error: float = 0.0
    watch_gone: float = 0.0
    stream_expiry: float | None = None
    watch_delay: float | Mapping[str, float] = 0.0
    resources: Collection[str] | None = None
    status_only: bool = False
    clients: str | None = None
    seed: int = 0
    enabled: bool = True
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def _applies(self, request: Any) -> bool:
        plural = getattr(request.resource, "plural", None)
        if self.clients is not None:
            agent = (getattr(request, "headers", None) or {}).get("User-Agent") or ""
            if not agent.startswith(self.clients):
                return False
        return self.enabled and (self.resources is None or plural in self.resources)

    def _draw(self, share: float) -> bool:
        return share > 0 and self._random.random() < share

    def before(self, request: Any) -> Exception | None:
        """An error to answer ``request`` with, nothing stored; None to serve it."""
        if not self._applies(request):
            return None
        plural = request.resource.plural
        if request.action == kmock.action.UPDATE and (
            not self.status_only or request.subresource == "status"
        ):
            if self._draw(self.patch_conflict):
                self.injected[f"409 patch {plural}"] += 1
                return kmock.KubernetesError(
                    status=409,
                    reason="Conflict",
                    message="the object has been modified; please apply your changes to the "
                    "latest version and try again (injected)",
                )
            if self._draw(self.patch_error):
                self.injected[f"500 patch {plural}"] += 1
                return kmock.KubernetesError(
                    status=500, reason="InternalError", message="etcdserver: timeout (injected)"
                )
        elif request.action == kmock.action.CREATE:
            if self._draw(self.create_error):
                self.injected[f"500 create {plural}"] += 1
                return kmock.KubernetesError(
                    status=500, reason="InternalError", message="etcdserver: timeout (injected)"
                )
        elif request.action == kmock.action.WATCH and self._draw(self.watch_gone):
            self.injected[f"410 watch {plural}"] += 1
            return kmock.KubernetesError(
                status=410, reason="Expired", message="too old resource version (injected)"
            )
        return None

    async def watch(self, request: Any, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The watch stream as the client gets it: late by ``watch_delay`` seconds, in order;
        ended by an in-stream 410 after a random time under ``stream_expiry``."""
        plural = request.resource.plural
        delay = (
            self.watch_delay.get(plural, 0.0)
            if isinstance(self.watch_delay, Mapping)
            else self.watch_delay
        )
        if not self._applies(request) or (not delay and not self.stream_expiry):
            async for event in events:
                yield event
            return
        loop = asyncio.get_running_loop()
        ends = (
            loop.time() + self._random.uniform(0.2, self.stream_expiry)
            if self.stream_expiry
            else None
        )
        lane: asyncio.Queue[tuple[float, Any] | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for event in events:
                    lane.put_nowait((loop.time(), event))
            finally:
                lane.put_nowait(None)

        task = asyncio.create_task(pump())
        try:
            while True:
                timeout = None if ends is None else max(0.0, ends - loop.time())
                try:
                    item = await asyncio.wait_for(lane.get(), timeout)
                except TimeoutError:
                    item = None
                    if ends is not None and self.enabled:
                        self.injected[f"410 stream {request.resource.plural}"] += 1
                        yield gone_event()
                    return
                if item is None:
                    return
                arrived, event = item
                if event == b"":  # kmock's header flush, not an event
                    yield event
                    continue
                if self.enabled and delay:
                    wait = arrived + delay - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                yield event
        finally:
            task.cancel()
