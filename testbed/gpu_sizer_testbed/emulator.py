"""A Kubernetes API on loopback for the demo, the end-to-end suite and the scale benchmark.

It is kmock's ``KubernetesEmulator`` (by kopf's author, made for testing kopf operators) served on
127.0.0.1, with the resources the operator touches registered for discovery, and a small client
that plays the parts kmock 0.8 does not: it fills ``uid``, ``generation``, ``creationTimestamp``
on create and bumps ``generation`` on spec changes (kmock stores objects as given), and filters
lists by label on the client side (kmock ignores ``labelSelector``). There is no scheduler,
kubelet, Job controller or garbage collector: callers play those parts.
"""

from __future__ import annotations

import contextvars
import json
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

import kmock

from gpu_sizer.api import GROUP, KIND, PLURAL, SHORT_NAME, SINGULAR, VERSION
from gpu_sizer.api.record import RECORD_KIND, RECORD_PLURAL, RECORD_SHORT_NAME, RECORD_SINGULAR
from gpu_sizer.api.times import now_rfc3339
from gpu_sizer_testbed.kubectl import KubectlApi

__all__ = [
    "RESOURCES",
    "ApiServerEmulator",
    "ApiStatus",
    "FaultHook",
    "LoopbackCluster",
    "crd_document",
    "dra_resources",
    "kueue_resources",
    "path_of",
    "record_crd_document",
]

