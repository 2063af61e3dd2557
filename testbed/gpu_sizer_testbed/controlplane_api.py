"""A started real control plane, with the calls the demo makes on :class:`~gpu_sizer_testbed.
emulator.LoopbackCluster`.

:class:`ControlPlaneCluster` starts :mod:`gpu_sizer_testbed.controlplane` in a temporary
directory and talks to its API server as the admin (client certificate, TLS against the
control plane's own CA) over aiohttp. The calls have the emulator client's names and shapes
(``create``, ``get``, ``list``, ``patch``, ``delete``, ``kubeconfig``, ``url``) so that one demo
drives either; unlike the emulator client it adds nothing to what it sends: the API server
fills ``uid``, ``generation``, ``resourceVersion`` and timestamps, applies CRD defaults,
prunes unknown fields, runs the CRD's schema and CEL rules, filters by label selector, and
refuses what a cluster refuses (the error comes back as :class:`~gpu_sizer_testbed.emulator.
ApiStatus` with the server's message).

Whether a resource is namespaced is the server's answer (API discovery, ``namespaced`` of
``/api/v1`` or ``/apis/GROUP/VERSION``), not a table kept here.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from gpu_sizer_testbed import controlplane
from gpu_sizer_testbed.emulator import ApiStatus, path_of

__all__ = ["CRDS", "NODES", "ControlPlaneCluster", "CrdNotEstablished"]

CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
NODES = ("", "v1", "nodes")
#: Seconds a CRD may take to become Established (usually well under one; a loaded machine is
#: slower, and nothing is timed here but the give-up).
ESTABLISH_TIMEOUT = 120.0


class CrdNotEstablished(RuntimeError):
    """A created CRD did not reach ``Established=True``; the message has its conditions."""


class ControlPlaneCluster:
    """etcd, kube-apiserver (and the controller manager and scheduler where the assets have
    them) on 127.0.0.1, started on entry and stopped on exit.

    Use as ``async with ControlPlaneCluster(assets) as cluster:``; ``cluster.kubeconfig`` is
    the admin kubeconfig's path (client certificate files beside it, in the same temporary
    directory, removed on exit).

    :param assets: the folder with the binaries (:func:`~gpu_sizer_testbed.controlplane.
        assets_from_env`).
    :raises gpu_sizer_testbed.controlplane.ControlPlaneError: on entry, when it does not start.
    """

    def __init__(self, assets: Path) -> None:
        self.assets = assets
        self.plane: controlplane.ControlPlane | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._namespaced: dict[tuple[str, str, str], bool] = {}

    async def __aenter__(self) -> Self:
        self._tmp = tempfile.TemporaryDirectory(prefix="gpu-sizer-envtest-")
        try:
            # start() blocks on subprocesses and readiness polls: keep the event loop free.
            self.plane = await asyncio.to_thread(
                controlplane.start, self.assets, Path(self._tmp.name) / "plane"
            )
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.plane.ssl_context()),
                headers={"Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=60),
            )
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self.plane is not None:
            await asyncio.to_thread(controlplane.stop, self.plane)
            self.plane = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def url(self) -> str:
        """The API server's URL (``https://127.0.0.1:PORT``)."""
        assert self.plane is not None
        return self.plane.server

    @property
    def kubeconfig(self) -> str:
        """The admin kubeconfig (``system:masters``), as a file path."""
        assert self.plane is not None
        return str(self.plane.admin_kubeconfig)

    # ----------------------------------------------------------------- REST

    async def request(
        self, method: str, path: str, body: Any = None, *, params: Mapping[str, str] | None = None
    ) -> Any:
        """One API call; returns the decoded JSON body. PATCH bodies are JSON merge patches.

        :raises ApiStatus: the server answered with an error status (its Status as text).
        """
        assert self._session is not None and self.plane is not None
        headers = {}
        if body is not None:
            headers["Content-Type"] = (
                "application/merge-patch+json" if method == "PATCH" else "application/json"
            )
        async with self._session.request(
            method,
            self.plane.server + path,
            data=None if body is None else json.dumps(body),
            headers=headers,
            params=dict(params or {}),
        ) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ApiStatus(resp.status, text)
            return json.loads(text) if text else None

    async def version(self) -> str:
        """The API server's ``gitVersion`` (``v1.36.2``)."""
        return str((await self.request("GET", "/version")).get("gitVersion", "?"))

    async def namespaced(self, resource: tuple[str, str, str]) -> bool:
        """Whether ``resource`` (group, version, plural) is namespaced, by API discovery.

        :raises KeyError: the server does not serve it (a CRD not yet established).
        """
        if resource not in self._namespaced:
            group, version, _ = resource
            doc = await self.request("GET", f"/apis/{group}/{version}" if group else "/api/v1")
            for entry in doc.get("resources") or []:
                self._namespaced[(group, version, entry["name"])] = bool(entry["namespaced"])
        return self._namespaced[resource]

    async def create(self, resource: tuple[str, str, str], obj: Mapping[str, Any]) -> Any:
        """POST an object as given (a namespaced one without a namespace goes to ``default``,
        as ``kubectl create`` sends it)."""
        namespace = None
        if await self.namespaced(resource):
            namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        return await self.request("POST", path_of(*resource, namespace), dict(obj))

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
        """List objects; ``labels`` becomes a ``labelSelector`` the server applies."""
        params = (
            {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else {}
        )
        doc = await self.request("GET", path_of(*resource, namespace), params=params)
        return list(doc.get("items") or [])

    async def patch(
        self,
        resource: tuple[str, str, str],
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> Any:
        """Merge-patch an object (or its subresource, e.g. ``status``)."""
        path = path_of(*resource, namespace, name) + (f"/{subresource}" if subresource else "")
        return await self.request("PATCH", path, patch)

    async def delete(
        self, resource: tuple[str, str, str], namespace: str | None, name: str
    ) -> None:
        """DELETE an object; a missing one is fine."""
        try:
            await self.request("DELETE", path_of(*resource, namespace, name))
        except ApiStatus as exc:
            if exc.status != 404:
                raise

    # ----------------------------------------------------------------- what a cluster needs

    async def install_crd(self, crd: Mapping[str, Any]) -> None:
        """Create a CRD and wait until the server serves it (``Established=True``).

        :raises CrdNotEstablished: not established within :data:`ESTABLISH_TIMEOUT` seconds
            (``NamesAccepted=False`` names a clash with another CRD's names).
        """
        await self.create(CRDS, crd)
        name = crd["metadata"]["name"]
        deadline = time.monotonic() + ESTABLISH_TIMEOUT
        conditions: dict[str, Any] = {}
        while time.monotonic() < deadline:
            current = await self.get(CRDS, None, name) or {}
            conditions = {
                c.get("type"): c for c in (current.get("status") or {}).get("conditions") or []
            }
            if (conditions.get("Established") or {}).get("status") == "True":
                self._namespaced.clear()  # discovery now lists its resources
                return
            await asyncio.sleep(0.2)
        raise CrdNotEstablished(
            f"CRD {name} not Established after {ESTABLISH_TIMEOUT:.0f} s: "
            + json.dumps(list(conditions.values()))
        )

    async def add_node(self, node: Mapping[str, Any]) -> Any:
        """Create a Node object and then write its ``status`` through ``nodes/status``, as a
        kubelet registers itself and reports capacity (there is no kubelet here). The status
        the API server keeps from a create is not relied on."""
        body = {k: v for k, v in node.items() if k != "status"}
        created = await self.create(NODES, body)
        status = node.get("status")
        if not status:
            return created
        return await self.patch(
            NODES, None, node["metadata"]["name"], {"status": status}, subresource="status"
        )
