"""GPUMeasurement records (issue 15, item 3): the measurement key (which spec changes change it,
which do not), the record object against its generated CRD, and the GFD driver labels."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from api_docs import inference_doc, training_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_sizer.api import MeasurementStatus, PerGpuBreakdown, parse_workload, spec_hash
from gpu_sizer.api.crd import (
    RECORD_CRD_NAME,
    RECORD_PRINTER_COLUMNS,
    build_record_crd,
    record_crd_yaml,
)
from gpu_sizer.api.record import (
    KEY_LABEL,
    LABEL_ENGINE,
    LABEL_FAMILY,
    LABEL_GPU_CLASS,
    LABEL_KIND,
    SCOPE_LABEL,
    SOURCE_NAMESPACE_LABEL,
    RecordEstimate,
    RecordScope,
    build_record,
    catalog_digest,
    describe,
    driver_major,
    effective_expiry,
    is_fresh,
    measurement_key,
    memory_spec_digest,
    parse_record,
    record_name,
    record_names,
    reusable_by,
    shareable,
)

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime.datetime(2026, 12, 1, 2, 0, 0, tzinfo=datetime.UTC)
IMAGE = "ghcr.io/gpu-sizer/gpu-sizer-probe:0.1.0"


def _key(doc: dict[str, Any], **kw: Any) -> str:
    args: dict[str, Any] = {
        "gpu_class": "nvidia-h100-80gb",
        "probe_image": IMAGE,
        "driver_major": "550",
        "catalog_digest": "abc",
    }
    args.update(kw)
    return measurement_key(parse_workload(doc), **args).digest()


def _edit(path: str, value: Any, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(doc or inference_doc())
    node = doc
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return doc


# --- the key ------------------------------------------------------------------------------------

#: Spec edits that do not change the memory measured: the key stays.
SAME = [
    ("metadata.name", "another"),
    ("metadata.namespace", "team-b"),
    ("spec.model.name", "someone/llama-3-8b-copy"),  # Synthetic: same shape, no download
    ("spec.model.revision", "0123abcd"),
    ("spec.measurement.timeoutSeconds", 1800),
    ("spec.measurement.image", IMAGE),  # the default image, named explicitly
    ("spec.placement.minHeadroomFraction", 0.3),
    ("spec.placement.gpuClasses", ["nvidia-h100-80gb", "nvidia-a100-80gb"]),
    ("spec.inference.kvCacheDtype", "auto"),  # the default, explicit
]

#: Spec edits that change what the probe allocates: the key changes.
DIFFERENT = [
    ("spec.inference.maxModelLen", 4096),
    ("spec.inference.maxNumSeqs", 32),
    ("spec.inference.kvCacheDtype", "fp8"),
    ("spec.inference.engine", "sglang"),
    ("spec.inference.engineVersion", "0.11.0"),
    ("spec.inference.gpuMemoryUtilization", 0.8),
    ("spec.model.dtype", "float16"),
    ("spec.model.architecture.numHiddenLayers", 16),
    ("spec.measurement.concurrencyLevels", [1, 4]),
]


@pytest.mark.parametrize(("path", "value"), SAME, ids=[p for p, _ in SAME])
def test_fields_that_do_not_change_memory_keep_the_key(path: str, value: Any) -> None:
    assert _key(_edit(path, value)) == _key(inference_doc())


@pytest.mark.parametrize(("path", "value"), DIFFERENT, ids=[p for p, _ in DIFFERENT])
def test_fields_that_change_memory_change_the_key(path: str, value: Any) -> None:
    assert _key(_edit(path, value)) != _key(inference_doc())


@pytest.mark.parametrize(
    "change",
    [
        {"gpu_class": "nvidia-a100-80gb"},
        {"probe_image": "ghcr.io/gpu-sizer/gpu-sizer-probe:0.2.0"},
        {"driver_major": "560"},
        {"driver_major": None},
        {"catalog_digest": "abd"},
    ],
)
def test_environment_fields_change_the_key(change: dict[str, Any]) -> None:
    assert _key(inference_doc(), **change) != _key(inference_doc())


def test_command_mode_keys_the_model_name_and_command() -> None:
    """The workload's own command loads that checkpoint: its name and revision count."""
    command = _edit("spec.measurement", {"mode": "Command", "command": ["python", "serve.py"]})
    assert _key(command) != _key(_edit("spec.model.name", "other/model", command))
    assert _key(command) != _key(_edit("spec.model.revision", "feed", command))
    assert _key(command) != _key(_edit("spec.measurement.command", ["python", "b.py"], command))
    assert _key(command) != _key(inference_doc())


