"""What real ``kubectl`` needs from the loopback API server, on top of kmock's emulator.

kmock 0.8's ``KubernetesEmulator`` is made for testing operators through a client library;
``kubectl`` asks for more. :class:`KubectlApi` is a mixin placed before
``kmock.KubernetesEmulator`` in :class:`~gpu_sizer_testbed.emulator.ApiServerEmulator`'s
bases; it overrides kmock's serving methods (kmock's documented way to extend the emulator) so
that these work against ``gpu-sizer demo --serve``:

- ``kubectl get gpuw -A``: lists carry ``kind: GPUWorkloadList`` and ``apiVersion``
  (kmock's have neither, and kubectl stops at ``Object 'Kind' is missing``), are ordered by
  namespace and name, and honour ``labelSelector`` and ``fieldSelector``
  (:mod:`~gpu_sizer_testbed.selector`);
- ``kubectl get`` columns: a ``meta.k8s.io/v1`` Table when asked for, from the CRD's printer
  columns (:mod:`~gpu_sizer_testbed.tables`);
- discovery: the core group's ``groupVersion`` is ``v1`` (kmock says ``/v1``, so kubectl
  sees no nodes or namespaces), and subresources are listed as the API server lists them
  (``gpuworkloads/status`` with verbs get, patch, update and no short names; kmock copies the
  main resource's, and kubectl warns that ``gpuw`` could mean ``gpuworkloads/status``);
- namespaces: ``/api/v1/namespaces[/NAME]`` is served (kmock's path parser fails on it with
  ``ValueError``), and a created Namespace is ``Active``;
- ``kubectl apply`` validation: OpenAPI v3 documents generated from the CRD
  (:mod:`~gpu_sizer_testbed.openapi`), and writes that carry ``fieldValidation``
  are checked against the CRD's schema (:mod:`~gpu_sizer_testbed.validation`);
- ``kubectl wait`` and ``kubectl get -w``: watches honour the selectors, start without a gap
  (kmock lists the existing objects before it subscribes to changes, so a change in between is
  lost), replay only what changed after the ``resourceVersion`` they start from (kmock replays
  everything), send Table rows when asked for them, and answer ``sendInitialEvents=true`` with
  the bookmark that ends the initial events.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import aiohttp.web
import kmock

from gpu_sizer_testbed.openapi import (
    ServedResource,
    group_version_document,
    index_document,
)
from gpu_sizer_testbed.protobuf import InvalidProtobuf, decode_object
from gpu_sizer_testbed.selector import (
    InvalidSelector,
    field_selector,
    label_selector,
)
from gpu_sizer_testbed.tables import builtin_columns, crd_columns, table, wants_table
from gpu_sizer_testbed.validation import check

__all__ = ["CRDS", "NAMESPACES", "KubectlApi"]

NAMESPACES = kmock.resource("", "v1", "namespaces")
CRDS = kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
_NAMESPACE_PATH = re.compile(r"^/api/v1/namespaces(?:/(?P<name>[^/]+))?/?$")
_SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"]}
_INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_PROTOBUF = "application/vnd.kubernetes.protobuf"


def _version(value: Any) -> int | None:
    """A resourceVersion as a number (this server counts them), or None: "", "0" and anything
    unparsable mean "from the start" (the API server's "any version")."""
    try:
        number = int(str(value))
    except ValueError:
        return None
    return number if number > 0 else None


def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    """A ``v1`` Status error response, as the API server sends it."""
    body = {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    return aiohttp.web.json_response(body, status=code)


def _openapi_v2() -> aiohttp.web.Response:
    """``/openapi/v2``, empty: kubectl validates with the OpenAPI v3 documents and asks for v2
    only for a kind none of them has (a misspelt ``kind:``, e.g. ``GpuWorkload``). An empty
    protobuf ``openapi_v2.Document`` (zero bytes is its encoding) has no such kind either, so
    kubectl skips validation and says what a cluster says: ``no matches for kind``. Without
    it kubectl stops at ``failed to download openapi``."""
    # The media type without the "@" of kubectl's Accept header: Go's mime parser refuses it.
    return aiohttp.web.Response(
        body=b"", content_type="application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    )


def _bad_request(message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status=400, reason="BadRequest", message=message)


class KubectlApi:
    """Mixin for kmock's ``KubernetesEmulator``: the API surface real kubectl uses."""

    # Provided by kmock.KubernetesEmulator (declared for type checkers).
    objects: Any
    resources: Any
    _lock: Any
    _buses: Any
    _requests: list[Any]

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()  # type: ignore[misc]
        # kmock streams watches as application/octet-stream, which client-go's watch decoder
        # refuses ("no stream serializers registered"); the API server says application/json.
        # A fallback one step above kmock's own serves the same stream with that header.
        fallback = self.fallback**1  # type: ignore[attr-defined]
        fallback[kmock.action.WATCH] << {"Content-Type": "application/json"} << self._serve_watch

    # ----------------------------------------------------------------- entry: namespaces, OpenAPI

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        path = raw_request.path
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            return await self._serve_openapi(path.removeprefix("/openapi/v3").strip("/"))
        if path == "/openapi/v2":
            return _openapi_v2()
        if (m := _NAMESPACE_PATH.match(path)) is not None:
            return await self._serve_namespaces(raw_request, m["name"])
        if _PROTOBUF in raw_request.headers.get("Content-Type", ""):
            return _status(
                415,
                "UnsupportedMediaType",
                "the loopback API server reads protobuf bodies for namespaces only; send JSON "
                "(kubectl apply -f does)",
            )
        return await super().__call__(raw_request)  # type: ignore[misc, no-any-return]

    async def _serve_namespaces(
        self, raw_request: aiohttp.web.BaseRequest, name: str | None
    ) -> aiohttp.web.StreamResponse:
        """Build the request kmock's path parser cannot (it takes ``namespaces`` for the start of
        a namespaced path) and hand it to the usual handling."""
        body = await raw_request.read()
        text = body.decode(errors="replace")
        data: Any = None
        try:
            if _PROTOBUF in raw_request.headers.get("Content-Type", ""):
                data = decode_object(body)  # kubectl create namespace
            else:
                data = await raw_request.json() if body else None
        except InvalidProtobuf as exc:
            return _status(400, "BadRequest", f"unreadable protobuf body: {exc}")
        except ValueError:
            data = None
        params = dict(raw_request.query)
        method = raw_request.method.upper()
        action: kmock.action | None
        if method == "GET":
            action = (
                kmock.action.WATCH
                if params.get("watch") in ("true", "1")
                else kmock.action.FETCH
                if name
                else kmock.action.LIST
            )
        else:
            action = {
                "POST": kmock.action.CREATE,
                "PATCH": kmock.action.UPDATE,
                "DELETE": kmock.action.DELETE,
            }.get(method)
        request = kmock.Request(
            id=len(self._requests),
            raw_request=raw_request,
            url=raw_request.url,
            method=raw_request.method,
            params=params,
            headers=dict(raw_request.headers),
            cookies=dict(raw_request.cookies),
            data=data,
            body=body,
            text=text,
            action=action,
            resource=NAMESPACES,
            namespace=None,
            name=name,
        )
        self._requests.append(request)
        try:
            return await self._handle(request)
        except Exception as exc:
            return await self._render_error(exc)  # type: ignore[attr-defined, no-any-return]

    async def _serve_openapi(self, key: str) -> aiohttp.web.StreamResponse:
        documents = self._openapi_documents()
        if not key:
            return aiohttp.web.json_response(index_document(documents))
        if key in documents:
            return aiohttp.web.json_response(documents[key])
        return _status(404, "NotFound", f"no OpenAPI v3 document for {key}")

    def _openapi_documents(self) -> dict[str, dict[str, Any]]:
        served = list(self._served_resources())
        keys = {r.group_version for r in served}
        return {
            key: group_version_document([r for r in served if r.group_version == key])
            for key in keys
        }

    def _served_resources(self) -> Iterable[ServedResource]:
        for resource in list(self.resources):
            info = self.resources[resource]
            crd = self._crd_version(resource)
            yield ServedResource(
                group=resource.group,
                version=resource.version,
                plural=resource.plural,
                kind=info.kind or resource.plural.capitalize(),
                namespaced=bool(info.namespaced),
                verbs=frozenset(info.verbs),
                subresources=frozenset(info.subresources),
                schema=((crd or {}).get("schema") or {}).get("openAPIV3Schema"),
            )

    # ----------------------------------------------------------------- CRDs stored in the server

    def _crd_version(self, resource: Any) -> Mapping[str, Any] | None:
        """The stored CRD's entry in ``spec.versions`` for ``resource``, if a CRD defines it."""
        for (res, _, _), obj in list(self.objects.items()):
            if res != CRDS or obj.deleted:
                continue
            spec = obj.get("spec") or {}
            names = spec.get("names") or {}
            if spec.get("group") != resource.group or names.get("plural") != resource.plural:
                continue
            for version in spec.get("versions") or []:
                if version.get("name") == resource.version:
                    return dict(version)
        return None

    def _kind(self, resource: Any) -> str:
        info = self.resources[resource]
        return str(info.kind or resource.plural.capitalize())

    @staticmethod
    def _api_version(resource: Any) -> str:
        return f"{resource.group}/{resource.version}" if resource.group else resource.version

    def _resource_version(self) -> str:
        return str(getattr(self, "_rv", 0))

    # ----------------------------------------------------------------- discovery

    async def _serve_version(self, request: Any) -> dict[str, Any]:
        group, version = request.resource.group, request.resource.version
        entries: list[dict[str, Any]] = []
        for resource in list(self.resources):
            if resource.group != group or resource.version != version:
                continue
            info = self.resources[resource]
            main = {
                "name": resource.plural,
                "singularName": info.singular or "",
                "namespaced": bool(info.namespaced),
                "kind": self._kind(resource),
                "verbs": sorted(info.verbs),
            }
            if info.shortnames:
                main["shortNames"] = sorted(info.shortnames)
            if info.categories:
                main["categories"] = sorted(info.categories)
            entries.append(main)
            for sub in sorted(info.subresources):
                entries.append(
                    {
                        "name": f"{resource.plural}/{sub}",
                        "singularName": "",
                        "namespaced": bool(info.namespaced),
                        "kind": self._kind(resource),
                        "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
                    }
                )
        if not entries and group:
            raise kmock.KubernetesResourceNotFoundError()
        return {
            "apiVersion": "v1",
            "kind": "APIResourceList",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": entries,
        }

    # ----------------------------------------------------------------- writes

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        if request.resource is not None and isinstance(request.data, dict):
            if request.action in (kmock.action.CREATE, kmock.action.UPDATE):
                self._validate_write(request)
            if request.action == kmock.action.CREATE and request.resource == NAMESPACES:
                meta = request.data.setdefault("metadata", {})
                labels = meta.setdefault("labels", {})
                labels.setdefault("kubernetes.io/metadata.name", meta.get("name", ""))
                request.data["status"] = {"phase": "Active"}
        return await super()._handle(request)  # type: ignore[misc, no-any-return]

    def _validate_write(self, request: Any) -> None:
        """A real API server checks custom resources against the CRD's schema; here only
        writes that ask for field validation (kubectl's) are checked, see
        :mod:`~gpu_sizer_testbed.validation`."""
        directive = str(request.params.get("fieldValidation") or "")
        if not directive or request.subresource:
            return
        crd = self._crd_version(request.resource)
        schema = ((crd or {}).get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, Mapping):
            return
        problems = check(schema, request.data, patch=request.action == kmock.action.UPDATE)
        kind = self._kind(request.resource)
        version = request.resource.version
        if problems.unknown and directive.lower() == "strict":
            fields = ", ".join(f'unknown field "{p}"' for p in problems.unknown)
            raise _bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: '
                f"strict decoding error: {fields}"
            )
        if problems.invalid:
            name = (request.data.get("metadata") or {}).get("name") or request.name or ""
            listed = [f"{path}: {message}" for path, message in problems.invalid]
            summary = listed[0] if len(listed) == 1 else f"[{', '.join(listed)}]"
            raise kmock.KubernetesError(
                status=422,
                reason="Invalid",
                message=f'{kind}.{request.resource.group} "{name}" is invalid: {summary}',
                details={
                    "name": name,
                    "group": request.resource.group,
                    "kind": kind,
                    "causes": [
                        {"reason": "FieldValueInvalid", "message": message, "field": path}
                        for path, message in problems.invalid
                    ],
                },
            )

    # ----------------------------------------------------------------- reads

    def _selected(self, request: Any, objs: Iterable[Mapping[str, Any]]) -> list[Any]:
        try:
            by_label = label_selector(request.params.get("labelSelector"))
            by_field = field_selector(request.params.get("fieldSelector"))
        except InvalidSelector as exc:
            raise _bad_request(str(exc)) from None
        return [o for o in objs if by_label(o) and by_field(o)]

    def _as_table(self, request: Any, objs: list[Any]) -> dict[str, Any]:
        crd = self._crd_version(request.resource)
        if crd is not None:
            columns = crd_columns(crd.get("additionalPrinterColumns") or [])
        else:
            columns = builtin_columns(request.resource.plural)
        return table(
            objs,
            columns,
            now=datetime.datetime.now(datetime.UTC),
            include_object=request.params.get("includeObject") or "Metadata",
            resource_version=self._resource_version(),
        )

    async def _serve_list(self, request: Any) -> dict[str, Any]:
        payload = await super()._serve_list(request)  # type: ignore[misc]
        items = sorted(
            self._selected(request, payload.get("items") or []),
            key=lambda o: (
                (o.get("metadata") or {}).get("namespace") or "",
                (o.get("metadata") or {}).get("name") or "",
            ),
        )
        if wants_table(request.headers.get("Accept")):
            return self._as_table(request, items)
        return {
            "apiVersion": self._api_version(request.resource),
            "kind": f"{self._kind(request.resource)}List",
            "metadata": {"resourceVersion": self._resource_version()},
            "items": items,
        }

    async def _serve_fetch(self, request: Any) -> Any:
        obj = await super()._serve_fetch(request)  # type: ignore[misc]
        if wants_table(request.headers.get("Accept")):
            return self._as_table(request, [obj])
        return obj

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        """Existing objects as ADDED, then changes: subscribed before listing, under the lock
        that every write takes, so that nothing between the two is lost."""
        bus = self._buses[request.resource]
        async with self._lock:
            mark = await bus.mark()
            existing = [
                obj.raw
                for (res, namespace, name), obj in list(self.objects.items())
                if res == request.resource
                and not obj.deleted
                and (request.namespace is None or namespace == request.namespace)
                and (request.name is None or name == request.name)
            ]
        initial = request.params.get("sendInitialEvents") == "true"
        since = None if initial else _version(request.params.get("resourceVersion"))
        as_table = wants_table(request.headers.get("Accept"))

        def shown(event: dict[str, Any]) -> dict[str, Any]:
            if not as_table:  # kubectl get -w prints each event as a Table row
                return event
            return {"type": event["type"], "object": self._as_table(request, [event["object"]])}

        try:
            yield b""  # send the headers: the stream has started even if nothing happens
            for raw in self._selected(request, existing):
                # Watching from the resourceVersion of a list: only what changed since.
                changed = _version((raw.get("metadata") or {}).get("resourceVersion"))
                if since is None or changed is None or changed > since:
                    yield shown({"type": "ADDED", "object": raw})
            if initial:
                yield {
                    "type": "BOOKMARK",
                    "object": {
                        "kind": self._kind(request.resource),
                        "apiVersion": self._api_version(request.resource),
                        "metadata": {
                            "resourceVersion": self._resource_version(),
                            "annotations": {_INITIAL_EVENTS_END: "true"},
                        },
                    },
                }
            async for event in bus.stream(since=mark):
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                if request.namespace is not None and meta.get("namespace") != request.namespace:
                    continue
                if request.name is not None and meta.get("name") != request.name:
                    continue
                if self._selected(request, [obj]):
                    yield shown(event)
        finally:
            await bus.unmark(mark)
