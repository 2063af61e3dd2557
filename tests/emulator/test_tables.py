"""``meta.k8s.io/v1`` Tables for ``kubectl get``: ages, the printer-column JSONPath subset, the
GPUWorkload CRD's columns and the built-in kinds' columns."""

from __future__ import annotations

import datetime

import pytest
from gpu_sizer_testbed.tables import (
    InvalidJsonPath,
    builtin_columns,
    crd_columns,
    human_duration,
    jsonpath,
    table,
    wants_table,
)

from gpu_sizer.api.crd import PRINTER_COLUMNS

NOW = datetime.datetime(2025, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
MS = 0.001


# The cases of apimachinery's pkg/util/duration/duration_test.go (TestHumanDuration), which
# is how kubectl shows ages; durations in seconds.
@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-2, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (1, "1s"),
        (120 - MS, "119s"),
        (120, "2m"),
        (121, "2m1s"),
        (600 - MS, "9m59s"),
        (600, "10m"),
        (3 * 3600 - MS, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (8 * 3600 - MS, "7h59m"),
        (8 * 3600, "8h"),
        (48 * 3600 - MS, "47h"),
        (48 * 3600, "2d"),
        (49 * 3600, "2d1h"),
        (8 * 86400 - MS, "7d23h"),
        (8 * 86400, "8d"),
        (2 * 365 * 86400 - MS, "729d"),
        (2 * 365 * 86400, "2y"),
        (2 * 365 * 86400 + 86400, "2y1d"),
        (8 * 365 * 86400 - MS, "7y364d"),
        (8 * 365 * 86400, "8y"),
    ],
)
def test_human_duration(seconds: float, shown: str) -> None:
    assert human_duration(seconds) == shown


CONDITIONS = [
    {"type": "Ready", "status": "True", "reason": "Measured"},
    {"type": "Stalled", "status": "False"},
]


@pytest.mark.parametrize(
    ("path", "found"),
    [
        (".status.phase", ["Ready"]),
        ("{.status.phase}", ["Ready"]),
        (".status.conditions[0].type", ["Ready"]),
        (".status.conditions[-1].type", ["Stalled"]),
        (".status.conditions[*].type", ["Ready", "Stalled"]),
        ('.status.conditions[?(@.type=="Ready")].reason', ["Measured"]),
        (".status.conditions[?(@.type=='Stalled')].status", ["False"]),
        (".metadata.labels['app.kubernetes.io/name']", ["x"]),
        (".status.missing.deeper", []),
        (".status.conditions[7]", []),
    ],
)
def test_jsonpath_subset(path: str, found: list[str]) -> None:
    obj = {
        "metadata": {"labels": {"app.kubernetes.io/name": "x"}},
        "status": {"phase": "Ready", "conditions": CONDITIONS},
    }
    assert jsonpath(path)(obj) == found


@pytest.mark.parametrize("path", ["status.phase", ".status..phase", ".a[?(@.x>1)]"])
def test_jsonpath_outside_the_subset_is_refused(path: str) -> None:
    with pytest.raises(InvalidJsonPath):
        jsonpath(path)


def _workload(**status: object) -> dict[str, object]:
    return {
        "metadata": {"name": "llm", "namespace": "ml", "creationTimestamp": "2025-01-01T11:55:00Z"},
        "spec": {"model": {"name": "meta-llama/Meta-Llama-3-8B"}},
        "status": status,
    }


def test_gpuworkload_columns_come_from_the_crd() -> None:
    columns = crd_columns(PRINTER_COLUMNS)
    names = [definition["name"] for definition, _ in columns]
    assert names == ["Name", *(c["name"] for c in PRINTER_COLUMNS)]
    obj = _workload(
        phase="Ready",
        recommendation={
            "gpuClass": "nvidia-l4",
            "gpuCount": 1,
            "headroomPercent": 32,
            "basis": "Estimate",
        },
        estimate={"perGpu": {"totalGiB": 32.7}},
    )
    doc = table([obj], columns, now=NOW)
    (row,) = doc["rows"]
    cells = dict(zip(names, row["cells"], strict=True))
    assert cells["Name"] == "llm" and cells["Phase"] == "Ready"
    assert cells["Model"] == "meta-llama/Meta-Llama-3-8B" and cells["Class"] == "nvidia-l4"
    assert cells["GPUs"] == 1 and cells["Est GiB/GPU"] == 32.7
    assert cells["Measured GiB/GPU"] is None  # not measured: kubectl leaves the cell empty
    assert cells["Age"] == "5m"
    basis = next(d for d, _ in columns if d["name"] == "Basis")
    assert basis["priority"] == 1  # only with -o wide
    assert doc["kind"] == "Table" and doc["apiVersion"] == "meta.k8s.io/v1"
    assert row["object"]["kind"] == "PartialObjectMetadata"
    assert row["object"]["metadata"]["namespace"] == "ml"  # kubectl -A reads it from here


def test_a_crd_without_printer_columns_shows_name_and_created_at() -> None:
    columns = crd_columns([])
    assert [d["name"] for d, _ in columns] == ["Name", "Created At"]


def test_include_object_modes() -> None:
    columns = crd_columns([])
    obj = _workload()
    assert table([obj], columns, now=NOW, include_object="Object")["rows"][0]["object"] == obj
    assert "object" not in table([obj], columns, now=NOW, include_object="None")["rows"][0]


def test_builtin_columns() -> None:
    node = {
        "metadata": {"name": "n1", "creationTimestamp": "2025-01-01T10:00:00Z", "labels": {}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    (row,) = table([node], builtin_columns("nodes"), now=NOW)["rows"]
    assert row["cells"] == ["n1", "Ready,SchedulingDisabled", "<none>", "120m", ""]
    event = {
        "metadata": {"name": "e1", "creationTimestamp": "2025-01-01T11:59:00Z"},
        "type": "Warning",
        "reason": "InvalidSpec",
        "message": "spec.model.dtype: ...",
        "involvedObject": {"kind": "GPUWorkload", "name": "llm"},
        "lastTimestamp": "2025-01-01T11:59:30Z",
    }
    (row,) = table([event], builtin_columns("events"), now=NOW)["rows"]
    assert row["cells"] == [
        "30s",
        "Warning",
        "InvalidSpec",
        "gpuworkload/llm",
        "spec.model.dtype: ...",
    ]
    ns = {
        "metadata": {"name": "ml", "creationTimestamp": "2025-01-01T12:00:00Z"},
        "status": {"phase": "Active"},
    }
    (row,) = table([ns], builtin_columns("namespaces"), now=NOW)["rows"]
    assert row["cells"] == ["ml", "Active", "0s"]
    assert [d["name"] for d, _ in builtin_columns("widgets")] == ["Name", "Age"]


def test_wants_table() -> None:
    kubectl = (
        "application/json;as=Table;v=v1;g=meta.k8s.io,"
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
    )
    assert wants_table(kubectl)
    assert not wants_table("application/json")
    assert not wants_table(None)
