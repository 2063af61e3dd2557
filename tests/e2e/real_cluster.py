"""The real-cluster backend of the e2e suite's ``cluster`` fixture.

Switch: ``GPU_SIZER_E2E_KUBECONFIG=/path/to/kubeconfig``. Without it the suite runs against kmock's
emulator on loopback (``conftest.py``), unchanged. With it:

* :class:`RealCluster` talks to that API server over plain REST (aiohttp), authenticated by the
  official ``kubernetes`` client's kubeconfig loader (client certificates, tokens, exec plugins),
  and offers the same helper methods the tests call on ``LoopbackCluster`` (``create``, ``get``,
  ``list``, ``patch``, ``change_spec``, ``delete``, ``request``, ``kubeconfig``).
* Each test gets fresh namespaces (``gse2e-<random>-ml-team``, ``gse2e-<random>-team-b``, ...),
  created when first written to and deleted after the test, so the suite stays isolated on a
  shared cluster. The tests keep naming their logical namespaces (``ml-team``, ``conftest.NS``;
  ``team-b``): the client maps every namespace but the system ones to the test's on the way in
  (paths and ``metadata.namespace`` of sent objects) and back on the way out
  (``metadata.namespace`` of returned objects), so assertions read the same in both modes.
* The operator: ``GPU_SIZER_E2E_OPERATOR=local`` (default) starts ``gpu-sizer operator`` from this
  tree with :attr:`RealCluster.operator_kubeconfig` (that kubeconfig unless a test or fixture
  sets another, such as a ServiceAccount token's) and ``--namespace 'gse2e-<random>-*'`` (kopf's
  namespace glob: the test's namespaces only); ``installed`` means an operator already serving the
  cluster (the Helm chart's) handles the test namespaces, and the suite starts none (flags a test
  passes to ``start_operator`` are then ignored: the chart's own apply).
* Nodes are the cluster's: a test marked ``gpu_classes("nvidia-l4", ...)`` is skipped when no node
  carries a GPU Feature Discovery product label of that class (``gpu_sizer.catalog``'s default
  catalog).
* Every version of a GPUWorkload or measurement Job in the test's namespaces is recorded from
  watches (the equivalent of kmock's object histories, :attr:`RealCluster.history`): the
  statuses for ``test_zz_status_schema.py``, the Jobs ever created for the tests that count them.
* Tests marked ``emulated_kubelet`` (they write pod/Job status or create Nodes, which a real
  kubelet, Job controller or GFD owns), ``emulated_api`` (they inject faults through kmock) or, with
  the installed operator, ``local_operator`` (they kill, restart or read the log of the operator
  process) are skipped with that reason.

An unreachable API server, or one without the GPUWorkload CRD, ends the session at the first test
with the reason (``pytest.exit``) instead of timing out test after test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any, Self

import aiohttp
import pytest

from gpu_sizer.api import GROUP, PLURAL
from gpu_sizer.catalog import DEFAULT_CATALOG, class_for_product

ENV_KUBECONFIG = "GPU_SIZER_E2E_KUBECONFIG"
ENV_OPERATOR = "GPU_SIZER_E2E_OPERATOR"
#: ``1``: "the cluster" is kmock 0.8's emulator (the self-test in test_real_cluster_mode.py).
#: kmock 0.8 cannot parse ``/api/v1/namespaces`` (every verb answers 500), so the backend does not
#: create or delete the per-test namespaces (the emulator stores objects in any namespace) and
#: runs the operator with ``-A`` (with ``--namespace``, kopf 1.45 still lists namespaces and
#: retries that 500 forever); the emulator is private to that run, so ``-A`` isolates nothing less.
ENV_KMOCK = "GPU_SIZER_E2E_API_IS_KMOCK"
OPERATOR_MODES = ("local", "installed")
PRODUCT_LABEL = "nvidia.com/gpu.product"
#: How every namespace the suite creates begins: ``gse2e-<random>-<logical name>``.
NAMESPACE_PREFIX = "gse2e-"
#: Label on every namespace the suite creates (find leftovers: ``kubectl get ns -l ...``).
NAMESPACE_LABEL = "gpusizer.dev/e2e"
#: Seconds allowed to connect to the API server before the session is ended with the reason.
CONNECT_TIMEOUT = 10.0

GW = (GROUP, "v1alpha1", PLURAL)
JOBS = ("batch", "v1", "jobs")
CRD_NAME = f"{PLURAL}.{GROUP}"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: Namespaces every cluster has: never mapped to a test's own.
SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})

#: Called with each object a watch sees.
Handler = Callable[[tuple[str, str, str], dict[str, Any]], Awaitable[None]]

#: Why each marker skips in real-cluster mode.
SKIP_REASONS = {
    "emulated_kubelet": "real-cluster mode: the test plays kubelet, Job controller or GPU Feature "
    "Discovery (writes pod/Job status or creates Nodes), which the cluster's own components own, "
    "or needs measurement pods that no kubelet runs",
    "audit_log": "real-cluster mode: the test counts the API server's answers in its audit "
    "log, which only the envtest control plane (KUBEBUILDER_ASSETS) exposes",
    "emulated_api": "real-cluster mode: the test injects API faults or stores objects through "
    "kmock's emulator",
}
LOCAL_OPERATOR_REASON = (
    f"{ENV_OPERATOR}=installed: the test kills, restarts or reads the log of the operator "
    "process the suite starts"
)


def kubeconfig_from_env(env: Mapping[str, str] = os.environ) -> str | None:
    """The real cluster's kubeconfig path, or ``None`` for loopback mode.

    :raises pytest.UsageError: the variable names a file that does not exist.
    """
    path = env.get(ENV_KUBECONFIG, "").strip()
    if not path:
        return None
    if not os.path.isfile(path):
        raise pytest.UsageError(f"{ENV_KUBECONFIG}={path}: no such file")
    return path


def operator_mode_from_env(env: Mapping[str, str] = os.environ) -> str:
    """``local`` (the suite starts the operator) or ``installed`` (one already serves the cluster).

    :raises pytest.UsageError: any other value.
    """
    mode = env.get(ENV_OPERATOR, "").strip() or "local"
    if mode not in OPERATOR_MODES:
        raise pytest.UsageError(f"{ENV_OPERATOR}={mode!r}: use one of {', '.join(OPERATOR_MODES)}")
    return mode


def skip_reason(markers: set[str], *, real: bool, operator: str) -> str | None:
    """Why a test with these marker names does not run in this mode (``None``: it runs)."""
    if not real:
        return None
    for marker, reason in SKIP_REASONS.items():
        if marker in markers:
            return reason
    if operator == "installed" and "local_operator" in markers:
        return LOCAL_OPERATOR_REASON
    return None


def apply_mode_skips(items: list[pytest.Item]) -> None:
    """Add skip marks to the collected tests that cannot run in the selected mode."""
    real = kubeconfig_from_env() is not None
    operator = operator_mode_from_env()
    for item in items:
        reason = skip_reason({m.name for m in item.iter_markers()}, real=real, operator=operator)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def classes_of_nodes(nodes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """GPU class name -> names of the nodes whose GFD product label belongs to it."""
    out: dict[str, list[str]] = {}
    for node in nodes:
        meta = node.get("metadata") or {}
        product = (meta.get("labels") or {}).get(PRODUCT_LABEL)
        cls = class_for_product(DEFAULT_CATALOG, product) if product else None
        if cls is not None:
            out.setdefault(cls.name, []).append(str(meta.get("name")))
    return out


async def present_classes(cluster: Any) -> dict[str, list[str]]:
    """GPU classes present in ``cluster`` (either backend), from its nodes' GFD labels."""
    return classes_of_nodes(await cluster.list(("", "v1", "nodes")))


