"""What the operator knows of each GPUWorkload: the watch's index, with its own last writes.

The watch lags behind the operator's own writes. A workload's state is taken from the
operator's last status write until the watch has caught up with it (by ``resourceVersion``);
a decision made on the watch's older state would undo the write it just made. The index holds
every workload for the operator's lifetime, so it keeps them compact (:class:`CompactWorkload`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gpu_sizer.measurement.plain import plain

__all__ = [
    "CompactWorkload",
    "Key",
    "WorkloadIndex",
    "merge_patch",
    "slim_workload",
]

Key = tuple[str, str]
T = TypeVar("T")

#: How long the operator's own status write stands in for a watch that has not shown it, when
#: resourceVersions cannot be ordered (they are opaque strings by contract; etcd's are integers).
WRITE_OVERLAY_SECONDS = 30.0


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) turning ``old`` into ``new``: removed keys become None."""
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif before != value or key not in old:
            patch[key] = value
    return patch


def slim_workload(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a decision reads of a GPUWorkload: identity, generation, resourceVersion, deletion,
    the raw spec and status (plain data, whatever their types: an object stored without the
    CRD's schema may hold a string as its spec; :func:`parse_spec` says so)."""
    meta = body.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "generation": meta.get("generation"),
            "resourceVersion": meta.get("resourceVersion"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": plain(body.get("spec")),
        "status": plain(body.get("status")),
    }


_META_FIELDS = ("name", "namespace", "uid", "generation", "resourceVersion", "deletionTimestamp")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON data")


class CompactWorkload(Mapping[str, Any]):
    """A GPUWorkload as the watch's index keeps it: what :func:`slim_workload` keeps, with the
    spec and the status held as compact JSON text and decoded when read.

    The index holds every workload for the operator's lifetime. As nested dicts a settled
    workload's spec and status took about 15 KiB (their JSON is about 4 KiB): 150 MiB at 10,000
    workloads. A decision reads them once (:meth:`expand`, about 50 µs for both);
    encoding them on each watch event costs less than the deep copy it replaces.
    """

    __slots__ = ("_derived", "_meta", "_spec", "_status")

    def __init__(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        self._meta = tuple(meta.get(f) for f in _META_FIELDS)
        dump = json.JSONEncoder(separators=(",", ":"), default=_jsonable).encode
        self._spec = dump(body.get("spec"))
        self._status = dump(body.get("status"))
        self._derived: dict[Callable[[Any], Any], Any] | None = None

    def __getitem__(self, key: str) -> Any:
        if key == "metadata":
            return dict(zip(_META_FIELDS, self._meta, strict=True))
        if key == "spec":
            return json.loads(self._spec)
        if key == "status":
            return json.loads(self._status)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(("metadata", "spec", "status"))

    def __len__(self) -> int:
        return 3

    def expand(self) -> dict[str, Any]:
        """The same as :func:`slim_workload` of the body it was made from (plain data)."""
        return {"metadata": self["metadata"], "spec": self["spec"], "status": self["status"]}

    def derive(self, view: Callable[[Any], T]) -> T:
        """``view(status)``, worked out once for this state (a watch event makes a new one)."""
        if self._derived is None:
            self._derived = {}
        if view not in self._derived:
            self._derived[view] = view(self["status"])
        result: T = self._derived[view]
        return result


def _newer(a: str | None, b: str | None) -> bool | None:
    """Whether resourceVersion ``a`` is newer than ``b``; None when they cannot be ordered."""
    if a and b and a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return None


@dataclass
class _Written:
    body: dict[str, Any]
    at: float


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class WorkloadIndex:
    """The watch's index of workloads (by ``(namespace, name)``) with the operator's own last
    status write per workload laid over it until the watch shows that write."""

    def __init__(self) -> None:
        self.index: Mapping[Any, Iterable[Mapping[str, Any]]] = {}
        self._written: dict[Key, _Written] = {}

    def remember(self, key: Key, body: Mapping[str, Any]) -> None:
        """The API's answer to a status write (or the fresh object after a conflict): it stands
        for the workload until the watch has caught up with it."""
        self._written[key] = _Written(slim_workload(body), time.monotonic())

    def forget(self, key: Key) -> None:
        """The workload is gone."""
        self._written.pop(key, None)

    def all(self) -> Iterable[tuple[Key, Mapping[str, Any]]]:
        """Every workload of the index (the watch's states, as stored)."""
        for key, store in list(self.index.items()):
            for body in store:
                yield key, body

    def known(self) -> list[Any]:
        """The index's keys now."""
        return list(self.index)

    def _cached(self, key: Key) -> Mapping[str, Any] | None:
        best: Mapping[str, Any] | None = None
        for body in self.index.get(key, ()):
            if best is None or _newer(
                _meta(body).get("resourceVersion"), _meta(best).get("resourceVersion")
            ):
                best = body
        return best

    def workload(self, key: Key) -> Mapping[str, Any] | None:
        """The newest state known of the workload: the watch's, or the operator's own last
        write while the watch has not shown it yet. None when the object is gone."""
        newest = self._newest(key)
        return newest.expand() if isinstance(newest, CompactWorkload) else newest

    def status_view(self, key: Key, view: Callable[[Any], T]) -> T | None:
        """``view`` of the newest stored status of the workload (None when it is gone), worked
        out once per state the watch delivered (:meth:`CompactWorkload.derive`): a namespace's
        GPU-second budget reads every one of its workloads on each decision."""
        newest = self._newest(key)
        if newest is None:
            return None
        if isinstance(newest, CompactWorkload):
            return newest.derive(view)
        return view(newest.get("status"))

    def _newest(self, key: Key) -> Mapping[str, Any] | None:
        """:meth:`workload`, with the watch's state in its compact form."""
        cached = self._cached(key)
        written = self._written.get(key)
        if cached is None:
            self._written.pop(key, None)
            return None
        if written is not None:
            same = _meta(written.body).get("uid") == _meta(cached).get("uid")
            newer = _newer(
                _meta(written.body).get("resourceVersion"), _meta(cached).get("resourceVersion")
            )
            if newer is None:
                newer = _meta(written.body).get("resourceVersion") != _meta(cached).get(
                    "resourceVersion"
                ) and (time.monotonic() - written.at < WRITE_OVERLAY_SECONDS)
            if same and newer:
                return written.body
            del self._written[key]
        return cached
