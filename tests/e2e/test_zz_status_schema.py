"""Every status the operator wrote during the suite is declared in the CRD's schema.

A real API server silently prunes status fields its structural schema does not declare, so an
undeclared field would vanish in a cluster while passing against kmock. This runs last in the
directory (file name) and checks what the cluster fixture collected from kmock's object histories:
no undeclared field anywhere (pruning), and jsonschema validation (types, enums, required).
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import yaml

from tests.e2e import real_cluster
from tests.e2e.conftest import ROOT, WRITTEN_STATUSES

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


def test_undeclared_detector_finds_pruned_fields() -> None:
    schema = status_schema()
    assert undeclared({"phase": "Ready", "kopf": {"progress": {}}}, schema, "status") == [
        "status.kopf"
    ]
    assert undeclared({"measurement": {"specHash": "x", "bogus": 1}}, schema, "status") == [
        "status.measurement.bogus"
    ]


def test_crd_does_not_require_display_only_fields() -> None:
    # measurement.peakGiB is computed and None (omitted) until a measurement has figures; were it
    # required, a real API server would answer 422 to every status write of a running measurement.
    validator = jsonschema.Draft7Validator(status_schema())
    errors = list(validator.iter_errors({"measurement": {"specHash": "0123456789abcdef"}}))
    assert not errors, [e.message for e in errors]


def test_every_written_status_is_declared_in_the_crd() -> None:
    if not WRITTEN_STATUSES:
        pytest.skip("run together with the rest of tests/e2e: nothing was collected")
    schema = status_schema()
    validator = jsonschema.Draft7Validator(schema)
    problems: set[str] = set()
    for status in WRITTEN_STATUSES:
        problems.update(undeclared(status, schema, "status"))
        for err in validator.iter_errors(status):
            problems.add(f"status.{'.'.join(map(str, err.path))}: {err.message}")
    assert not problems, sorted(problems)
    # The suite exercised the interesting parts of the schema.
    seen = {k for s in WRITTEN_STATUSES for k in s}
    assert {"phase", "conditions", "estimate", "recommendation", "measurement"} <= seen
    # Real-cluster mode (GPU_SIZER_E2E_KUBECONFIG): statuses come from a watch of each test's
    # namespace, the kubelet-playing tests are skipped (fewer statuses), and the API server has
    # already pruned undeclared fields (so the functional assertions catch those instead).
    assert len(WRITTEN_STATUSES) > (5 if real_cluster.kubeconfig_from_env() else 50)
