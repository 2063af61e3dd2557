"""The generated CRD: in sync with the models, a valid structural apiextensions/v1 schema, CEL
rules that parse and agree with the Python validators, and room for everything the operator
writes to status (a real API server prunes undeclared status fields silently)."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from api_docs import inference_doc, training_doc

from gpu_sizer.api import InvalidWorkload, parse_workload, spec_hash
from gpu_sizer.api.crd import CRD_NAME, PRINTER_COLUMNS, VALIDATION_RULES, build_crd, crd_yaml
from gpu_sizer.lifecycle import estimated_status
from gpu_sizer.sizing.verdict import assess

ROOT = Path(__file__).resolve().parents[2]
CRD_FILES = [
    ROOT / "crds" / f"{CRD_NAME}.yaml",
    ROOT / "charts" / "gpu-sizer" / "crds" / f"{CRD_NAME}.yaml",
]


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return build_crd()


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", CRD_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_crd_matches_the_models(path: Path) -> None:
    assert path.read_text(encoding="utf-8") == crd_yaml(), (
        f"{path.relative_to(ROOT)} drifted from gpu_sizer.api: run "
        "PYTHONPATH=operator python hack/gen-crd.py"
    )
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == build_crd()


def test_crd_validates_against_the_apiextensions_schema(crd: dict[str, Any]) -> None:
    version = kubernetes_validate.utils.latest_version()
    kubernetes_validate.validate(crd, version, strict=True)
    broken = copy.deepcopy(crd)
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] = "nope"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    forbidden = {"$ref", "$defs", "anyOf", "oneOf", "allOf", "not", "title", "nullable",
                 "const"}  # fmt: skip
    for path, node in _nodes(schema):
        assert "type" in node, f"{path}: no type"
        assert not forbidden & node.keys(), f"{path}: {forbidden & node.keys()}"
        free = node.get("x-kubernetes-preserve-unknown-fields")  # a component's config.json
        if node["type"] == "object" and path not in (".metadata",) and not free:
            # an object has properties, or is a map whose values have a schema (never both)
            props, values = node.get("properties"), node.get("additionalProperties")
            assert bool(props) != isinstance(values, dict), f"{path}: object without properties"
        if "exclusiveMaximum" in node:
            assert node["exclusiveMaximum"] is True and "maximum" in node


def test_every_field_has_a_description(schema: dict[str, Any]) -> None:
    # The root ``metadata`` is the API server's: a CRD may say nothing about it but restrictions
    # on name and generateName (it refuses even a description there).
    missing = [
        p
        for p, n in _nodes(schema)
        if not p.endswith("[]") and p != ".metadata" and not n.get("description")
    ]
    assert missing == []
    assert schema["properties"]["metadata"] == {"type": "object"}


def test_enums_bounds_and_defaults(schema: dict[str, Any]) -> None:
    spec = schema["properties"]["spec"]["properties"]
    inference = spec["inference"]["properties"]
    assert inference["engine"]["enum"] == ["vllm", "transformers", "tgi", "sglang"]
    assert inference["engine"]["default"] == "vllm"
    assert inference["maxNumSeqs"]["minimum"] == 1
    assert "maxModelLen" in spec["inference"]["required"]
    assert spec["model"]["properties"]["quantization"]["properties"]["method"]["enum"] == [
        "gptq", "awq", "fp8", "mxfp4", "compressed-tensors", "bitsandbytes-nf4",
        "bitsandbytes-int8"
    ]  # fmt: skip
    headroom = spec["placement"]["properties"]["minHeadroomFraction"]
    assert (headroom["minimum"], headroom["maximum"]) == (0, 0.5)
    assert "exclusiveMaximum" not in headroom
    assert headroom["default"] == 0.1
    timeout = spec["measurement"]["properties"]["timeoutSeconds"]
    assert (timeout["minimum"], timeout["maximum"], timeout["default"]) == (30, 86400, 900)
    status = schema["properties"]["status"]
    assert status["properties"]["phase"]["enum"][0] == "Pending"
    assert all("default" not in n for _, n in _nodes(status)), "status defaults are dropped"
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_names_subresource_and_printer_columns(crd: dict[str, Any], schema: dict[str, Any]) -> None:
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["gpuw"] and names["categories"] == ["gpusizer"]
    assert crd["spec"]["scope"] == "Namespaced"
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    titles = [c["name"] for c in version["additionalPrinterColumns"]]
    assert titles[:7] == ["Phase", "Model", "Class", "GPUs", "Est GiB/GPU", "Measured GiB/GPU",
                          "Headroom %"]  # fmt: skip
    assert titles[-1] == "Age"
    for column in PRINTER_COLUMNS:
        if column["jsonPath"].startswith(".metadata."):
            continue
        node = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            node = node["properties"][part]
        kind = {"string": "string", "integer": "integer", "number": "number"}[column["type"]]
        assert node["type"] == kind, column


# --- objects against the schema -----------------------------------------------------------------


def _status_doc(doc: dict[str, Any]) -> dict[str, Any]:
    spec = parse_workload(doc)
    status = estimated_status(
        spec, assess(spec), spec_hash=spec_hash(spec), generation=1,
        now=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).isoformat(),
    )  # fmt: skip
    return {**doc, "status": status.model_dump(by_alias=True, mode="json", exclude_none=True)}


def _undeclared(value: Any, node: dict[str, Any], path: str = "") -> list[str]:
    if isinstance(value, dict) and node.get("type") == "object" and "properties" in node:
        out = []
        for key, sub in value.items():
            if key not in node["properties"]:
                out.append(f"{path}.{key}")
            else:
                out += _undeclared(sub, node["properties"][key], f"{path}.{key}")
        return out
    if isinstance(value, list) and "items" in node:
        return [
            u for i, v in enumerate(value) for u in _undeclared(v, node["items"], f"{path}[{i}]")
        ]
    return []


@pytest.mark.parametrize("make", [inference_doc, training_doc])
def test_objects_with_status_validate_and_nothing_would_be_pruned(
    schema: dict[str, Any], make: Callable[[], dict[str, Any]]
) -> None:
    obj = _status_doc(make())
    obj["status"]["measurement"] = {"specHash": "0" * 16, "peakReservedBytes": 1 << 30,
                                    "peakGiB": 1.0, "outOfMemory": False}  # fmt: skip
    jsonschema.Draft4Validator(schema).validate(obj)
    assert _undeclared(obj, schema) == []
    assert obj["status"]["estimate"]["perGpu"]["totalGiB"] > 0
    assert "headroomPercent" in obj["status"]["recommendation"]


def test_schema_rejects_wrong_types(schema: dict[str, Any]) -> None:
    doc = inference_doc()
    doc["spec"]["inference"]["maxNumSeqs"] = "many"
    doc["spec"]["inference"]["engine"] = "trt"
    errors = list(jsonschema.Draft4Validator(schema).iter_errors(doc))
    assert len(errors) == 2


# --- CEL ------------------------------------------------------------------------------------------

ENV = celpy.Environment()


def _rules() -> Iterator[tuple[str, dict[str, str]]]:
    for path, rules in VALIDATION_RULES.items():
        for rule in rules:
            yield path, rule


@pytest.mark.parametrize(("path", "rule"), list(_rules()), ids=lambda v: str(v)[:40])
def test_cel_rules_compile(path: str, rule: dict[str, str]) -> None:
    ENV.compile(rule["rule"])
    assert rule["message"] and "\n" not in rule["message"]


def _cel_failures(spec: dict[str, Any]) -> list[str]:
    """Messages of the CEL rules that fail on ``spec`` (rules on absent objects do not run)."""
    failed = []
    for path, rule in _rules():
        node: Any = spec
        for part in filter(None, path.split(".")):
            node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            continue
        program = ENV.program(ENV.compile(rule["rule"]))
        if not bool(program.evaluate({"self": celpy.json_to_cel(node)})):
            failed.append(rule["message"])
    return failed


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    node = doc["spec"]
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value


#: (base, spec path, value): each case breaks (or keeps) one rule the CEL mirrors.
CASES: list[tuple[Callable[[], dict[str, Any]], str, Any]] = [
    (inference_doc, "inference.maxNumSeqs", 8),
    (inference_doc, "training", training_doc()["spec"]["training"]),
    (inference_doc, "inference", None),
    (inference_doc, "model.architecture.numKeyValueHeads", 7),
    (inference_doc, "model.architecture.numKeyValueHeads", None),
    (inference_doc, "inference.tensorParallelSize", 3),
    (inference_doc, "inference.tensorParallelSize", 16),
    (inference_doc, "inference.tensorParallelSize", 64),
    (training_doc, "training.parallelism.tensorParallelSize", 5),
    (training_doc, "training.parallelism.tensorParallelSize", 4),
    (inference_doc, "inference.maxModelLen", 8193),
    (inference_doc, "model.architecture.ropeScaling", {"factor": 2.0}),
    (training_doc, "training.sequenceLength", 9000),
    (inference_doc, "model.quantization", {"method": "awq", "bits": 8}),
    (inference_doc, "model.quantization", {"method": "gptq", "bits": 3}),
    (inference_doc, "model.quantization", {"method": "fp8"}),
    (inference_doc, "model.architecture", None),
    (inference_doc, "measurement", {"mode": "Command"}),
    (inference_doc, "measurement", {"mode": "Command", "command": ["serve"]}),
    (training_doc, "training.parallelism.strategy", "none"),
    (inference_doc, "model.architecture.numExpertsPerTok", 2),
]


@pytest.mark.parametrize(("make", "path", "value"), CASES, ids=[f"{p}={v}" for _, p, v in CASES])
def test_cel_agrees_with_the_python_validation(
    make: Callable[[], dict[str, Any]], path: str, value: Any
) -> None:
    doc = make()
    _set(doc, path, value)
    if path == "model.architecture.ropeScaling":
        doc["spec"]["inference"]["maxModelLen"] = 16384
    try:
        parse_workload(doc)
        python_ok = True
    except InvalidWorkload:
        python_ok = False
    assert (not _cel_failures(doc["spec"])) == python_ok, _cel_failures(doc["spec"])


def test_rope_scaled_context_in_cel() -> None:
    doc = inference_doc()
    _set(doc, "model.architecture.ropeScaling", {"factor": 2.0})
    doc["spec"]["inference"]["maxModelLen"] = 16385
    assert any("maxModelLen" in m for m in _cel_failures(doc["spec"]))


def test_gen_crd_check_mode_reports_no_drift() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen-crd.py"), "--check"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PYTHONPATH": str(ROOT / "operator"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
