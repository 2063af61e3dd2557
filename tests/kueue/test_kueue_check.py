"""The Kueue AdmissionCheck decision (gpu_sizer.inventory.kueue_check): pure, one case per rule.

Object shapes follow Kueue's API (kubernetes-sigs/kueue apis/kueue/v1beta1/workload_types.go:
spec.podSets[].template, status.admission.podSetAssignments[].flavors, status.admissionChecks[]
{name, state, lastTransitionTime, message}; admissioncheck_types.go: spec.controllerName).
"""

from __future__ import annotations

from typing import Any

from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.inventory.kueue_check import (
    CONTROLLER_NAME,
    CheckVerdict,
    check_names,
    decide_check,
    pending_checks,
    status_patch,
)

GIB = 1 << 30
FLAVORS = {
    "a100": {"spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}},
    "l4": {"spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-L4"}}},
    "cpu": {"spec": {"nodeLabels": {"node-type": "cpu"}}},
}


def kueue_workload(flavor: str | None = "a100", label: str | None = "llama") -> dict[str, Any]:
    labels = {"gpusizer.dev/workload": label} if label else {"app": "x"}
    status: dict[str, Any] = {
        "admissionChecks": [
            {"name": "gpu-sizer", "state": "Pending", "message": "", "lastTransitionTime": "t0"},
            {"name": "other", "state": "Ready", "message": "", "lastTransitionTime": "t0"},
        ]
    }
    if flavor:
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": "main", "flavors": {"cpu": "cpu", "nvidia.com/gpu": flavor}, "count": 1}
            ],
        }
    return {
        "metadata": {"name": "job-llama-1a2b3", "namespace": "ml", "resourceVersion": "42"},
        "spec": {
            "queueName": "lq",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": []}},
                }
            ],
        },
        "status": status,
    }


def gpuw(phase: str = "Ready", required: int = 30 * GIB, headroom: float = 0.1) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "namespace": "ml", "generation": 3},
        "spec": {"placement": {"minHeadroomFraction": headroom}},
        "status": {
            "phase": phase,
            "observedGeneration": 3,
            "conditions": [{"type": "Ready", "status": "True" if phase == "Ready" else "False"}],
            "recommendation": {"requiredBytesPerGpu": required, "basis": "Measurement"},
        },
    }


def decide(wl: Any, gw: Any) -> CheckVerdict | None:
    return decide_check(wl, lambda ns, name: gw, FLAVORS, DEFAULT_CATALOG)


def test_our_checks_are_the_ones_with_our_controller_name() -> None:
    checks = [
        {"metadata": {"name": "gpu-sizer"}, "spec": {"controllerName": CONTROLLER_NAME}},
        {"metadata": {"name": "prov"}, "spec": {"controllerName": "kueue.x-k8s.io/provisioning"}},
    ]
    ours = check_names(checks)
    assert ours == {"gpu-sizer"}
    assert pending_checks(kueue_workload(), ours) == ["gpu-sizer"]


def test_ready_with_headroom_on_the_flavors_gpu() -> None:
    verdict = decide(kueue_workload("a100"), gpuw(required=30 * GIB))
    assert verdict is not None and verdict.state == "Ready"
    assert "nvidia-a100-80gb" in verdict.message and "headroom" in verdict.message


def test_retry_when_the_flavors_gpu_is_too_small_or_unknown() -> None:
    small = decide(kueue_workload("l4"), gpuw(required=30 * GIB))
    assert small is not None and small.state == "Retry"
    assert "nvidia-l4" in small.message and "under the required 10%" in small.message
    unknown = decide(kueue_workload("cpu"), gpuw())
    assert unknown is not None and unknown.state == "Retry"
    assert "names no catalog GPU" in unknown.message


def test_a_zero_headroom_is_zero_not_the_default() -> None:
    """``minHeadroomFraction: 0`` is a value: a GPU left 5% free passes it (a falsy default read
    0 as 10% and kept such a workload in Retry forever); unset is the API's 10% default, and a
    value that is not a number is said, never guessed."""
    a100 = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-a100-80gb")
    required = int(a100.usable * 0.95)
    zero = decide(kueue_workload("a100"), gpuw(required=required, headroom=0.0))
    assert zero is not None and zero.state == "Ready", zero
    ten = decide(kueue_workload("a100"), gpuw(required=required, headroom=0.1))
    assert ten is not None and ten.state == "Retry" and "under the required 10%" in ten.message
    unset = gpuw(required=required)
    del unset["spec"]["placement"]["minHeadroomFraction"]
    defaulted = decide(kueue_workload("a100"), unset)
    assert defaulted is not None and defaulted.state == "Retry", defaulted
    for junk in ("0.1", True, None):
        odd = gpuw(required=30 * GIB)
        odd["spec"]["placement"]["minHeadroomFraction"] = junk
        verdict = decide(kueue_workload("a100"), odd)
        assert verdict is not None
        if junk is None:  # null reads as unset
            assert verdict.state == "Ready"
        else:
            assert verdict.state == "Retry" and "not a number" in verdict.message


def test_rejected_when_the_gpu_workload_is_rejected_retry_when_not_ready_or_missing() -> None:
    rejected = decide(kueue_workload(), gpuw("Rejected"))
    assert rejected is not None and rejected.state == "Rejected"
    assert "ml/llama is Rejected" in rejected.message
    measuring = decide(kueue_workload(), gpuw("Measuring"))
    assert measuring is not None and measuring.state == "Retry"
    assert "not Ready yet (phase Measuring)" in measuring.message
    missing = decide(kueue_workload(), None)
    assert missing is not None and missing.state == "Retry" and "not found" in missing.message


def test_pending_until_quota_is_reserved_and_unlabelled_workloads_pass() -> None:
    assert decide(kueue_workload(flavor=None), gpuw()) is None
    free = decide(kueue_workload(label=None), None)
    assert free is not None and free.state == "Ready"


def test_status_patch_sets_only_our_check_and_is_idempotent() -> None:
    wl = kueue_workload()
    verdict = CheckVerdict("Ready", "fits")
    patch = status_patch(wl, "gpu-sizer", verdict, "2026-12-01T00:00:00Z")
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "42"}
    ours, other = patch["status"]["admissionChecks"]
    assert ours["state"] == "Ready" and ours["lastTransitionTime"] == "2026-12-01T00:00:00Z"
    assert other == wl["status"]["admissionChecks"][1]
    wl["status"]["admissionChecks"] = patch["status"]["admissionChecks"]
    assert status_patch(wl, "gpu-sizer", verdict, "later") is None
