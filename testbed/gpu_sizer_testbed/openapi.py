"""OpenAPI v3 documents for the loopback API server, generated from its resources and CRDs.

``kubectl apply`` validates before it writes: it reads ``/openapi/v3`` and the document of the
object's group-version, and when the PATCH operation of the object's path declares the
``fieldValidation`` query parameter it sends ``fieldValidation=Strict`` and lets the server
refuse unknown fields (kubectl ``cmd/util`` ``Validator`` with client-go's
``resource.NewQueryParamVerifierV3``). Without these documents kubectl falls back to OpenAPI
v2, which it reads only as protobuf, and refuses to apply without ``--validate=false``. The
same documents serve ``kubectl explain gpuworkload.spec.inference``.

Layout follows kube-apiserver's: ``/openapi/v3`` lists one entry per group-version
(``api/v1``, ``apis/GROUP/VERSION``) with a ``serverRelativeURL`` carrying a content hash;
each document has ``paths`` (collection and object paths per resource, operations tagged
with ``x-kubernetes-group-version-kind`` and ``x-kubernetes-action``) and
``components.schemas`` named by reversed group (``dev.gpusizer.v1alpha1.GPUWorkload``,
``io.k8s.api.core.v1.Node``). A CRD's kind gets its ``openAPIV3Schema`` with ``metadata``
pointing at ``ObjectMeta``, as the apiextensions-apiserver publishes it; built-in kinds get a
schema that accepts any fields (this server does not model them). Pure functions.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ServedResource", "group_version_document", "index_document", "schema_name"]

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


@dataclass(frozen=True)
class ServedResource:
    """A resource the server serves: identity, discovery facts and, for a CRD, its schema."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: frozenset[str]
    subresources: frozenset[str] = frozenset()
    #: The CRD version's ``openAPIV3Schema``; ``None`` for built-in kinds.
    schema: Mapping[str, Any] | None = None

    @property
    def group_version(self) -> str:
        """``api/v1`` for the core group, ``apis/GROUP/VERSION`` otherwise (the index keys)."""
        return f"api/{self.version}" if not self.group else f"apis/{self.group}/{self.version}"


def schema_name(group: str, version: str, kind: str) -> str:
    """The component name kube-apiserver gives a kind: reversed group, version, kind."""
    if not group:
        return f"io.k8s.api.core.{version}.{kind}"
    if "." not in group:  # batch, apps, ...: built-in groups live under io.k8s.api
        return f"io.k8s.api.{group}.{version}.{kind}"
    return f"{'.'.join(reversed(group.split('.')))}.{version}.{kind}"


def _gvk(r: ServedResource) -> dict[str, str]:
    return {"group": r.group, "version": r.version, "kind": r.kind}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


_WRITE_PARAMS = [
    {
        "name": "dryRun",
        "in": "query",
        "description": "When present, indicates that modifications should not be persisted.",
        "schema": {"type": "string", "uniqueItems": True},
    },
    {
        "name": "fieldManager",
        "in": "query",
        "description": "A name associated with the actor or entity that is making the changes.",
        "schema": {"type": "string", "uniqueItems": True},
    },
    {
        "name": "fieldValidation",
        "in": "query",
        "description": "How the server handles unknown or duplicate fields: Ignore, Warn or "
        "Strict (unknown fields are refused).",
        "schema": {"type": "string", "uniqueItems": True},
    },
]


def _operation(r: ServedResource, action: str, schema: str, *, write: bool) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{action}{r.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(r),
        "responses": {
            "200": {
                "description": "OK",
                "content": {"application/json": {"schema": _ref(schema)}},
            }
        },
    }
    if write:
        op["parameters"] = copy.deepcopy(_WRITE_PARAMS)
        op["requestBody"] = {"content": {"*/*": {"schema": _ref(schema)}}, "required": True}
    return op


def _paths(r: ServedResource, schema: str) -> dict[str, dict[str, Any]]:
    prefix = f"/{r.group_version}"
    scope = f"{prefix}/namespaces/{{namespace}}" if r.namespaced else prefix
    collection, item = f"{scope}/{r.plural}", f"{scope}/{r.plural}/{{name}}"
    paths: dict[str, dict[str, Any]] = {collection: {}, item: {}}
    if "list" in r.verbs:
        paths[collection]["get"] = _operation(r, "list", schema, write=False)
        if r.namespaced:
            paths[f"{prefix}/{r.plural}"] = {"get": _operation(r, "list", schema, write=False)}
    if "create" in r.verbs:
        paths[collection]["post"] = _operation(r, "post", schema, write=True)
    if "get" in r.verbs:
        paths[item]["get"] = _operation(r, "get", schema, write=False)
    if "update" in r.verbs:
        paths[item]["put"] = _operation(r, "put", schema, write=True)
    if "patch" in r.verbs:
        paths[item]["patch"] = _operation(r, "patch", schema, write=True)
    if "delete" in r.verbs:
        paths[item]["delete"] = _operation(r, "delete", schema, write=False)
    for sub in sorted(r.subresources):
        paths[f"{item}/{sub}"] = {
            "get": _operation(r, "get", schema, write=False),
            "put": _operation(r, "put", schema, write=True),
            "patch": _operation(r, "patch", schema, write=True),
        }
    return {p: ops for p, ops in paths.items() if ops}


_OBJECT_META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Standard object metadata: name, namespace, labels, annotations and the "
    "fields the server sets.",
    "properties": {
        "name": {"type": "string", "description": "Unique within a namespace."},
        "generateName": {"type": "string", "description": "Prefix for a generated name."},
        "namespace": {"type": "string", "description": "The namespace of the object."},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer", "format": "int64"},
        "creationTimestamp": {"type": "string", "format": "date-time"},
        "deletionTimestamp": {"type": "string", "format": "date-time"},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
        "managedFields": {
            "type": "array",
            "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    },
}


def _kind_schema(r: ServedResource) -> dict[str, Any]:
    if r.schema is None:
        body: dict[str, Any] = {
            "type": "object",
            "description": f"{r.kind} (served by the loopback emulator without a schema).",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"allOf": [_ref(OBJECT_META)]},
            },
        }
    else:
        body = copy.deepcopy(dict(r.schema))
        props = body.setdefault("properties", {})
        description = (props.get("metadata") or {}).get("description", "Standard object metadata.")
        props["metadata"] = {"description": description, "allOf": [_ref(OBJECT_META)]}
    body["x-kubernetes-group-version-kind"] = [_gvk(r)]
    return body


def group_version_document(resources: Sequence[ServedResource]) -> dict[str, Any]:
    """The OpenAPI 3.0 document of one group-version (all ``resources`` share it)."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {OBJECT_META: copy.deepcopy(_OBJECT_META_SCHEMA)}
    for r in sorted(resources, key=lambda r: r.plural):
        name = schema_name(r.group, r.version, r.kind)
        schemas[name] = _kind_schema(r)
        paths.update(_paths(r, name))
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (gpu-sizer loopback emulator)", "version": "unversioned"},
        "paths": paths,
        "components": {"schemas": schemas},
    }


def index_document(documents: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``/openapi/v3``: one entry per group-version key, with a hash of its document (clients
    cache a document by that URL)."""
    paths = {}
    for key, doc in sorted(documents.items()):
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}
