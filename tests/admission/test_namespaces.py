"""The namespace-label cache: TTL, stale answers on failure, failure with nothing cached, and
one shared read per namespace under bursts."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from gpu_sizer.admission.namespaces import NamespaceLabels, NamespaceLookupError


class Fetcher:
    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    def __call__(self, namespace: str) -> dict[str, str]:
        self.calls += 1
        if self.fail:
            raise ConnectionError("connection refused")
        return {"team": namespace, "read": str(self.calls)}


async def test_reads_are_cached_for_the_ttl_then_refreshed() -> None:
    fetch = Fetcher()
    cache = NamespaceLabels(fetch, ttl=30)
    now = [100.0]
    cache._clock = lambda: now[0]
    assert await cache.get("a") == ({"team": "a", "read": "1"}, None)
    now[0] += 29
    assert await cache.get("a") == ({"team": "a", "read": "1"}, None)
    now[0] += 2
    assert await cache.get("a") == ({"team": "a", "read": "2"}, None)
    assert fetch.calls == 2


async def test_failed_read_uses_stale_labels_with_a_warning_or_raises() -> None:
    fetch = Fetcher()
    cache = NamespaceLabels(fetch, ttl=30)
    now = [100.0]
    cache._clock = lambda: now[0]
    await cache.get("a")
    fetch.fail = True
    now[0] += 45
    labels, warning = await cache.get("a")
    assert labels == {"team": "a", "read": "1"}
    assert warning == (
        "namespace policy applied with labels of namespace 'a' read 45 s ago; the fresh read "
        "failed (ConnectionError: connection refused)"
    )
    with pytest.raises(NamespaceLookupError) as err:
        await cache.get("b")
    assert str(err.value) == (
        "could not read the labels of namespace 'b' to apply the namespace policy "
        "(ConnectionError: connection refused)"
    )


class GatedFetcher:
    """Blocks every read until ``release`` is set, counting reads and the ones under way."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, namespace: str) -> dict[str, str]:
        self.calls += 1
        self.started.set()
        assert self.release.wait(timeout=120), "the test never released the read"
        if self.fail:
            raise ConnectionError("connection refused")
        return {"team": namespace}


async def burst(cache: NamespaceLabels, namespace: str, n: int) -> list[Any]:
    """``n`` concurrent lookups, all waiting before the first read is let through."""
    fetch = cache._fetcher
    assert isinstance(fetch, GatedFetcher)
    tasks = [asyncio.create_task(cache.get(namespace)) for _ in range(n)]
    await asyncio.to_thread(fetch.started.wait, 120)
    for _ in range(10):  # let every task reach its await (one loop pass each suffices)
        await asyncio.sleep(0)
    fetch.release.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_concurrent_lookups_of_a_cold_namespace_share_one_read() -> None:
    # Issue 13, item 12: 300 concurrent reviews for a cold namespace made 136 reads.
    fetch = GatedFetcher()
    cache = NamespaceLabels(fetch, ttl=30, timeout=120)
    results = await burst(cache, "burst", 300)
    assert results == [({"team": "burst"}, None)] * 300
    assert fetch.calls == 1
    assert await cache.get("burst") == ({"team": "burst"}, None)  # cached now
    assert fetch.calls == 1


async def test_a_failed_shared_read_falls_back_to_the_freshest_labels() -> None:
    fetch = GatedFetcher()
    cache = NamespaceLabels(fetch, ttl=30, timeout=120)
    now = [100.0]
    cache._clock = lambda: now[0]
    fetch.release.set()
    await cache.get("a")
    now[0] += 60
    fetch.release.clear()
    fetch.started.clear()
    fetch.fail = True
    results = await burst(cache, "a", 50)
    assert fetch.calls == 2
    assert all(labels == {"team": "a"} for labels, _ in results)
    assert {warning for _, warning in results} == {
        "namespace policy applied with labels of namespace 'a' read 60 s ago; the fresh read "
        "failed (ConnectionError: connection refused)"
    }


async def test_a_waiter_that_gives_up_does_not_cancel_the_shared_read() -> None:
    fetch = GatedFetcher()
    cache = NamespaceLabels(fetch, ttl=30, timeout=120)
    first = asyncio.create_task(cache.get("a"))
    await asyncio.to_thread(fetch.started.wait, 120)
    second = asyncio.create_task(cache.get("a"))
    await asyncio.sleep(0)
    first.cancel()
    fetch.release.set()
    assert await second == ({"team": "a"}, None)
    assert fetch.calls == 1


async def test_a_read_slower_than_the_reviews_still_fills_the_cache() -> None:
    # On a busy node the first read can outlast the reviews' 2 s: they fail (nothing cached),
    # but the read goes on and the reviews after it find the labels instead of failing too.
    fetch = GatedFetcher()
    cache = NamespaceLabels(fetch, ttl=30, timeout=0.05, read_deadline=120)
    with pytest.raises(NamespaceLookupError, match="no answer from the API in time"):
        await cache.get("slow")
    fetch.release.set()
    async with asyncio.timeout(60):
        while "slow" not in cache._entries:
            await asyncio.sleep(0.01)
    assert await cache.get("slow") == ({"team": "slow"}, None)
    assert fetch.calls == 1
