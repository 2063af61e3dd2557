"""Label and field selectors, as the loopback API server applies them to lists and watches.

kmock 0.8 ignores ``labelSelector`` and ``fieldSelector``. Real clients depend on them:
``kubectl wait`` lists and watches with ``fieldSelector=metadata.name=NAME``, ``kubectl
describe`` finds an object's Events with ``involvedObject.name=...,involvedObject.uid=...``, and
kopf indexes only the Jobs and pods carrying gpu-sizer's label. Pure functions of plain data.

Grammar (apimachinery's ``labels.Parse`` and ``fields.ParseSelector``):

- labels: comma-separated requirements ``key``, ``!key``, ``key=value``, ``key==value``,
  ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``;
- fields: comma-separated ``path=value``, ``path==value``, ``path!=value``, where ``path`` is
  a dotted path into the object (``metadata.name``, ``involvedObject.uid``) and ``\\,``,
  ``\\=``, ``\\\\`` escape those characters in values. A real API server accepts only the
  paths each kind declares; any dotted path is accepted here (a superset).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["InvalidSelector", "Selector", "field_selector", "label_selector"]

#: A compiled selector: true when the object matches.
Selector = Callable[[Mapping[str, Any]], bool]


class InvalidSelector(ValueError):
    """A selector that does not parse; the message names the offending part."""


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses and not escaped."""
    parts: list[str] = []
    depth, current, escaped = 0, "", False
    for ch in text:
        if escaped:
            current += "\\" + ch
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "(":
            depth += 1
            current += ch
        elif ch == ")":
            depth -= 1
            current += ch
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if escaped:
        current += "\\"
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


_SET = re.compile(r"^(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")
_CMP = re.compile(r"^(?P<key>[^\s!=]+)\s*(?P<op>==|=|!=)\s*(?P<value>.*)$")


def _labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((obj.get("metadata") or {}).get("labels")) or {}


def _label_requirement(part: str) -> Selector:
    if m := _SET.match(part):
        key, values = m["key"], {v.strip() for v in m["values"].split(",") if v.strip()}
        if m["op"] == "in":
            return lambda o: _labels_of(o).get(key) in values
        return lambda o: _labels_of(o).get(key) not in values
    if m := _CMP.match(part):
        key, value = m["key"], m["value"].strip()
        if m["op"] == "!=":
            return lambda o: _labels_of(o).get(key) != value
        return lambda o: _labels_of(o).get(key) == value
    if part.startswith("!") and re.fullmatch(r"![^\s!=(),]+", part):
        key = part[1:]
        return lambda o: key not in _labels_of(o)
    if re.fullmatch(r"[^\s!=(),]+", part):
        return lambda o: part in _labels_of(o)
    raise InvalidSelector(f"unable to parse requirement: {part!r}")


def label_selector(text: str | None) -> Selector:
    """Compile a ``labelSelector`` query value; empty or ``None`` matches everything.

    :raises InvalidSelector: a requirement that does not parse.
    """
    requirements = [_label_requirement(p) for p in _split(text or "")]
    return lambda obj: all(r(obj) for r in requirements)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_requirement(part: str) -> Selector:
    for op in ("!=", "==", "="):
        key, sep, raw = part.partition(op)
        if sep and key.strip():
            path, value = key.strip(), _unescape(raw.strip())
            if op == "!=":
                return lambda o: _field_value(o, path) != value
            return lambda o: _field_value(o, path) == value
    raise InvalidSelector(f"invalid field selector: {part!r}: expected path=value or path!=value")


def field_selector(text: str | None) -> Selector:
    """Compile a ``fieldSelector`` query value; empty or ``None`` matches everything.

    Values compare as strings, as in the API server (absent fields are the empty string).

    :raises InvalidSelector: a term without ``=``, ``==`` or ``!=``.
    """
    requirements = [_field_requirement(p) for p in _split(text or "")]
    return lambda obj: all(r(obj) for r in requirements)
