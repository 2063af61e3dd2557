"""The watch index's compact form of a GPUWorkload (issue 17): the same data as slim_workload."""

from __future__ import annotations

import json
import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpu_sizer.controller.reconciler import CompactWorkload, slim_workload

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


def _body(spec: Any, status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {
            "name": "w",
            "namespace": "ns",
            "uid": "u-1",
            "generation": 3,
            "resourceVersion": "42",
            "labels": {"team": "a"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": spec,
        "status": status,
    }


@given(_JSON, _JSON)
def test_reads_as_slim_workload(spec: Any, status: Any) -> None:
    body = _body(spec, status)
    compact = CompactWorkload(body)
    assert compact.expand() == slim_workload(body)
    assert dict(compact) == slim_workload(body)
    assert compact.get("status") == status and compact.get("missing") is None


def _deep_size(value: Any) -> int:
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        size += sum(_deep_size(k) + _deep_size(v) for k, v in value.items())
    elif isinstance(value, list):
        size += sum(_deep_size(v) for v in value)
    return size


def test_holds_a_settled_status_in_a_fraction_of_the_nested_dicts() -> None:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Estimated",
        "message": "ready on the estimate alone: nvidia-l4 x1 holds 19.7 GiB of 22.0 GiB" * 3,
        "observedGeneration": 1,
        "lastTransitionTime": "2026-12-01T00:00:00Z",
    }
    status = {
        "phase": "Ready",
        "estimate": {"perGpu": {f"c{i}Bytes": 10**9 + i for i in range(10)}},
        "conditions": [dict(condition, type=t) for t in ("Ready", "Estimated", "Measured")],
    }
    body = _body({"model": {"name": "m", "dtype": "bfloat16"}}, status)
    compact = CompactWorkload(body)
    held = sys.getsizeof(compact) + sum(
        _deep_size(getattr(compact, s)) for s in ("_meta", "_spec", "_status")
    )
    assert held < _deep_size(slim_workload(body)) / 2
    assert json.loads(compact._status) == status


def test_a_view_of_the_status_is_worked_out_once_per_state() -> None:
    calls: list[Any] = []

    def phase(status: Any) -> Any:
        calls.append(status)
        return status.get("phase")

    compact = CompactWorkload(_body({}, {"phase": "Ready"}))
    assert [compact.derive(phase) for _ in range(3)] == ["Ready"] * 3
    assert len(calls) == 1
    assert CompactWorkload(_body({}, {"phase": "Queued"})).derive(phase) == "Queued"
