"""The namespace-label cache: TTL, stale answers on failure, and failure with nothing cached."""

from __future__ import annotations

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