# (group, version, plural) -> ResourceInfo arguments. Everything the operator touches (RBAC in
# the common brief), plus namespaces and CRDs, which kopf's discovery waits for.
RESOURCES: dict[tuple[str, str, str], dict[str, Any]] = {
    (GROUP, VERSION, PLURAL): dict(
        kind=KIND,
        singular=SINGULAR,
        namespaced=True,
        shortnames={SHORT_NAME},
        categories={"gpusizer"},
        subresources={"status"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    ),
    (GROUP, VERSION, RECORD_PLURAL): dict(
        kind=RECORD_KIND,
        singular=RECORD_SINGULAR,
        namespaced=False,
        shortnames={RECORD_SHORT_NAME},
        categories={"gpusizer"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    ),
    ("batch", "v1", "jobs"): dict(
        kind="Job",
        singular="job",
        namespaced=True,
        subresources={"status"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    ),
    ("", "v1", "pods"): dict(
        kind="Pod",
        singular="pod",
        namespaced=True,
        shortnames={"po"},
        subresources={"status"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    ),
    ("", "v1", "nodes"): dict(
        kind="Node",
        singular="node",
        namespaced=False,
        shortnames={"no"},
        subresources={"status"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    ),
    ("", "v1", "namespaces"): dict(
        kind="Namespace",
        singular="namespace",
        namespaced=False,
        shortnames={"ns"},
        verbs={"get", "list", "watch", "create", "patch", "delete"},
    ),
    # The operator's measurement GPU-seconds ledger (one ConfigMap in its own namespace).
    ("", "v1", "configmaps"): dict(
        kind="ConfigMap",
        singular="configmap",
        namespaced=True,
        shortnames={"cm"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
    ),
    ("", "v1", "events"): dict(
        kind="Event",
        singular="event",
        namespaced=True,
        shortnames={"ev"},
        verbs={"create", "patch", "list", "get", "watch"},
    ),
    ("events.k8s.io", "v1", "events"): dict(
        kind="Event",
        singular="event",
        namespaced=True,
        shortnames={"ev"},
        verbs={"create", "patch", "list", "get", "watch"},
    ),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"): dict(
        kind="CustomResourceDefinition",
        singular="customresourcedefinition",
        namespaced=False,
        shortnames={"crd", "crds"},
        verbs={"get", "list", "watch", "create"},
    ),
}


def dra_resources(version: str = "v1") -> dict[tuple[str, str, str], dict[str, Any]]:
    """``resource.k8s.io`` in ``version``: what a cluster with DRA serves to the operator
    (ResourceSlices, cluster-scoped; ResourceClaimTemplates, namespaced). Not in
    :data:`RESOURCES`: a cluster without DRA is the common case; pass these as ``extra``."""
    return {
        ("resource.k8s.io", version, "resourceslices"): dict(
            kind="ResourceSlice",
            singular="resourceslice",
            namespaced=False,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        ),
        ("resource.k8s.io", version, "resourceclaimtemplates"): dict(
            kind="ResourceClaimTemplate",
            singular="resourceclaimtemplate",
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        ),
    }


def kueue_resources(version: str = "v1beta1") -> dict[tuple[str, str, str], dict[str, Any]]:
    """``kueue.x-k8s.io`` in ``version``: what the AdmissionCheck controller reads and writes
    (``--kueue-admission-check``); pass as ``extra``."""
    verbs = {"get", "list", "watch", "create", "update", "patch", "delete"}
    return {
        ("kueue.x-k8s.io", version, "workloads"): dict(
            kind="Workload",
            singular="workload",
            namespaced=True,
            subresources={"status"},
            verbs=verbs,
        ),
        ("kueue.x-k8s.io", version, "admissionchecks"): dict(
            kind="AdmissionCheck",
            singular="admissioncheck",
            namespaced=False,
            subresources={"status"},
            verbs=verbs,
        ),
        ("kueue.x-k8s.io", version, "resourceflavors"): dict(
            kind="ResourceFlavor",
            singular="resourceflavor",
            namespaced=False,
            verbs=verbs,
        ),
    }


def path_of(
    group: str, version: str, plural: str, namespace: str | None = None, name: str | None = None
) -> str:
    """The REST path of a collection or an object."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return base + (f"/{name}" if name else "")


def crd_document() -> dict[str, Any]:
    """The GPUWorkload CRD, generated from the API models (the document ``crds/`` holds).

    From the models rather than a file, so that an installed wheel serves the same schema as a
    source checkout."""
    from gpu_sizer.api.crd import build_crd

    return build_crd()


def record_crd_document() -> dict[str, Any]:
    """The GPUMeasurement CRD (shared measurement records), generated from the models."""
    from gpu_sizer.api.crd import build_record_crd

    return build_record_crd()


_CURRENT_REQUEST: contextvars.ContextVar[Any] = contextvars.ContextVar("request", default=None)


class FaultHook(Protocol):
    """Faults a test injects into the emulator (see ``tests/e2e/faults.py``)."""

    def before(self, request: Any) -> Exception | None:
        """An error to answer ``request`` with, before anything is stored; None to serve it."""

    def watch(self, request: Any, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The watch stream as the client gets it (delayed, cut, with injected errors)."""


def _conflict(message: str) -> Exception:
    return kmock.KubernetesError(status=409, reason="Conflict", message=message)


class ApiServerEmulator(KubectlApi, kmock.KubernetesEmulator):
    """kmock's emulator plus the object bookkeeping a real API server does on writes, and
    the API surface real ``kubectl`` needs (:class:`~gpu_sizer_testbed.kubectl.
    KubectlApi`).

    kmock 0.8 stores objects exactly as sent. Here, before kmock stores a write: a created
    object gets ``uid``, ``creationTimestamp``, ``generation: 1``, a name from
    ``generateName`` (kopf posts Events that way; without it every Event after the first is
    409 Conflict), and every write gets a new ``resourceVersion``; a spec change through the
    main resource bumps ``generation``. Writes to ``/status`` never touch ``spec``.
    Preconditions hold as on a real API server: an update carrying
    ``metadata.resourceVersion`` that is not the stored one, and a DELETE whose
    ``preconditions.uid`` is not the stored object's, are 409 Conflict and change nothing.
    ``faults`` (a :class:`FaultHook`) lets a test answer requests with errors and delay, cut
    or break watch streams.
    """

    _rv: int = 0
    faults: FaultHook | None = None

    def __iter__(self) -> Iterator[Any]:
        # kmock decides whether a reaction matches a request by checking ``request in view``,
        # which walks the whole request history through every reaction's filters: O(history)
        # per request, so an API server that has seen 10,000 requests answers in tenths of a
        # second. While a request is being matched only that request is visible; outside of
        # request handling (assertions in tests), the whole history is.
        current = _CURRENT_REQUEST.get()
        if current is not None:
            yield current
        else:
            yield from super().__iter__()

    async def _handle(self, request: Any) -> Any:
        _CURRENT_REQUEST.set(request)
        if self.faults is not None and request.resource is not None:
            fault = self.faults.before(request)
            if fault is not None:
                raise fault
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            if request.action == kmock.action.CREATE:
                self._fill_create(data)
            elif request.action == kmock.action.UPDATE and request.name:
                self._fill_update(request, data)
            elif request.action == kmock.action.DELETE and request.name:
                self._check_delete(request, data)
        return await super()._handle(request)

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        events = super()._serve_watch(request)
        if self.faults is not None:
            events = self.faults.watch(request, events)
        async for event in events:
            yield event

    def _KubernetesEmulator__get_objs(self, request: Any, strict: bool) -> list[Any]:
        # kmock 0.8 finds the object of every get, create, update and delete by walking every
        # stored object (``KubernetesEmulator.__get_objs``): O(objects) per request, so the
        # emulator, not the operator, is what slows down at thousands of workloads. A
        # request naming its object in one namespace is one dict lookup; any other (lists,
        # watches, a name in any namespace) and a miss keep kmock's walk.
        if request.name is not None and (strict or request.namespace is not None):
            found = self._stored_any(request)
            if found is not None:
                return [found]
        walk: list[Any] = super()._KubernetesEmulator__get_objs(request, strict)  # type: ignore[misc]
        return walk

    def _stored_any(self, request: Any) -> Any:
        """The object stored under the request's resource, namespace and name, soft-deleted
        or not; None when there is none."""
        key = (request.resource, request.namespace, request.name)
        return self.objects[key] if key in self.objects else None  # noqa: SIM401 (no .get)

    def _stored(self, request: Any) -> Any:
        current = self._stored_any(request)
        return None if current is None or current.deleted else current

    def _check_delete(self, request: Any, data: dict[str, Any]) -> None:
        wanted = (data.get("preconditions") or {}).get("uid")
        current = self._stored(request)
        if wanted and current is not None:
            have = (current.get("metadata") or {}).get("uid")
            if have != wanted:
                raise _conflict(
                    f"Precondition failed: UID in precondition: {wanted}, UID in object meta: "
                    f"{have}"
                )

    def _next_rv(self) -> str:
        ApiServerEmulator._rv += 1
        return str(ApiServerEmulator._rv)

    def _fill_create(self, data: dict[str, Any]) -> None:
        meta = data.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next_rv()

    def _fill_update(self, request: Any, data: dict[str, Any]) -> None:
        meta = data.setdefault("metadata", {}) if isinstance(data.get("metadata", {}), dict) else {}
        current = self._stored(request)
        sent = meta.get("resourceVersion")
        if sent is not None and current is not None:
            have = (current.get("metadata") or {}).get("resourceVersion")
            if have is not None and str(sent) != str(have):
                raise _conflict(
                    f'Operation cannot be fulfilled on {request.resource.plural} "{request.name}"'
                    ": the object has been modified; please apply your changes to the latest "
                    "version and try again"
                )
        if request.subresource == "status":
            data.pop("spec", None)
        elif "spec" in data and current is not None and current.get("spec") != data["spec"]:
            old = (current.get("metadata") or {}).get("generation") or 1
            meta["generation"] = int(old) + 1
        meta["resourceVersion"] = self._next_rv()


class LoopbackCluster:
    """kmock's emulator on 127.0.0.1 with a kubeconfig pointing at it.

    Use as ``async with LoopbackCluster() as cluster:``; ``cluster.kubeconfig`` is a file path.
    """

    def __init__(
        self,
        port: int | None = None,
        extra: Mapping[tuple[str, str, str], dict[str, Any]] | None = None,
    ) -> None:
        #: Every resource served: :data:`RESOURCES` and ``extra`` (e.g. :func:`dra_resources`).
        self.resources = {**RESOURCES, **(extra or {})}
        self.emulator = ApiServerEmulator()
        self._port = port
        self._server: kmock.Server | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="gpu-sizer-kube-")
        self.kubeconfig = str(Path(self._tmp.name) / "kubeconfig")
        for (group, version, plural), info in self.resources.items():
            key = f"{group}/{version}/{plural}" if group else f"v1/{plural}"
            self.emulator.resources[key] = kmock.ResourceInfo(**info)

    async def __aenter__(self) -> Self:
        await self.emulator.__aenter__()
        server = kmock.Server(self.emulator, port=self._port)
        self._server = await server.__aenter__()
        self._write_kubeconfig()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            await self._server.__aexit__(exc_type, exc, tb)
        await self.emulator.__aexit__(exc_type, exc, tb)
        self._tmp.cleanup()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.port}"

    def _write_kubeconfig(self) -> None:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "loopback", "cluster": {"server": self.url}}],
            "users": [{"name": "loopback", "user": {"token": "loopback"}}],
            "contexts": [
                {
                    "name": "loopback",
                    "context": {"cluster": "loopback", "user": "loopback", "namespace": "default"},
                }
            ],
            "current-context": "loopback",
        }
        Path(self.kubeconfig).write_text(json.dumps(doc))
        os.chmod(self.kubeconfig, 0o600)

    # ----------------------------------------------------------------- a tiny REST client

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """One API call; returns the decoded JSON body.

        :raises ApiStatus: the server answered with an error status.
        """
        assert self._server is not None
        headers = {}
        if method == "PATCH":
            headers["Content-Type"] = "application/merge-patch+json"
        async with self._server.client.request(
            method, path, data=None if body is None else json.dumps(body), headers=headers, **kw
        ) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ApiStatus(resp.status, text)
            return json.loads(text) if text else None

    async def create(self, resource: tuple[str, str, str], obj: Mapping[str, Any]) -> Any:
        """POST an object, filling what a real API server adds (uid, generation, timestamps)."""
        doc = json.loads(json.dumps(obj))
        meta = doc.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("generation", 1)
        meta.setdefault("creationTimestamp", now_rfc3339())
        meta.setdefault("resourceVersion", "1")
        group, version, plural = resource
        namespaced = self.resources[resource].get("namespaced")
        namespace = meta.get("namespace") if namespaced else None
        return await self.request("POST", path_of(group, version, plural, namespace), doc)

    async def get(
        self, resource: tuple[str, str, str], namespace: str | None, name: str
    ) -> Any | None:
        """GET an object; ``None`` when it does not exist."""
        try:
            return await self.request("GET", path_of(*resource, namespace, name))
        except ApiStatus as exc:
            if exc.status == 404:
                return None
            raise

    async def list(
        self,
        resource: tuple[str, str, str],
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[Any]:
        """List objects, filtered by ``labels`` on the client side (kmock ignores selectors)."""
        doc = await self.request("GET", path_of(*resource, namespace))
        items = list(doc.get("items") or [])
        if labels:
            items = [
                i
                for i in items
                if all(
                    ((i.get("metadata") or {}).get("labels") or {}).get(k) == v
                    for k, v in labels.items()
                )
            ]
        return items

    async def patch(
        self,
        resource: tuple[str, str, str],
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> Any:
        """Merge-patch an object (or its subresource)."""
        path = path_of(*resource, namespace, name) + (f"/{subresource}" if subresource else "")
        return await self.request("PATCH", path, patch)

    async def change_spec(
        self,
        resource: tuple[str, str, str],
        namespace: str,
        name: str,
        spec_patch: Mapping[str, Any],
    ) -> Any:
        """Patch ``spec`` and bump ``metadata.generation``, as a real API server does."""
        current = await self.get(resource, namespace, name)
        assert current is not None
        generation = int((current.get("metadata") or {}).get("generation") or 1) + 1
        return await self.patch(
            resource, namespace, name, {"metadata": {"generation": generation}, "spec": spec_patch}
        )

    async def delete(
        self, resource: tuple[str, str, str], namespace: str | None, name: str
    ) -> None:
        """DELETE an object; a missing one is fine."""
        try:
            await self.request("DELETE", path_of(*resource, namespace, name))
        except ApiStatus as exc:
            if exc.status != 404:
                raise


class ApiStatus(Exception):
    """An error status from the API server; ``text`` is the response body (a Status)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:300]}")
        self.status = status
        self.text = text