def path_of(
    resource: tuple[str, str, str], namespace: str | None = None, name: str | None = None
) -> str:
    group, version, plural = resource
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return base + f"/{plural}" + (f"/{name}" if name else "")


class ApiStatus(Exception):
    """An error status from the API server (same shape as the emulator client's)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:600]}")
        self.status = status
        self.text = text


#: Classes the running test requires (``gpu_classes`` marker), set by an autouse fixture in
#: conftest before the ``cluster`` fixture runs.
REQUIRED_CLASSES: tuple[str, ...] = ()


class RealCluster:
    """A real API server, one fresh namespace per test; ``async with RealCluster(...) as c:``."""

    def __init__(self, kubeconfig: str, logical_namespace: str, operator: str = "local") -> None:
        self.kubeconfig = kubeconfig
        self.logical_namespace = logical_namespace
        #: Every namespace this test writes to is ``<prefix><its logical name>``.
        self.prefix = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:6]}-"
        self.namespace = self.real_namespace(logical_namespace)
        self.installed_operator = operator == "installed"
        self.kmock = os.environ.get(ENV_KMOCK, "") == "1"
        #: The kubeconfig the suite's operator runs with: the test's own credentials unless a
        #: fixture puts another here first (a ServiceAccount token's, to run it as installed).
        self.operator_kubeconfig = kubeconfig
        #: What the suite's operator serves instead of ``-A``: only this test's namespaces.
        self.operator_scope = ["-A"] if self.kmock else ["--namespace", f"{self.prefix}*"]
        self.written_statuses: list[dict[str, Any]] = []
        #: (plural, logical namespace, name) -> every version the watches saw, in order.
        self.history: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        #: (plural, logical namespace, name, uid) of each object, when the watches first saw it.
        self.arrivals: list[tuple[str, str, str, str]] = []
        self.gpu_classes: dict[str, list[str]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._watches: list[asyncio.Task[None]] = []
        self._entered = False
        #: Real names of the namespaces this test created.
        self._created_namespaces: list[str] = []

    # ------------------------------------------------------------------ connection

    def _connect(self) -> aiohttp.ClientSession:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        headers = {"Accept": "application/json"}
        token = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
            "authorization"
        )
        if token:
            headers["Authorization"] = token
        tls: ssl.SSLContext | bool = False
        if cfg.host.startswith("https://"):
            if cfg.verify_ssl:
                tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
            else:
                tls = ssl.create_default_context()
                tls.check_hostname = False
                tls.verify_mode = ssl.CERT_NONE
            if cfg.cert_file:
                tls.load_cert_chain(cfg.cert_file, cfg.key_file)
        self.host = cfg.host.rstrip("/")
        return aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(ssl=tls),
            timeout=aiohttp.ClientTimeout(total=60, connect=CONNECT_TIMEOUT),
        )

    async def __aenter__(self) -> Self:
        self._session = self._connect()
        try:
            await self._check_reachable()
            self._entered = True
            await self._ensure_namespace(self.namespace)
            await self._prepare()
            self.gpu_classes = await present_classes(self)
            missing = [c for c in REQUIRED_CLASSES if c not in self.gpu_classes]
            if missing:
                pytest.skip(
                    f"needs a node of GPU class {', '.join(missing)} (GPU Feature Discovery "
                    f"label {PRODUCT_LABEL}); the cluster has: "
                    f"{sorted(self.gpu_classes) or 'no labelled GPU nodes'}"
                )
            self._watches += [
                self._task(self._watch(GW, None, self._keep)),
                self._task(self._watch(JOBS, {MANAGED_BY_LABEL: "gpu-sizer"}, self._keep)),
            ]
        except BaseException:
            await self._close()
            raise
        return self

    async def _prepare(self) -> None:
        """What a backend sets up before the test's GPU classes are read (nothing here: a real
        cluster's nodes are its own)."""

    @staticmethod
    def _task(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.create_task(coro)

    async def _ensure_namespace(self, namespace: str | None) -> None:
        """Create one of this test's namespaces the first time it is written to."""
        if (
            self.kmock
            or not namespace
            or not namespace.startswith(self.prefix)
            or namespace in self._created_namespaces
        ):
            return
        try:
            await self.request(
                "POST",
                "/api/v1/namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": {NAMESPACE_LABEL: "true"}},
                },
            )
        except ApiStatus as exc:
            if exc.status != 409:
                raise
        self._created_namespaces.append(namespace)

    async def _check_reachable(self) -> None:
        try:
            await self.request("GET", "/version", timeout=CONNECT_TIMEOUT)
        except (aiohttp.ClientError, TimeoutError, OSError, ApiStatus) as exc:
            pytest.exit(
                f"{ENV_KUBECONFIG}={self.kubeconfig}: the API server {self.host} is not "
                f"reachable ({type(exc).__name__}: {exc}); unset {ENV_KUBECONFIG} to run against "
                "the loopback emulator",
                returncode=pytest.ExitCode.USAGE_ERROR,
            )
        crds = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        if await self.get(crds, None, CRD_NAME) is None:
            pytest.exit(
                f"{ENV_KUBECONFIG}={self.kubeconfig}: the cluster has no CRD {CRD_NAME}; apply "
                "crds/gpuworkloads.gpusizer.dev.yaml (or install charts/gpu-sizer) first",
                returncode=pytest.ExitCode.USAGE_ERROR,
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _close(self) -> None:
        # A watch ends only when cancelled: one that died took the record (and, on the control
        # plane, the kubelet's part) with it, and the test's checks of them would mean nothing.
        died = [t.exception() for t in self._watches if t.done() and not t.cancelled()]
        for task in self._watches:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        try:
            if self._entered:
                await self._clean_up()
        finally:
            if self._session is not None:
                await self._session.close()
        assert not died, f"a watch of the test's objects died: {died!r}"

    async def _clean_up(self) -> None:
        """The operator is already stopped (its fixture ends first): release kopf's finalizers
        so that the namespaces do not stay Terminating, then delete the namespaces (the API
        server and garbage collector remove everything in them)."""
        for namespace in self._created_namespaces:
            for obj in await self.list(GW, namespace):
                if (obj.get("metadata") or {}).get("finalizers"):
                    with contextlib.suppress(ApiStatus):
                        await self.patch(
                            GW,
                            namespace,
                            obj["metadata"]["name"],
                            {"metadata": {"finalizers": None}},
                        )
        for namespace in self._created_namespaces:
            await self.delete(("", "v1", "namespaces"), None, namespace)

    async def _watch(
        self, resource: tuple[str, str, str], labels: Mapping[str, str] | None, handle: Handler
    ) -> None:
        """List and watch ``resource`` in every namespace; ``handle`` each object seen (as the
        API server sent it: real namespaces).

        A dropped connection or an ERROR event (410 Gone) lists again and watches from there.
        """
        while True:
            with contextlib.suppress(aiohttp.ClientError, ApiStatus, ValueError):
                await self._watch_once(resource, labels, handle)
            await asyncio.sleep(0.2)

    async def _watch_once(
        self, resource: tuple[str, str, str], labels: Mapping[str, str] | None, handle: Handler
    ) -> None:
        path = path_of(resource)
        params = (
            {"labelSelector": ",".join(f"{k}={v}" for k, v in labels.items())} if labels else {}
        )
        assert self._session is not None
        async with self._session.get(self.host + path, params=params) as resp:
            if resp.status >= 400:
                raise ApiStatus(resp.status, await resp.text())
            listing = json.loads(await resp.text())
        for item in listing.get("items") or []:
            await handle(resource, item)
        version = (listing.get("metadata") or {}).get("resourceVersion") or ""
        params = {**params, "watch": "true", "resourceVersion": version}
        async with self._session.get(
            self.host + path, params=params, timeout=aiohttp.ClientTimeout(sock_read=None)
        ) as resp:
            async for line in resp.content:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    await handle(resource, event.get("object") or {})
                elif event.get("type") == "ERROR":
                    return

    async def _keep(self, resource: tuple[str, str, str], obj: dict[str, Any]) -> None:
        """Record a version of a GPUWorkload or Job of this test (:attr:`history`)."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        if not namespace.startswith(self.prefix):
            return
        key = (resource[2], self._logical(namespace), str(meta.get("name")))
        versions = self.history.setdefault(key, [])
        if versions and versions[-1].get("metadata", {}).get("resourceVersion") == meta.get(
            "resourceVersion"
        ):
            return  # listed again after a reconnect
        if all(v["metadata"].get("uid") != meta.get("uid") for v in versions):
            self.arrivals.append((*key, str(meta.get("uid"))))
        versions.append(obj)
        status = obj.get("status")
        new = not self.written_statuses or self.written_statuses[-1] != status
        if resource == GW and status and new:
            self.written_statuses.append(status)

    # ------------------------------------------------------------------ namespace mapping

    def real_namespace(self, namespace: str) -> str:
        """The namespace this test's objects of logical namespace ``namespace`` live in (system
        namespaces, and names already mapped, this test's or another's, are their own)."""
        if namespace in SYSTEM_NAMESPACES or namespace.startswith(NAMESPACE_PREFIX):
            return namespace
        return f"{self.prefix}{namespace}"[:63].rstrip("-")

    def _logical(self, namespace: str) -> str:
        return namespace[len(self.prefix) :] if namespace.startswith(self.prefix) else namespace

    def _ns_in(self, namespace: str | None) -> str | None:
        return self.real_namespace(namespace) if namespace else namespace

    def _ns_out(self, doc: Any) -> Any:
        if isinstance(doc, dict):
            meta = doc.get("metadata")
            if isinstance(meta, dict) and isinstance(meta.get("namespace"), str):
                meta["namespace"] = self._logical(meta["namespace"])
            for item in doc.get("items") or []:
                self._ns_out(item)
        return doc

    # ------------------------------------------------------------------ the helpers tests call

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout: float | None = None,
        content_type: str | None = None,
        **kw: Any,
    ) -> Any:
        """One API call; returns the decoded JSON body (namespaces mapped back). A PATCH is a
        JSON merge patch unless ``content_type`` says otherwise.

        :raises ApiStatus: the server answered with an error status.
        """
        assert self._session is not None
        headers = {}
        if body is not None:
            headers["Content-Type"] = content_type or (
                "application/merge-patch+json" if method == "PATCH" else "application/json"
            )
        if timeout is not None:
            kw["timeout"] = aiohttp.ClientTimeout(total=timeout)
        async with self._session.request(
            method,
            self.host + path,
            data=None if body is None else json.dumps(body),
            headers=headers,
            **kw,
        ) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ApiStatus(resp.status, text)
            return self._ns_out(json.loads(text)) if text else None

    async def create(self, resource: tuple[str, str, str], obj: Mapping[str, Any]) -> Any:
        """POST an object into its (mapped) namespace; the API server fills uid and the rest."""
        doc = json.loads(json.dumps(obj))
        meta = doc.setdefault("metadata", {})
        namespace = self._ns_in(meta.get("namespace"))
        if namespace:
            meta["namespace"] = namespace
            await self._ensure_namespace(namespace)
        return await self.request("POST", path_of(resource, namespace), doc)

    async def get(
        self, resource: tuple[str, str, str], namespace: str | None, name: str
    ) -> Any | None:
        """GET an object; ``None`` when it does not exist."""
        try:
            return await self.request("GET", path_of(resource, self._ns_in(namespace), name))
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
        """List objects by label selector (and filtered again here, as against the emulator)."""
        selector = ",".join(f"{k}={v}" for k, v in (labels or {}).items())
        params = {"labelSelector": selector} if selector else {}
        doc = await self.request("GET", path_of(resource, self._ns_in(namespace)), params=params)
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
        strategic: bool = False,
    ) -> Any:
        """Merge-patch an object (or its subresource); ``strategic``: a strategic merge patch
        (built-in kinds only: lists such as a pod's conditions merge by their key)."""
        path = path_of(resource, self._ns_in(namespace), name)
        return await self.request(
            "PATCH",
            path + (f"/{subresource}" if subresource else ""),
            patch,
            content_type="application/strategic-merge-patch+json" if strategic else None,
        )

    async def change_spec(
        self,
        resource: tuple[str, str, str],
        namespace: str,
        name: str,
        spec_patch: Mapping[str, Any],
    ) -> Any:
        """Merge-patch ``spec``; the API server bumps ``metadata.generation`` itself."""
        return await self.patch(resource, namespace, name, {"spec": spec_patch})

    async def delete(
        self, resource: tuple[str, str, str], namespace: str | None, name: str
    ) -> None:
        """DELETE an object (dependents in the background, as kubectl does); missing is fine."""
        try:
            await self.request(
                "DELETE",
                path_of(resource, self._ns_in(namespace), name),
                {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"},
            )
        except ApiStatus as exc:
            if exc.status != 404:
                raise


class InstalledOperator:
    """Stands in for ``OperatorProcess`` when an installed operator serves the cluster."""

    def stop(self) -> None:
        """Nothing to stop: the suite did not start it."""

    def kill(self) -> None:
        raise RuntimeError(
            f"{ENV_OPERATOR}=installed: the suite cannot kill the installed operator; "
            "mark the test local_operator"
        )

    def tail(self, lines: int = 60) -> str:
        return f"(installed operator: read its log with kubectl logs; last {lines} lines)"


def uses_installed_operator(cluster: Any) -> bool:
    """Whether ``cluster`` is the real-cluster backend with an installed operator."""
    return isinstance(cluster, RealCluster) and cluster.installed_operator


def validates_crd_schema(cluster: Any) -> bool:
    """Whether ``cluster`` is a real API server (it refuses objects its CRD schema rejects);
    kmock's emulator stores whatever it is sent, through either backend."""
    return isinstance(cluster, RealCluster) and not cluster.kmock
