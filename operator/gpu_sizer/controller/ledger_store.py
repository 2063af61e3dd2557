"""The API side of the measurement GPU-seconds ledger (:mod:`gpu_sizer.measurement.ledger`): one
ConfigMap in the operator's own namespace, read once when first needed, written with the
``resourceVersion`` it was read at.

Only the active replica reconciles (kopf peering pauses the others), so only it writes. A write
that loses a race (409: another writer changed the ConfigMap since it was read) reads it again
and re-applies this process's charges, which are idempotent by Job uid: no charge is lost or
counted twice. A write the API server cannot take now (5xx, timeout) keeps the charges pending
in memory (they count against the budget at once) and is tried again at the next charge or
budget check of that namespace.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Mapping
from typing import Any

from gpu_sizer.controller import kube
from gpu_sizer.measurement import ledger
from gpu_sizer.measurement.ledger import Charge, Entry

__all__ = ["LedgerStore"]

log = logging.getLogger("gpu_sizer.ledger")

#: Attempts of one write racing other writers (each loss re-reads the ConfigMap).
_ATTEMPTS = 5


class LedgerStore:
    """The ledger ConfigMap ``name`` in ``namespace``, as this process last read or wrote it,
    plus the charges not written yet."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        self._entries: dict[str, Entry] = {}
        self._version: str | None = None
        self._loaded = False
        self._pending: dict[str, list[Charge]] = {}

    @property
    def path(self) -> str:
        return kube.object_path("", "v1", "configmaps", self.namespace, self.name)

    @property
    def loaded(self) -> bool:
        """Whether the ConfigMap was read (or found absent) at least once."""
        return self._loaded

    def used(self, namespace: str, now: _dt.datetime) -> int:
        """GPU-seconds charged to ``namespace`` on the UTC day of ``now``, pending charges
        included (0 before the first read: the workloads' statuses then stand alone)."""
        entry = ledger.apply(self._entries.get(namespace), self._pending.get(namespace, ()))
        return ledger.used_today(entry, now)

    def charge(self, namespace: str, c: Charge) -> None:
        """Count ``c`` against ``namespace`` now; :meth:`flush` writes it."""
        self._pending.setdefault(namespace, []).append(c)

    def pending(self, namespace: str) -> bool:
        return bool(self._pending.get(namespace))

    def _take(self, body: Any) -> None:
        body = body if isinstance(body, Mapping) else {}
        meta = body.get("metadata") if isinstance(body.get("metadata"), Mapping) else {}
        data = body.get("data")
        self._entries = ledger.parse(data if isinstance(data, Mapping) else None)
        self._version = str(meta.get("resourceVersion") or "") or None
        self._loaded = True

    async def load(self, client: kube.Client) -> bool:
        """Read the ConfigMap (absent: an empty ledger). False when the API server could not
        answer; the ledger stays as it was (the statuses still count)."""
        try:
            self._take(await client.get(self.path))
        except kube.NotFound:
            self._entries, self._version, self._loaded = {}, None, True
        except kube.ApiError as exc:
            log.warning("reading ConfigMap %s/%s: %s", self.namespace, self.name, exc)
            return False
        return True

    async def flush(self, client: kube.Client, namespace: str) -> bool:
        """Write the pending charges of ``namespace``; True once none is pending."""
        for _ in range(_ATTEMPTS):
            if not self._loaded and not await self.load(client):
                return False
            charges = self._pending.get(namespace, [])
            before = self._entries.get(namespace)
            target = ledger.apply(before, charges)
            if target is None or target == before:
                self._pending.pop(namespace, None)
                return True
            try:
                if self._version is None:
                    answer = await client.create(
                        kube.collection_path("", "v1", "configmaps", self.namespace),
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {
                                "name": self.name,
                                "labels": {"app.kubernetes.io/managed-by": "gpu-sizer"},
                            },
                            "data": ledger.data_patch(namespace, target, None)["data"],
                        },
                    )
                else:
                    patch = ledger.data_patch(namespace, target, self._version)
                    answer = await client.merge_patch(self.path, patch)
            except (kube.Conflict, kube.NotFound):
                # Another writer got there first (or the ConfigMap was deleted): read again.
                self._loaded = False
                continue
            except kube.ApiError as exc:
                log.warning(
                    "writing the GPU-seconds of namespace %s to ConfigMap %s/%s: %s (kept in "
                    "memory, tried again at the next charge)",
                    namespace,
                    self.namespace,
                    self.name,
                    exc,
                )
                return False
            self._take(answer)
            if self._entries.get(namespace) != target:
                continue  # the answer does not hold it (cannot happen on a real API server)
            self._pending.pop(namespace, None)
            return True
        return False
