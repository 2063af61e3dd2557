"""Pod admission decisions (gpu_sizer.admission.pods.review_pod): pure, one case per rule.

Every mutated pod is validated against the Kubernetes OpenAPI schema (kubernetes-validate).
"""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest

from gpu_sizer.admission.pods import review_pod
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.policy.namespace import PodEnforcement, parse_policy

K8S = kubernetes_validate.utils.latest_version()
BY_NAME = {c.name: c for c in DEFAULT_CATALOG}
NS = "ml"


def pod(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "llama-", "labels": {"gpusizer.dev/workload": "llama"}},
        "spec": {
            "containers": [
                {"name": "server", "image": "vllm/vllm-openai:v0.11.0"},
                {"name": "sidecar", "image": "busybox"},
            ]
        },
    }
    body["spec"].update(spec)
    return body


def gpuw(phase: str = "Ready", gpu_class: str = "nvidia-l4", count: int = 1, **meta: Any) -> Any:
    ready = "True" if phase == "Ready" else "False"
    return {
        "metadata": {"name": "llama", "namespace": NS, "generation": 2, **meta},
        "status": {
            "phase": phase,
            "observedGeneration": 2,
            "specHash": "abc123",
            "conditions": [{"type": "Ready", "status": ready, "message": f"phase {phase}"}],
            "recommendation": {
                "gpuClass": gpu_class,
                "gpuCount": count,
                "gpuMemoryBytes": BY_NAME[gpu_class].memory_bytes,
                "requiredBytesPerGpu": 1,
                "headroomFraction": 0.5,
                "basis": "Measurement",
            },
        },
    }


def review(p: Any, w: Any, mode: PodEnforcement = PodEnforcement.Enforce, **kw: Any) -> Any:
    return review_pod(p, NS, w, enforcement=mode, catalog=DEFAULT_CATALOG, **kw)


def valid(p: dict[str, Any]) -> dict[str, Any]:
    kubernetes_validate.validate(p, K8S, strict=True)
    return p