def test_spec_hash_still_sees_what_the_key_ignores() -> None:
    """spec_hash is the workload's own change detector; the key only the memory's."""
    a, b = inference_doc(), _edit("spec.measurement.timeoutSeconds", 1800)
    assert spec_hash(parse_workload(a)) != spec_hash(parse_workload(b))
    assert memory_spec_digest(parse_workload(a)) == memory_spec_digest(parse_workload(b))


@settings(max_examples=40, deadline=None)
@given(
    name=st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True),
    timeout=st.integers(30, 86400),
    headroom=st.floats(0.0, 0.5),
    max_len=st.integers(16, 8192),
)
def test_key_depends_on_max_model_len_only(
    name: str, timeout: int, headroom: float, max_len: int
) -> None:
    doc = _edit("metadata.name", name)
    doc = _edit("spec.measurement.timeoutSeconds", timeout, doc)
    doc = _edit("spec.placement.minHeadroomFraction", headroom, doc)
    doc = _edit("spec.inference.maxModelLen", max_len, doc)
    same_len = _edit("spec.inference.maxModelLen", max_len, inference_doc())
    assert _key(doc) == _key(same_len)
    assert (_key(doc) == _key(inference_doc())) == (max_len == 8192)


def test_key_is_a_sha256_hex_and_names_the_record() -> None:
    key = _key(inference_doc())
    assert len(key) == 64 and int(key, 16) >= 0
    assert record_name(key) == f"gpum-{key[:40]}" and len(record_name(key)) <= 63


def test_describe_kinds_engines_families() -> None:
    assert describe(parse_workload(inference_doc())) == ("Inference", "vllm", "llama")
    assert describe(parse_workload(training_doc())) == ("Training", "pytorch", "llama")


def test_catalog_digest_follows_the_entry() -> None:
    entry = {"name": "nvidia-l4", "memory_bytes": 24 << 30, "products": ["NVIDIA-L4"]}
    assert catalog_digest(entry) == catalog_digest(dict(reversed(list(entry.items()))))
    assert catalog_digest(entry) != catalog_digest({**entry, "products": ["NVIDIA-L4", "X"]})


# --- GFD driver labels --------------------------------------------------------------------------


def test_driver_major_reads_the_new_label_then_the_deprecated_one() -> None:
    # Both names from NVIDIA/k8s-device-plugin internal/lm/nvml.go, newVersionLabeler.
    assert driver_major({"nvidia.com/cuda.driver-version.major": "560"}) == "560"
    assert driver_major({"nvidia.com/cuda.driver.major": "535"}) == "535"
    both = {"nvidia.com/cuda.driver-version.major": "560", "nvidia.com/cuda.driver.major": "535"}
    assert driver_major(both) == "560"
    assert driver_major({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}) is None
    assert driver_major({"nvidia.com/cuda.driver-version.major": " "}) is None


# --- sharing ------------------------------------------------------------------------------------


def _result(**kw: Any) -> MeasurementStatus:
    base: dict[str, Any] = {
        "spec_hash": "0123456789abcdef",
        "job_name": "llama-job",
        "node_name": "gpu-1",
        "gpu_class": "nvidia-h100-80gb",
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "gpu_memory_bytes": 85520809984,
        "device": "cuda",
        "peak_allocated_bytes": 70 << 30,
        "peak_reserved_bytes": 71 << 30,
        "peak_device_used_bytes": 72 << 30,
        "started_at": "2026-12-01T01:58:00Z",
        "completed_at": "2026-12-01T02:00:00Z",
    }
    base.update(kw)
    return MeasurementStatus(**base)


