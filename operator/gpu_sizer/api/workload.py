"""The whole GPUWorkload object, parsing from plain data, and the spec hash."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Any, Final

from pydantic import ValidationError

from gpu_sizer.api.errors import InvalidWorkload, Problem, not_an_object, problems_from
from gpu_sizer.api.spec import GPUWorkloadSpec

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "MAX_SPEC_VALUES",
    "PLURAL",
    "SHORT_NAME",
    "TOP_LEVEL_FIELDS",
    "VERSION",
    "is_near_kind",
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
#: Most values (object members and list items, at any depth) one spec may hold. A real spec
#: holds a few hundred, plus a quantized checkpoint's module lists (Llama-3.1-405B-FP8 names 511
#: modules). Every list at its ``LENGTHS`` maximum at once would hold more; such a document, like
#: any above the bound, is refused whole, before validation, whose per-field errors cost time in
#: proportion to its size (50,000 unknown keys took 0.5 s to list even when only the first few
#: are reported).
MAX_SPEC_VALUES: Final = 8192


#: The fields of a GPUWorkload object (``status`` too: ``gpu-sizer estimate -o yaml`` output
#: and ``kubectl get -o yaml`` can be read back).
TOP_LEVEL_FIELDS: Final = ("apiVersion", "kind", "metadata", "spec", "status")


def is_near_kind(kind: Any) -> bool:
    """Whether ``kind`` is a misspelling of GPUWorkload (``GpuWorkload``, ``GPUWorkloads``,
    ``gpuworkload``): documents of another kind are someone else's, these are typos."""
    if not isinstance(kind, str) or kind == KIND:
        return False
    lowered = kind.lower()
    return lowered in (KIND.lower(), PLURAL, SINGULAR, SHORT_NAME) or bool(
        difflib.get_close_matches(kind, [KIND], n=1, cutoff=0.8)
    )


def parse_spec(spec: Any) -> GPUWorkloadSpec:
    """Validate a ``.spec`` mapping.

    :raises InvalidWorkload: one :class:`Problem` per invalid field, paths starting ``spec.``.
    """
    if not isinstance(spec, dict):
        raise InvalidWorkload([Problem("spec", not_an_object(spec))])
    if _holds_more_than(spec, MAX_SPEC_VALUES):
        raise InvalidWorkload(
            [
                Problem(
                    "spec",
                    f"holds more than {MAX_SPEC_VALUES} fields and list items, where a "
                    "GPUWorkload spec has at most a few hundred: look for a list or object "
                    "pasted at the wrong place",
                )
            ]
        )
    try:
        # Wire names only: the Python names (num_hidden_layers) are for code that builds models.
        return GPUWorkloadSpec.model_validate(spec, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise InvalidWorkload(problems_from(exc, prefix="spec", model=GPUWorkloadSpec)) from None


_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _holds_more_than(doc: Any, limit: int) -> bool:
    """Whether ``doc`` holds more than ``limit`` object members and list items in all (stops
    counting as soon as it does, so the cost is bounded by ``limit``, not by ``doc``)."""
    count, pending = 0, [doc]
    while pending:
        node = pending.pop()
        values = node.values() if isinstance(node, dict) else node
        count += len(values)
        if count > limit:
            return True
        # only containers are queued (a scalar adds nothing beyond its parent's count); the
        # exact-type tests first, JSON and YAML scalars next, as isinstance is the slow one
        for v in values:
            t = type(v)
            if t is dict or t is list or (t not in _SCALARS and isinstance(v, dict | list)):
                pending.append(v)
    return False


def parse_workload(doc: Any) -> GPUWorkloadSpec:
    """Validate a whole GPUWorkload document (apiVersion, kind, metadata.name, spec).

    :raises InvalidWorkload: every problem found, each with its field path.
    """
    if not isinstance(doc, dict):
        raise InvalidWorkload([Problem("(document)", not_an_object(doc, document=True))])
    problems: list[Problem] = []
    for key in doc:
        if key not in TOP_LEVEL_FIELDS:
            close = difflib.get_close_matches(str(key), TOP_LEVEL_FIELDS, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            path = str(key) or repr(key)  # an empty key still gets a visible path
            problems.append(
                Problem(path, f"unknown field; {hint}allowed: {', '.join(TOP_LEVEL_FIELDS)}")
            )
    if doc.get("apiVersion") != API_VERSION:
        problems.append(
            Problem("apiVersion", f"must be {API_VERSION}, not {doc.get('apiVersion')!r}")
        )
    if doc.get("kind") != KIND:
        hint = " (kinds are case-sensitive)" if is_near_kind(doc.get("kind")) else ""
        problems.append(Problem("kind", f"must be {KIND}, not {doc.get('kind')!r}{hint}"))
    problems += _metadata_problems(doc.get("metadata"))
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


_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _metadata_problems(metadata: Any) -> list[Problem]:
    """The API server's rules for a custom resource's name (a DNS-1123 subdomain, at most 253
    characters) and namespace (a DNS-1123 label, at most 63), as in apimachinery's
    ``IsDNS1123Subdomain`` / ``IsDNS1123Label``, so that what the CLI accepts can be applied."""
    if metadata is None:
        return [Problem("metadata.name", "required field is missing")]
    if not isinstance(metadata, dict):
        return [Problem("metadata", not_an_object(metadata))]
    problems: list[Problem] = []
    name = metadata.get("name")
    if name is None:
        problems.append(Problem("metadata.name", "required field is missing"))
    elif not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        problems.append(
            Problem(
                "metadata.name",
                f"{name!r} is not a valid name: lower-case letters, digits, '-' and '.', starting "
                "and ending with a letter or digit, at most 253 characters (DNS-1123 subdomain)",
            )
        )
    namespace = metadata.get("namespace")
    if namespace is not None and (
        not isinstance(namespace, str) or len(namespace) > 63 or not _DNS1123_LABEL.match(namespace)
    ):
        problems.append(
            Problem(
                "metadata.namespace",
                f"{namespace!r} is not a valid namespace: lower-case letters, digits and '-', "
                "starting and ending with a letter or digit, at most 63 characters (DNS-1123 "
                "label)",
            )
        )
    return problems


def validate_name(name: str) -> Problem | None:
    """The problem with ``name`` as a GPUWorkload's ``metadata.name``, or ``None`` if valid."""
    found = _metadata_problems({"name": name})
    return found[0] if found else None


def validate_namespace(namespace: str) -> Problem | None:
    """The problem with ``namespace`` as ``metadata.namespace``, or ``None`` if valid."""
    found = _metadata_problems({"name": "x", "namespace": namespace})
    return found[0] if found else None


def is_dns1123_label(text: str) -> bool:
    """Whether ``text`` is a DNS-1123 label (apimachinery ``IsDNS1123Label``): what Kubernetes
    requires of a namespace or a container name."""
    return len(text) <= 63 and bool(_DNS1123_LABEL.match(text))


def spec_hash(spec: GPUWorkloadSpec) -> str:
    """Hash of the normalized spec parts that change what a measurement sees.

    Model, inference/training and measurement settings count; ``placement`` does not (changing
    the allowed classes or headroom re-derives the recommendation, it does not re-measure).
    Returns 16 lowercase hex characters (64 bits of SHA-256), short enough for Job names.
    """
    data = spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"placement"})
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
