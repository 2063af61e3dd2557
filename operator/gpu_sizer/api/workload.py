"""The whole GPUWorkload object, parsing from plain data, and the spec hash."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from pydantic import ValidationError

from gpu_sizer.api.errors import InvalidWorkload, Problem, problems_from
from gpu_sizer.api.spec import GPUWorkloadSpec

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAME",
    "VERSION",
    "parse_spec",
    "parse_workload",
    "spec_hash",
]

GROUP: Final = "gpusizer.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "GPUWorkload"
PLURAL: Final = "gpuworkloads"
SINGULAR: Final = "gpuworkload"
SHORT_NAME: Final = "gpuw"
CATEGORY: Final = "gpusizer"


def parse_spec(spec: Any) -> GPUWorkloadSpec:
    """Validate a ``.spec`` mapping.

    :raises InvalidWorkload: one :class:`Problem` per invalid field, paths starting ``spec.``.
    """
    if not isinstance(spec, dict):
        raise InvalidWorkload([Problem("spec", "must be an object")])
    try:
        return GPUWorkloadSpec.model_validate(spec)
    except ValidationError as exc:
        raise InvalidWorkload(problems_from(exc, prefix="spec", model=GPUWorkloadSpec)) from None


def parse_workload(doc: Any) -> GPUWorkloadSpec:
    """Validate a whole GPUWorkload document (apiVersion, kind, metadata.name, spec).

    :raises InvalidWorkload: every problem found, each with its field path.
    """
    if not isinstance(doc, dict):
        raise InvalidWorkload([Problem("(document)", "must be a YAML/JSON object")])
    problems: list[Problem] = []
    if doc.get("apiVersion") != API_VERSION:
        problems.append(
            Problem("apiVersion", f"must be {API_VERSION}, not {doc.get('apiVersion')!r}")
        )
    if doc.get("kind") != KIND:
        problems.append(Problem("kind", f"must be {KIND}, not {doc.get('kind')!r}"))
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
        problems.append(Problem("metadata.name", "required field is missing"))
    if "spec" not in doc:
        problems.append(Problem("spec", "required field is missing"))
        raise InvalidWorkload(problems)
    try:
        spec = parse_spec(doc["spec"])
    except InvalidWorkload as exc:
        raise InvalidWorkload(problems + exc.problems) from None
    if problems:
        raise InvalidWorkload(problems)
    return spec


def spec_hash(spec: GPUWorkloadSpec) -> str:
    """Hash of the normalized spec parts that change what a measurement sees.

    Model, inference/training and measurement settings count; ``placement`` does not (changing
    the allowed classes or headroom re-derives the recommendation, it does not re-measure).
    Returns 16 lowercase hex characters (64 bits of SHA-256), short enough for Job names.
    """
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"placement"})
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