def test_what_is_shared() -> None:
    assert shareable(_result())
    assert shareable(_result(out_of_memory=True, reason="OutOfMemory"))
    assert not shareable(_result(completed_at=None))
    assert not shareable(_result(device="cpu"))
    for reason in ("MeasurementFailed", "DeadlineExceeded", "ImagePullFailed", "Evicted",
                   "HostOOMKilled", "Unsupported", "NoNodeOfClass", "JobDeleted"):  # fmt: skip
        assert not shareable(_result(reason=reason)), reason


# --- the object and its CRD ---------------------------------------------------------------------


def _record(scope: RecordScope = RecordScope.Cluster) -> dict[str, Any]:
    spec = parse_workload(inference_doc())
    key = measurement_key(
        spec,
        gpu_class="nvidia-h100-80gb",
        probe_image=IMAGE,
        driver_major="550",
        catalog_digest="abc",
    )
    estimate = RecordEstimate(
        per_gpu=PerGpuBreakdown(weights_bytes=16 << 30, total_bytes=60 << 30),
        gpu_count=1,
        parameter_count=8030261248,
        verdict="Fits",
    )
    return build_record(
        key,
        spec,
        result=_result(reused_from="elsewhere"),
        source_namespace="ml",
        source_name="llama",
        estimate=estimate,
        now=NOW,
        ttl_seconds=30 * 86400,
        scope=scope,
    )


def test_record_object_labels_and_name() -> None:
    obj = _record()
    key = obj["spec"]["key"]
    assert obj["metadata"]["name"] == record_name(key)
    assert obj["metadata"]["labels"] == {
        KEY_LABEL: key[:40],
        LABEL_KIND: "Inference",
        LABEL_ENGINE: "vllm",
        LABEL_FAMILY: "llama",
        LABEL_GPU_CLASS: "nvidia-h100-80gb",
        SCOPE_LABEL: "Cluster",
        SOURCE_NAMESPACE_LABEL: "ml",
    }
    assert obj["spec"]["scope"] == "Cluster" and "namespace" not in obj["spec"]
    spec = obj["spec"]
    assert spec["expiresAt"] == "2026-12-31T02:00:00Z"
    assert spec["recordedAt"] == "2026-12-01T02:00:00Z"
    assert spec["result"]["sourceNamespace"] == "ml" and "reusedFrom" not in spec["result"]
    assert spec["estimate"]["perGpu"]["totalBytes"] == 60 << 30
    assert spec["keyFields"]["driverMajor"] == "550"


def test_record_round_trip_and_freshness() -> None:
    parsed = parse_record(_record())
    assert parsed is not None and parsed.name.startswith("gpum-")
    assert parsed.spec.result.peak_device_used_bytes == 72 << 30
    assert is_fresh(parsed, NOW + datetime.timedelta(days=29))
    assert not is_fresh(parsed, NOW + datetime.timedelta(days=30))
    going = parse_record({**_record(), "metadata": {"name": "x", "deletionTimestamp": "now"}})
    assert going is not None and not is_fresh(going, NOW)
    assert parse_record({"kind": "GPUMeasurement", "spec": {"key": "nope"}}) is None
    assert parse_record({"kind": "GPUWorkload", "spec": {}}) is None
    assert parse_record("text") is None


def test_a_private_record_is_named_for_its_namespace_and_reused_only_there() -> None:
    """A result a tenant could have written is kept for its own namespace: named
    gpum-<key>-<namespace>, scope Namespace; the cluster's name is scope Cluster's alone."""
    obj = _record(RecordScope.Namespace)
    key = obj["spec"]["key"]
    assert obj["metadata"]["name"] == record_name(key, "ml") == f"gpum-{key[:40]}-ml"
    assert record_names(key, "ml") == (record_name(key), record_name(key, "ml"))
    assert obj["spec"]["scope"] == "Namespace" and obj["spec"]["namespace"] == "ml"
    private = parse_record(obj)
    assert private is not None
    assert reusable_by(private, "ml") and not reusable_by(private, "other")
    # Renamed to the cluster's name, it is still the namespace's (its scope says so).
    moved = parse_record({**obj, "metadata": {**obj["metadata"], "name": record_name(key)}})
    assert moved is not None and not reusable_by(moved, "ml") and not reusable_by(moved, "x")
    shared = parse_record(_record())
    assert shared is not None and reusable_by(shared, "ml") and reusable_by(shared, "other")
    # A record from before scopes existed is its source namespace's.
    legacy = copy.deepcopy(_record())
    del legacy["spec"]["scope"]
    old = parse_record({**legacy, "metadata": {"name": record_name(key, "ml")}})
    assert old is not None and old.spec.scope is RecordScope.Namespace
    assert reusable_by(old, "ml") and not reusable_by(old, "other")


