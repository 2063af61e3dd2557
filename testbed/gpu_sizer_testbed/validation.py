"""Checking a write against a CRD's structural schema, as the API server does for kubectl.

A real API server validates every custom resource against its CRD's ``openAPIV3Schema``
(types, enums, bounds, required fields: HTTP 422 ``Invalid``) and, when the client asks for
``fieldValidation=Strict`` (kubectl's default), refuses fields the schema does not declare
(HTTP 400, ``strict decoding error: unknown field "spec.spce"``). kmock stores whatever it is
sent. The loopback server applies these checks to writes that carry ``fieldValidation`` (that
is, kubectl's); the operator's and the test harness's writes carry none and are stored as sent,
which the end-to-end suite relies on to store invalid objects on purpose (as a cluster with an
older CRD would). CEL rules (``x-kubernetes-validations``) and defaulting are not applied here.

Messages follow apiextensions-apiserver's (``field: Invalid value: V: field in body should be
greater than or equal to 1``). Pure functions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SchemaProblems", "check"]


@dataclass
class SchemaProblems:
    """What a write got wrong: undeclared field paths, and (path, message) invalid values."""

    unknown: list[str] = field(default_factory=list)
    invalid: list[tuple[str, str]] = field(default_factory=list)


_TYPES = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else json.dumps(value, default=str)


def check(schema: Mapping[str, Any], obj: Mapping[str, Any], *, patch: bool) -> SchemaProblems:
    """Validate ``obj`` (a whole object, or a JSON merge patch when ``patch``) against a CRD
    version's ``openAPIV3Schema``. In a patch, ``null`` deletes a field and required fields
    may be absent. ``metadata`` is the server's own business and is not checked here."""
    problems = SchemaProblems()
    props = schema.get("properties") or {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata"):
            continue
        if key in props:
            _walk(props[key], value, key, problems, patch=patch)
        elif not schema.get("x-kubernetes-preserve-unknown-fields"):
            problems.unknown.append(key)
    if not patch:
        for key in schema.get("required") or []:
            if key not in obj:
                problems.invalid.append((key, "Required value"))
    return problems


def _walk(
    schema: Mapping[str, Any], value: Any, path: str, out: SchemaProblems, *, patch: bool
) -> None:
    type_ = schema.get("type")
    if value is None:
        if not patch and not schema.get("nullable"):
            wrong = f'{path} in body must be of type {type_ or "object"}: "null"'
            out.invalid.append((path, f'Invalid value: "null": {wrong}'))
        return
    if type_ in _TYPES and (
        not isinstance(value, _TYPES[type_])
        or (type_ in ("integer", "number") and isinstance(value, bool))
    ):
        got = _type_name(value)
        out.invalid.append(
            (path, f'Invalid value: "{got}": {path} in body must be of type {type_}: "{got}"')
        )
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_show(v) for v in schema["enum"])
        out.invalid.append(
            (path, f"Unsupported value: {_show(value)}: supported values: {allowed}")
        )
    _bounds(schema, value, path, out)
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            child = f"{path}.{key}"
            if props is not None and key in props:
                _walk(props[key], sub, child, out, patch=patch)
            elif isinstance(extra, Mapping):
                _walk(extra, sub, child, out, patch=patch)
            elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                continue
            elif props is not None or extra is False:
                out.unknown.append(child)
        if not patch:
            for key in schema.get("required") or []:
                if key not in value:
                    out.invalid.append((f"{path}.{key}", "Required value"))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            _walk(schema["items"], item, f"{path}[{i}]", out, patch=patch)


def _bounds(schema: Mapping[str, Any], value: Any, path: str, out: SchemaProblems) -> None:
    def invalid(shown: Any, rule: str) -> None:
        out.invalid.append((path, f"Invalid value: {shown}: {path} in body should {rule}"))

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None:
            strict = bool(schema.get("exclusiveMinimum"))
            if value <= low if strict else value < low:
                op = "greater than" if strict else "greater than or equal to"
                invalid(_show(value), f"be {op} {low}")
        if high is not None:
            strict = bool(schema.get("exclusiveMaximum"))
            if value >= high if strict else value > high:
                op = "less than" if strict else "less than or equal to"
                invalid(_show(value), f"be {op} {high}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            invalid(len(value), f"have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            invalid(len(value), f"have at most {schema['maxItems']} items")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            invalid(_show(value), f"be at least {schema['minLength']} chars long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            invalid(_show(value), f"be at most {schema['maxLength']} chars long")
