"""``meta.k8s.io/v1`` Tables: what ``kubectl get`` prints, rendered by the loopback API server.

``kubectl get`` asks the server for a Table (``Accept: application/json;as=Table;v=v1;
g=meta.k8s.io``) and prints its columns; a server that answers with the plain object gets only
NAME and AGE. A real API server fills a custom resource's Table from the CRD's
``additionalPrinterColumns`` (apiextensions-apiserver ``pkg/registry/customresource/
tableconvertor``: a ``Name`` column, then each printer column's JSONPath evaluated on the
object, ``date`` columns shown as an age) and built-in kinds' Tables from kubernetes
``pkg/printers/internalversion/printers.go``. Here the same, for the kinds the emulator serves:
GPUWorkloads from their CRD, and a short form of Node, Namespace, Event, Pod and Job.
Pure functions of plain data; ``now`` is passed in.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "Column",
    "InvalidJsonPath",
    "builtin_columns",
    "crd_columns",
    "human_duration",
    "jsonpath",
    "table",
    "wants_table",
]

#: A column: its definition (name, type, format, description, priority) and a cell function.
Column = tuple[dict[str, Any], Callable[[Mapping[str, Any], datetime.datetime], Any]]


class InvalidJsonPath(ValueError):
    """A printer column's JSONPath outside the supported subset."""