def test_expiry_is_capped_by_the_ttl_from_recorded_at() -> None:
    """A record claiming to live until the year 9991 lives the TTL like any other; one recorded
    in the future (beyond clock skew) is not trusted at all."""
    obj = _record()
    obj["spec"]["expiresAt"] = "9991-01-01T00:00:00Z"
    parsed = parse_record(obj)
    assert parsed is not None
    ttl = 7 * 86400.0
    assert effective_expiry(parsed, ttl) == NOW + datetime.timedelta(days=7)
    assert is_fresh(parsed, NOW + datetime.timedelta(days=6), ttl)
    assert not is_fresh(parsed, NOW + datetime.timedelta(days=7), ttl)
    assert is_fresh(parsed, NOW + datetime.timedelta(days=5000))  # no TTL: expiresAt alone
    ahead = copy.deepcopy(obj)
    ahead["spec"]["recordedAt"] = "2027-01-01T00:00:00Z"
    future = parse_record(ahead)
    assert future is not None and not is_fresh(future, NOW, ttl)
    unreadable = copy.deepcopy(obj)
    unreadable["spec"]["recordedAt"] = "soon"
    bad = parse_record(unreadable)
    assert bad is not None and effective_expiry(bad, ttl) is None and not is_fresh(bad, NOW, ttl)


def test_record_crd_is_valid_and_committed() -> None:
    crd = build_record_crd()
    kubernetes_validate.validate(crd, kubernetes_validate.utils.latest_version(), strict=True)
    assert crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["plural"] == "gpumeasurements"
    for path in (ROOT / "crds", ROOT / "charts" / "gpu-sizer" / "crds"):
        text = (path / f"{RECORD_CRD_NAME}.yaml").read_text(encoding="utf-8")
        assert text == record_crd_yaml(), "run PYTHONPATH=operator python hack/gen-crd.py"
        assert yaml.safe_load(text) == crd


def test_record_validates_against_its_crd_and_columns_resolve() -> None:
    crd = build_record_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.Draft4Validator(schema).validate(_record())
    titles = [c["name"] for c in RECORD_PRINTER_COLUMNS]
    assert titles[:4] == ["Class", "Engine", "Family", "Peak GiB"] and titles[-1] == "Age"
    for column in RECORD_PRINTER_COLUMNS:
        if column["jsonPath"].startswith(".metadata."):
            continue
        node = schema
        for part in column["jsonPath"].lstrip(".").split("."):
            node = node["properties"][part]
        kind = {"string": "string", "number": "number", "boolean": "boolean", "date": "string"}
        assert node["type"] == kind[column["type"]], column


def test_parse_time_reads_a_timestamp_without_offset_as_utc() -> None:
    """A record or status edited by hand may lose its ``Z``; comparing it with an aware ``now``
    must not raise (the reconciler compares expiry and completion times)."""
    import datetime

    from gpu_sizer.api.times import parse_time

    utc = datetime.UTC
    assert parse_time("2026-12-01T03:04:05Z") == datetime.datetime(2026, 12, 1, 3, 4, 5, tzinfo=utc)
    assert parse_time("2026-12-01T03:04:05") == datetime.datetime(2026, 12, 1, 3, 4, 5, tzinfo=utc)
    assert parse_time("yesterday") is None and parse_time("") is None and parse_time(None) is None