def terms(p: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = p["spec"]["affinity"]["nodeAffinity"]
    result: list[dict[str, Any]] = affinity["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return result


def test_ready_workload_gets_affinity_limit_and_annotations() -> None:
    answer = review(pod(), gpuw())
    assert answer.allowed and not answer.warnings and answer.pod is not None
    p = valid(answer.pod)
    assert terms(p) == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}
            ]
        }
    ]
    server, sidecar = p["spec"]["containers"]
    assert server["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert "resources" not in sidecar
    assert p["metadata"]["annotations"] == {
        "gpusizer.dev/gpu-class": "nvidia-l4",
        "gpusizer.dev/basis": "Measurement",
        "gpusizer.dev/spec-hash": "abc123",
    }


def test_existing_terms_keep_their_meaning_and_gain_the_class() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
    spot = {"key": "cloud/spot", "operator": "DoesNotExist"}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchExpressions": [spot]}]
            }
        }
    }
    answer = review(pod(affinity=affinity), gpuw(gpu_class="nvidia-h100-80gb", count=2))
    assert answer.pod is not None
    p = valid(answer.pod)
    product = {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"],
    }
    assert terms(p) == [
        {"matchExpressions": [zone, product]},
        {"matchExpressions": [spot, product]},
    ]
    assert p["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}


def test_annotation_names_the_gpu_container() -> None:
    p = pod()
    p["metadata"]["annotations"] = {"gpusizer.dev/container": "sidecar"}
    answer = review(p, gpuw())
    assert answer.pod is not None
    server, sidecar = answer.pod["spec"]["containers"]
    assert "resources" not in server and sidecar["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert answer.pod["metadata"]["annotations"]["gpusizer.dev/container"] == "sidecar"
    p["metadata"]["annotations"] = {"gpusizer.dev/container": "nope"}
    denied = review(p, gpuw())
    assert not denied.allowed and "names no container" in denied.message


def test_a_pod_that_sets_the_same_gpu_count_is_left_alone() -> None:
    p = pod()
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    answer = review(p, gpuw())
    assert answer.allowed and answer.pod is not None
    assert answer.pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}


@pytest.mark.parametrize("mode", list(PodEnforcement))
def test_contradicting_gpu_count(mode: PodEnforcement) -> None:
    p = pod()
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    answer = review(p, gpuw(), mode)
    problem = "asks for 4 nvidia.com/gpu but the recommendation is 1 x nvidia-l4"
    if mode is PodEnforcement.Enforce:
        assert not answer.allowed and problem in answer.message
        assert "set the limit to 1" in answer.message
    else:
        assert answer.allowed
        if mode is PodEnforcement.Warn:
            (warning,) = answer.warnings
            assert problem in warning
        else:
            assert answer.warnings == ()
        assert answer.pod is not None  # affinity still applied, the pod's count untouched
        assert answer.pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_contradicting_product_selector_or_affinity() -> None:
    selected = review(pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}), gpuw())
    assert not selected.allowed and "nodeSelector nvidia.com/gpu.product" in selected.message
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["X"]}
                        ]
                    }
                ]
            }
        }
    }
    answer = review(pod(affinity=pinned), gpuw(), PodEnforcement.Warn)
    assert answer.allowed and "none of them a nvidia-l4 node" in answer.warnings[0]
    assert answer.pod is not None
    assert terms(valid(answer.pod)) == terms(pod(affinity=pinned))  # left as the user wrote it
    agreeing = copy.deepcopy(pinned)
    terms_ = agreeing["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms_["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["NVIDIA-L4"]
    assert review(pod(affinity=agreeing), gpuw()).allowed


@pytest.mark.parametrize(
    ("workload", "error", "expected"),
    [
        (None, None, "GPUWorkload ml/llama (label gpusizer.dev/workload) not found"),
        (None, "API answered HTTP 500", "could not read GPUWorkload ml/llama"),
        (gpuw("Rejected"), None, "GPUWorkload ml/llama is Rejected: phase Rejected. Fix its spec"),
        (gpuw("Measuring"), None, "is not Ready yet (phase Measuring)"),
        (gpuw(generation=3), None, "not been sized for its current spec yet (generation 3"),
    ],
    ids=["missing", "unreadable", "rejected", "not-ready", "stale"],
)
def test_workload_problems_by_mode(workload: Any, error: str | None, expected: str) -> None:
    enforce = review(pod(), workload, lookup_error=error)
    assert not enforce.allowed and expected in enforce.message
    assert enforce.message.startswith("pod denied by gpu-sizer (podEnforcement Enforce): ")
    warn = review(pod(), workload, PodEnforcement.Warn, lookup_error=error)
    assert warn.allowed and expected in warn.warnings[0]
    off = review(pod(), workload, PodEnforcement.Off, lookup_error=error)
    assert off.allowed and not off.warnings
    if workload is not None and workload["status"]["phase"] != "Rejected":
        # A provisional recommendation is still applied when the pod is admitted.
        assert warn.pod is not None and valid(warn.pod)


def test_the_operators_own_measurement_pods_are_left_alone() -> None:
    """A measurement Job's pods carry gpusizer.dev/workload (the Job's labels): while the
    workload is Measuring, Enforce would deny the very pod that measures it (seen on a real API
    server), and a re-measurement on another class would be re-placed onto the recommendation.
    The job manifest's labels are exactly what the webhook is given."""
    from gpu_sizer.api import parse_spec
    from gpu_sizer.measurement.job import JobRequest, job_manifest

    spec = parse_spec(
        {"model": {"parameterCount": 10**9}, "inference": {"maxModelLen": 2048, "maxNumSeqs": 4}}
    )
    job = job_manifest(
        spec,
        JobRequest(
            name="gpusizer-llama-0c12a1e74a", namespace=NS, workload="llama",
            workload_uid="u", spec_hash="abc", gpu_class=BY_NAME["nvidia-a100-80gb"],
            gpus=1, image="probe:1", memory_bytes=1 << 30,
        ),
    )  # fmt: skip
    probe = {"apiVersion": "v1", "kind": "Pod", **job["spec"]["template"]}
    assert probe["metadata"]["labels"]["gpusizer.dev/workload"] == "llama"
    for workload in (gpuw("Measuring"), gpuw("Rejected"), None):
        answer = review(probe, workload)
        assert answer.allowed and answer.pod is None and not answer.warnings, workload


def test_mig_slice_recommendation_uses_the_single_strategy_labels() -> None:
    answer = review(pod(), gpuw(gpu_class="nvidia-a100-80gb-mig-3g.40gb"))
    assert answer.pod is not None
    (expr,) = terms(valid(answer.pod))[0]["matchExpressions"]
    assert "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb" in expr["values"]


def test_policy_pod_enforcement_by_namespace() -> None:
    policy = parse_policy(
        {
            "podEnforcement": "Off",
            "namespaceRules": [
                {
                    "namespaceSelector": {"matchLabels": {"tier": "prod"}},
                    "podEnforcement": "Enforce",
                },
                {"namespaceSelector": {"matchLabels": {"tier": "dev"}}},
            ],
        }
    )
    assert policy.for_namespace({"tier": "prod"}).pod_enforcement is PodEnforcement.Enforce
    assert policy.for_namespace({"tier": "dev"}).pod_enforcement is PodEnforcement.Off
    assert policy.for_namespace({}).pod_enforcement is PodEnforcement.Off
    assert parse_policy(None).pod_enforcement is PodEnforcement.Warn


def test_mixed_strategy_recommendation_snippets_drive_the_limit_and_affinity() -> None:
    # The operator writes the snippets for the MIG strategy of the class's nodes (mixed here:
    # nvidia.com/mig-<profile> on nodes of the whole GPU, NVIDIA k8s-device-plugin README).
    from gpu_sizer.api import RecommendationStatus
    from gpu_sizer.sizing.placement import for_strategy

    w = gpuw(gpu_class="nvidia-a100-80gb-mig-1g.10gb")
    rec = RecommendationStatus.model_validate(w["status"]["recommendation"])
    mixed = for_strategy(rec, "mixed", DEFAULT_CATALOG)
    w["status"]["recommendation"] = mixed.model_dump(by_alias=True, mode="json", exclude_none=True)
    answer = review(pod(), w)
    assert answer.allowed and answer.pod is not None
    limits = valid(answer.pod)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}
    exprs = terms(answer.pod)[0]["matchExpressions"]
    assert {e["key"] for e in exprs} == {"nvidia.com/gpu.product", "nvidia.com/mig-1g.10gb.count"}
    assert "NVIDIA-A100-SXM4-80GB" in exprs[0]["values"]
    # A pod pinned to the whole GPU's product is compatible with the mixed-strategy slice.
    pinned = review(pod(nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}), w)
    assert pinned.allowed
    # A pod asking for whole GPUs contradicts a recommendation of a slice.
    asks = pod()
    asks["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    denied = review(asks, w)
    assert not denied.allowed and "nvidia.com/gpu" in denied.message
    assert "nvidia.com/mig-1g.10gb" in denied.message