def wants_table(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for a ``meta.k8s.io`` Table (kubectl get does)."""
    return bool(accept) and "as=Table" in (accept or "") and "g=meta.k8s.io" in (accept or "")


def human_duration(seconds: float) -> str:
    """An age as kubectl shows it (apimachinery ``util/duration.HumanDuration``):
    ``45s``, ``3m12s``, ``25m``, ``5h3m``, ``2d4h``, ``40d``, ``3y12d``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24 % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _age(timestamp: Any, now: datetime.datetime) -> str:
    if not isinstance(timestamp, str) or not timestamp:
        return "<unknown>"
    try:
        when = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return human_duration((now - when).total_seconds())


# ------------------------------------------------------------------------------ JSONPath subset

_STEP = re.compile(
    r"""\.(?P<key>[A-Za-z0-9_\-]+)
      | \[(?P<index>-?\d+)\]
      | \[\*\]
      | \[\?\(@\.(?P<fpath>[A-Za-z0-9_.\-]+)\s*==\s*(?P<q>["'])(?P<fvalue>.*?)(?P=q)\)\]
      | \['(?P<qkey>[^']+)'\]""",
    re.VERBOSE,
)


def jsonpath(path: str) -> Callable[[Any], list[Any]]:
    """Compile the JSONPath subset printer columns use: ``.a.b``, ``[0]``, ``[*]``,
    ``['key.with.dots']`` and filters ``[?(@.type=="Ready")]``. The compiled function returns
    every match (empty when the path leads nowhere).

    :raises InvalidJsonPath: anything else.
    """
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    steps: list[Callable[[Any], list[Any]]] = []
    pos = 0
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None:
            raise InvalidJsonPath(f"unsupported JSONPath {path!r} at {text[pos:]!r}")
        pos = m.end()
        steps.append(_step(m))

    def evaluate(root: Any) -> list[Any]:
        values = [root]
        for step in steps:
            values = [out for v in values for out in step(v)]
        return values

    return evaluate


def _step(m: re.Match[str]) -> Callable[[Any], list[Any]]:
    key = m["key"] or m["qkey"]
    if key is not None:
        return lambda v: [v[key]] if isinstance(v, Mapping) and key in v else []
    if m["index"] is not None:
        i = int(m["index"])
        return lambda v: [v[i]] if isinstance(v, list) and -len(v) <= i < len(v) else []
    if m["fpath"] is not None:
        fpath, want = m["fpath"].split("."), m["fvalue"]

        def keep(item: Any) -> bool:
            for part in fpath:
                item = item.get(part) if isinstance(item, Mapping) else None
            return item is not None and _text(item) == want

        return lambda v: [x for x in v if keep(x)] if isinstance(v, list) else []
    return lambda v: (
        list(v) if isinstance(v, list) else list(v.values()) if isinstance(v, Mapping) else []
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


# ------------------------------------------------------------------------------ columns


def _definition(
    name: str, type_: str = "string", description: str = "", priority: int = 0, fmt: str = ""
) -> dict[str, Any]:
    return {
        "name": name,
        "type": type_,
        "format": fmt,
        "description": description,
        "priority": priority,
    }


def _name_column() -> Column:
    return (
        _definition(
            "Name",
            description="Name must be unique within a namespace. Cannot be updated.",
            fmt="name",
        ),
        lambda obj, now: (obj.get("metadata") or {}).get("name", ""),
    )


def _age_column() -> Column:
    return (
        _definition("Age", description="Time since creationTimestamp."),
        lambda obj, now: _age((obj.get("metadata") or {}).get("creationTimestamp"), now),
    )


def crd_columns(printer_columns: Sequence[Mapping[str, Any]]) -> list[Column]:
    """Columns of a custom resource's Table from its CRD's ``additionalPrinterColumns``.

    Without printer columns a real server shows Name and Created At; with them, Name and
    each column in order. Cells: ``string`` columns print the value as text, ``integer``,
    ``number`` and ``boolean`` columns keep the JSON value, ``date`` columns show the age;
    a path that leads nowhere is an empty cell (``None``, which kubectl prints as
    ``<none>``).

    :raises InvalidJsonPath: a column's ``jsonPath`` outside the supported subset.
    """
    columns = [_name_column()]
    if not printer_columns:
        created = _definition("Created At", "date", "Time the object was created.")
        columns.append((created, lambda o, now: (o.get("metadata") or {}).get("creationTimestamp")))
        return columns
    for spec in printer_columns:
        find = jsonpath(str(spec["jsonPath"]))
        type_ = str(spec.get("type", "string"))
        definition = _definition(
            str(spec["name"]),
            type_,
            str(spec.get("description", "")),
            int(spec.get("priority", 0)),
            str(spec.get("format", "")),
        )
        columns.append((definition, _cell(find, type_)))
    return columns


def _cell(find: Callable[[Any], list[Any]], type_: str) -> Callable[[Mapping[str, Any], Any], Any]:
    def cell(obj: Mapping[str, Any], now: datetime.datetime) -> Any:
        found = find(obj)
        if not found:
            return None
        value = found[0]
        if type_ == "date":
            return _age(value, now)
        if type_ == "string":
            return _text(value)
        if type_ == "integer" and isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    return cell


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in conds if isinstance(c, Mapping)}


def _node_status(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    ready = _conditions(obj).get("Ready")
    status = {"True": "Ready", "False": "NotReady"}.get(str((ready or {}).get("status")), "Unknown")
    if (obj.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    prefix = "node-role.kubernetes.io/"
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.removeprefix(prefix) for k in labels if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _event_object(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    ref = obj.get("involvedObject") or obj.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event_last_seen(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    when = (
        obj.get("lastTimestamp")
        or obj.get("eventTime")
        or obj.get("firstTimestamp")
        or (obj.get("metadata") or {}).get("creationTimestamp")
    )
    return _age(when, now)


def _job_status(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    conds = _conditions(obj)
    for type_ in ("Complete", "Failed", "Suspended"):
        if str((conds.get(type_) or {}).get("status")) == "True":
            return type_
    return "Running"


def _pod_ready(obj: Mapping[str, Any], now: datetime.datetime) -> str:
    statuses = (obj.get("status") or {}).get("containerStatuses") or []
    containers = (obj.get("spec") or {}).get("containers") or statuses
    ready = sum(1 for s in statuses if isinstance(s, Mapping) and s.get("ready"))
    return f"{ready}/{len(containers)}"


def _field(*path: str) -> Callable[[Mapping[str, Any], Any], Any]:
    def cell(obj: Mapping[str, Any], now: datetime.datetime) -> Any:
        value: Any = obj
        for part in path:
            value = value.get(part) if isinstance(value, Mapping) else None
        return value if value is not None else ""

    return cell


_BUILTIN: dict[str, list[Column]] = {
    "nodes": [
        _name_column(),
        (_definition("Status", description="The status of the node"), _node_status),
        (_definition("Roles", description="The roles of the node"), _node_roles),
        _age_column(),
        (
            _definition("Version", description="Kubelet version"),
            _field("status", "nodeInfo", "kubeletVersion"),
        ),
    ],
    "namespaces": [
        _name_column(),
        (
            _definition("Status", description="The status of the namespace"),
            _field("status", "phase"),
        ),
        _age_column(),
    ],
    "events": [
        (_definition("Last Seen", description="Time of the last occurrence"), _event_last_seen),
        (_definition("Type", description="Normal or Warning"), _field("type")),
        (_definition("Reason", description="Why the event was posted"), _field("reason")),
        (_definition("Object", description="The object it is about"), _event_object),
        (_definition("Message", description="What happened"), _field("message")),
    ],
    "pods": [
        _name_column(),
        (_definition("Ready", description="Ready containers"), _pod_ready),
        (_definition("Status", description="The pod's phase"), _field("status", "phase")),
        (
            _definition("Node", priority=1, description="The node it runs on"),
            _field("spec", "nodeName"),
        ),
        _age_column(),
    ],
    "jobs": [
        _name_column(),
        (_definition("Status", description="Complete, Failed, Suspended or Running"), _job_status),
        _age_column(),
    ],
}


def builtin_columns(plural: str) -> list[Column]:
    """Columns for a built-in kind served here; Name and Age for any other."""
    return _BUILTIN.get(plural) or [_name_column(), _age_column()]


def table(
    objects: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    *,
    now: datetime.datetime,
    include_object: str | None = "Metadata",
    resource_version: str = "",
) -> dict[str, Any]:
    """A ``meta.k8s.io/v1`` Table of ``objects``.

    ``include_object`` is the request's ``includeObject``: ``Metadata`` (the default) puts a
    ``PartialObjectMetadata`` in each row (kubectl reads the namespace, labels for ``-L`` and
    ``--show-labels`` from it), ``Object`` the whole object, ``None`` nothing.
    """
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [cell(obj, now) for _, cell in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata") or {},
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [definition for definition, _ in columns],
        "rows": rows,
    }
