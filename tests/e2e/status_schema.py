"""The CRD's status schema, and what a structural schema would prune or refuse in a status.

A real API server silently prunes status fields its structural schema does not declare, so an
undeclared field would vanish in a cluster while passing against kmock. The ``cluster`` fixture
checks every status a test's operator wrote (from kmock's object histories, or the real-cluster
backend's watch) with :func:`problems` when the test ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "gpuworkloads.gpusizer.dev.yaml"


def status_schema() -> dict[str, Any]:
    doc = yaml.safe_load(CRD.read_text())
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1alpha1"]
    return dict(version["schema"]["openAPIV3Schema"]["properties"]["status"])


def undeclared(value: Any, schema: dict[str, Any], path: str) -> list[str]:
    """Paths a structural schema would prune."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if props is not None and key in props:
                out += undeclared(sub, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += undeclared(sub, extra, f"{path}.{key}")
            else:
                out.append(f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            out += undeclared(item, schema["items"], f"{path}[{i}]")
    return out


def problems(statuses: Iterable[dict[str, Any]]) -> list[str]:
    """Undeclared fields (pruned by a real API server) and jsonschema errors (types, enums,
    required) of ``statuses``, one line each, sorted."""
    schema = status_schema()
    validator = jsonschema.Draft7Validator(schema)
    found: set[str] = set()
    for status in statuses:
        found.update(undeclared(status, schema, "status"))
        for err in validator.iter_errors(status):
            found.add(f"status.{'.'.join(map(str, err.path))}: {err.message}")
    return sorted(found)
