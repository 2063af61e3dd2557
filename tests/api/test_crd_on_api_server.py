"""The generated CRDs as a real Kubernetes API server sees them (``control_plane``, envtest).

The API server is the oracle for what the local checks can only approximate: whether a schema is
structural, whether CEL rules compile within its cost budget, what it prunes and what it refuses.
Each test applies what users apply (``crds/``, the chart's ``crds/``, ``examples/``, statuses the
operator writes) with the real kubectl.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from api_docs import inference_doc
from test_api_crd import CASES, _set
from tests.conftest import Kubectl
from tests.example_files import WORKLOAD_FILES

from gpu_sizer.api import InvalidWorkload, parse_workload, spec_hash
from gpu_sizer.api.crd import CRD_NAME, RECORD_CRD_NAME
from gpu_sizer.lifecycle import estimated_status
from gpu_sizer.sizing.verdict import assess

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = WORKLOAD_FILES


@pytest.fixture(scope="module")
def installed(kubectl: Kubectl) -> Kubectl:
    """The top-level CRDs applied (server-side, as GitOps tools do) and Established."""
    kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl.wait_established(CRD_NAME, RECORD_CRD_NAME)
    return kubectl


@pytest.mark.parametrize("folder", ["crds", "charts/gpu-sizer/crds"])
def test_the_api_server_accepts_every_crd(installed: Kubectl, folder: str) -> None:
    for mode in ("--dry-run=server", None):
        args = ["apply", "--server-side", "--force-conflicts", "-f", str(ROOT / folder)]
        proc = installed(*args, *([mode] if mode else []))
        assert "serverside-applied" in proc.stdout, proc.stdout + proc.stderr
        assert not proc.stderr.strip(), proc.stderr  # no warning either (e.g. unknown fields)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _missing(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Paths of ``sent`` that ``stored`` lacks or holds differently (what was pruned or
    rewritten); what ``stored`` has beyond ``sent`` (defaults) is fine."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        return [m for k, v in sent.items() for m in _missing(v, stored.get(k), f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [
            m
            for i, (a, b) in enumerate(zip(sent, stored, strict=True))
            for m in _missing(a, b, f"{path}[{i}]")
        ]
    if isinstance(sent, float) and isinstance(stored, int | float):
        return [] if float(stored) == sent else [path]
    return [] if sent == stored else [path]


def _namespaces(kubectl: Kubectl, docs: list[dict[str, Any]]) -> None:
    for name in sorted({d["metadata"].get("namespace", "default") for d in docs}):
        text = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        kubectl("apply", "-f", "-", input=text)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_is_stored_as_written(installed: Kubectl, example: Path) -> None:
    """Nothing of a real workload is pruned or refused by the schema (the webhook would be the
    only one to refuse it, with its reasons)."""
    docs = [d for d in _documents(example) if d.get("kind") == "GPUWorkload"]
    _namespaces(installed, docs)
    for doc in docs:
        proc = installed(
            "apply", "--server-side", "--dry-run=server", "-o", "json", "-f", "-",
            input=json.dumps(doc),
        )  # fmt: skip
        stored = json.loads(proc.stdout)
        assert _missing(doc["spec"], stored["spec"]) == [], example.name


def _with_status(doc: dict[str, Any]) -> dict[str, Any]:
    spec = parse_workload(doc)
    status = estimated_status(
        spec, assess(spec), spec_hash=spec_hash(spec), generation=1,
        now=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).isoformat(),
    )  # fmt: skip
    return status.model_dump(by_alias=True, mode="json", exclude_none=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize("example", EXAMPLES[::4], ids=lambda p: p.stem)
def test_the_status_the_operator_writes_is_kept_whole(installed: Kubectl, example: Path) -> None:
    """A real API server prunes undeclared status fields silently; write an example's status
    through the status subresource and read it back unchanged."""
    (doc,) = [d for d in _documents(example) if d.get("kind") == "GPUWorkload"]
    _namespaces(installed, [doc])
    name, namespace = doc["metadata"]["name"], doc["metadata"]["namespace"]
    installed("apply", "--server-side", "-f", "-", input=json.dumps(doc))
    try:
        status = _with_status(doc)
        installed(
            "patch", "gpuworkload", name, "-n", namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip
        stored = json.loads(
            installed("get", "gpuworkload", name, "-n", namespace, "-o", "json").stdout
        )
        assert _missing(status, stored["status"]) == []
    finally:
        installed("delete", "gpuworkload", name, "-n", namespace, "--wait=false")


def test_a_shared_measurement_record_is_kept_whole(installed: Kubectl) -> None:
    (record,) = _documents(ROOT / "tests" / "fixtures" / "gpumeasurement-l4.yaml")
    proc = installed(
        "apply", "--server-side", "--dry-run=server", "-o", "json", "-f", "-",
        input=json.dumps(record),
    )  # fmt: skip
    assert _missing(record["spec"], json.loads(proc.stdout)["spec"]) == []


def _server_accepts(kubectl: Kubectl, doc: dict[str, Any]) -> tuple[bool, str]:
    proc = kubectl(
        "create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(doc), check=False
    )
    return proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(("make", "path", "value"), CASES, ids=[f"{p}={v}" for _, p, v in CASES])
def test_the_api_servers_cel_agrees_with_the_python_validation(
    installed: Kubectl, make: Callable[[], dict[str, Any]], path: str, value: Any
) -> None:
    """The CEL rules as the API server runs them refuse exactly what the Python parser refuses
    (for the rules the CRD mirrors; the webhook adds the rest)."""
    doc = make()
    _set(doc, path, value)
    if path == "model.architecture.ropeScaling":
        doc["spec"]["inference"]["maxModelLen"] = 16384
    doc["metadata"]["namespace"] = "default"
    try:
        parse_workload(doc)
        python_ok = True
    except InvalidWorkload:
        python_ok = False
    accepted, why = _server_accepts(installed, doc)
    assert accepted == python_ok, why


def test_a_refusal_names_the_field(installed: Kubectl) -> None:
    doc = inference_doc()
    doc["metadata"]["namespace"] = "default"
    doc["spec"]["inference"]["maxNumSeqs"] = 0
    doc["spec"]["model"]["dtype"] = "float7"
    accepted, why = _server_accepts(installed, doc)
    assert not accepted
    assert "spec.inference.maxNumSeqs" in why and "spec.model.dtype" in why
