"""The GPUs a pod asks for, counted as the scheduler counts them, and pods no API server sends.

A pod gets GPUs from its app containers, its init containers, its sidecars (init containers with
``restartPolicy: Always``, Kubernetes docs "Sidecar Containers") and its DRA resource claims
(``spec.resourceClaims``; the request shapes of resource.k8s.io v1 ``exactly`` / ``firstAvailable``
and v1beta1's fields on the request, Kubernetes API reference "ResourceClaim v1"). ``Enforce``
compares all of them with the recommendation and the webhook never adds ``nvidia.com/gpu`` beside
a DRA claim. The workload label is checked before it is used in an API path, and a review whose
pod is not shaped as a Pod (sent to the webhook directly, past the API server's decoding) is a
problem like any other: denied under ``Enforce`` only, never a crash.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_sizer.admission import handlers
from gpu_sizer.admission.capacity import AdmissionCapacity, Overloaded
from gpu_sizer.admission.pod_gpus import ClaimGpus, claim_gpus, effective_request
from gpu_sizer.policy.namespace import PodEnforcement, parse_policy

from .test_pods import gpuw, pod, review, valid

ENFORCE, WARN, OFF = PodEnforcement.Enforce, PodEnforcement.Warn, PodEnforcement.Off
GPU = "nvidia.com/gpu"


def limits(n: int | str) -> dict[str, Any]:
    return {"limits": {GPU: n}}


def init(name: str, gpus: int | None = None, *, sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    if gpus is not None:
        c["resources"] = limits(gpus)
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def gpus_added(p: dict[str, Any]) -> list[str]:
    """Containers of any kind that carry a GPU limit in the answer."""
    spec = p["spec"]
    return [
        c["name"]
        for key in ("initContainers", "containers")
        for c in spec.get(key) or ()
        if GPU in ((c.get("resources") or {}).get("limits") or {})
    ]


# ------------------------------------------------------------------ the effective request


@pytest.mark.parametrize(
    ("inits", "app", "expected"),
    [
        ([], [1, None], 1),
        ([init("warm", 4)], [1, None], 4),  # init runs alone first: 4 at once
        ([init("proxy", 1, sidecar=True)], [1, None], 2),  # sidecar beside the app
        ([init("proxy", 1, sidecar=True), init("warm", 2)], [None, None], 3),
        ([init("warm", 2), init("proxy", 1, sidecar=True)], [1, None], 2),
        ([init("setup")], [None, None], None),
    ],
)
def test_effective_request_over_init_sidecar_and_app_containers(
    inits: list[dict[str, Any]], app: list[int | None], expected: int | None
) -> None:
    p = pod(initContainers=inits)
    for container, n in zip(p["spec"]["containers"], app, strict=True):
        if n is not None:
            container["resources"] = limits(n)
    assert effective_request(p["spec"], GPU) == expected


def test_an_init_container_asking_more_gpus_is_a_contradiction() -> None:
    p = pod(initContainers=[init("warm-cache", 4)])
    denied = review(p, gpuw())
    assert not denied.allowed
    assert "asks for 4 nvidia.com/gpu but the recommendation is 1 x nvidia-l4" in denied.message
    warned = review(p, gpuw(), WARN)
    assert warned.allowed and warned.pod is not None
    assert gpus_added(warned.pod) == ["warm-cache"], "no limit added beside the init's own"


def test_a_sidecar_with_the_gpu_counts_and_gets_no_second_limit() -> None:
    p = pod(initContainers=[init("gpu-proxy", 1, sidecar=True)])
    answer = review(p, gpuw())
    assert answer.allowed and answer.pod is not None
    assert gpus_added(valid(answer.pod)) == ["gpu-proxy"]
    two = review(p, gpuw(count=2))
    assert not two.allowed and "asks for 1 nvidia.com/gpu but the recommendation is 2" in (
        two.message
    )


def test_a_mig_slice_in_an_init_container_is_another_gpu_resource() -> None:
    p = pod(initContainers=[{"name": "x", "image": "b", "resources": limits(0)}])
    p["spec"]["initContainers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": 1}}
    denied = review(p, gpuw())
    assert not denied.allowed and "asks for nvidia.com/mig-1g.10gb" in denied.message


# ------------------------------------------------------------------ DRA claims


def v1_claim(count: int = 1, mode: str = "ExactCount", cls: str = "gpu.nvidia.com") -> Any:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {"deviceClassName": cls, "allocationMode": mode, "count": count},
                }
            ]
        }
    }


def test_claim_shapes_of_every_served_version() -> None:
    assert claim_gpus("a", v1_claim(2)) == ClaimGpus("a", 2)
    beta1 = {"devices": {"requests": [{"name": "g", "deviceClassName": "mig.nvidia.com"}]}}
    assert claim_gpus("b", beta1) == ClaimGpus("b", 1)  # count defaults to 1
    nic = v1_claim(4, cls="nic.example.com")
    assert claim_gpus("c", nic) == ClaimGpus("c", 0)
    every = claim_gpus("d", v1_claim(mode="All"))
    assert every.count is None and "allocationMode All" in every.why
    choice = {
        "devices": {
            "requests": [
                {
                    "name": "g",
                    "firstAvailable": [
                        {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
                        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
                    ],
                }
            ]
        }
    }
    assert claim_gpus("e", choice).count is None
    assert claim_gpus("f", ["not", "a", "spec"]).count is None


def dra_pod() -> dict[str, Any]:
    p = pod(resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return p


def test_a_dra_claim_of_the_recommended_count_gets_no_extended_resource_beside_it() -> None:
    """The device plugin's nvidia.com/gpu beside a DRA claim would give the pod GPUs twice."""
    answer = review(dra_pod(), gpuw(), claims=[ClaimGpus("gpu", 1)])
    assert answer.allowed and not answer.warnings and answer.pod is not None
    assert gpus_added(valid(answer.pod)) == []
    assert answer.pod["spec"]["affinity"]  # the class is still required


@pytest.mark.parametrize(
    ("claim", "said"),
    [
        (ClaimGpus("gpu", 2), "asks for 2 GPU device(s) through DRA resource claims"),
        (ClaimGpus("gpu", None, "allocationMode All of gpu.nvidia.com"), "cannot tell"),
        (ClaimGpus("gpu", None, "ResourceClaimTemplate ml/one-gpu not found"), "not found"),
    ],
)
def test_a_dra_claim_that_differs_or_cannot_be_counted_is_enforced(
    claim: ClaimGpus, said: str
) -> None:
    denied = review(dra_pod(), gpuw(), claims=[claim])
    assert not denied.allowed and said in denied.message
    warned = review(dra_pod(), gpuw(), WARN, claims=[claim])
    assert warned.allowed and said in warned.warnings[0]
    assert warned.pod is not None and gpus_added(warned.pod) == []


def test_a_claim_of_other_devices_leaves_the_gpu_to_the_webhook() -> None:
    answer = review(dra_pod(), gpuw(), claims=[ClaimGpus("gpu", 0)])
    assert answer.allowed and answer.pod is not None
    assert gpus_added(answer.pod) == ["server"]


def test_extended_gpus_and_claimed_gpus_add_up() -> None:
    p = dra_pod()
    p["spec"]["containers"][1]["resources"] = limits(1)
    denied = review(p, gpuw(), claims=[ClaimGpus("gpu", 1)])
    assert not denied.allowed
    assert "1 nvidia.com/gpu and 1 GPU device(s) through DRA resource claims" in denied.message


# ------------------------------------------------------------------ the workload label


@pytest.mark.parametrize("value", ["mine/../x", "../../secrets", "Mine", "a b", "-x", "x" * 70])
def test_a_label_that_is_not_a_workload_name_is_never_looked_up(value: str) -> None:
    p = pod()
    p["metadata"]["labels"]["gpusizer.dev/workload"] = value
    denied = review(p, gpuw())
    assert not denied.allowed and "is not a GPUWorkload name" in denied.message
    off = review(p, gpuw(), OFF)
    assert off.allowed and off.pod is None and off.warnings == ()


def run_handler(body: dict[str, Any], mode: PodEnforcement, **fetchers: Any) -> Any:
    """mutate_pod with the namespace policy ``mode`` and the given fetchers; what it returned,
    or the AdmissionError it raised, with the warnings and the calls the fetchers saw."""
    calls: list[tuple[Any, ...]] = []

    def workloads(namespace: str, name: str) -> Any:
        calls.append(("workload", namespace, name))
        return fetchers.get("workload")

    def claims(namespace: str, kind: str, name: str) -> Any:
        calls.append(("claim", namespace, kind, name))
        found = fetchers.get("claims", {})
        return found.get(name)

    policy = parse_policy({"podEnforcement": mode.value})
    old = handlers._config
    handlers.configure_admission(
        handlers.AdmissionConfig(policy=policy, workloads=workloads, claims=claims)
    )
    warnings: list[str] = []
    try:
        asyncio.run(
            handlers.mutate_pod(
                body=kopf.Body(body),
                patch=kopf.Patch(),
                subresource=None,
                warnings=warnings,
                operation="CREATE",
            )
        )
        error = None
    except kopf.AdmissionError as exc:
        error = exc
    finally:
        handlers.configure_admission(old)
    return error, warnings, calls


def test_the_handler_puts_no_invalid_label_into_an_api_path() -> None:
    p = pod()
    p["metadata"]["namespace"] = "ml"
    p["metadata"]["labels"]["gpusizer.dev/workload"] = "mine/../x"
    error, _, calls = run_handler(p, ENFORCE, workload=gpuw())
    assert calls == [] and error is not None and "not a GPUWorkload name" in str(error)


def test_the_handler_reads_the_pods_claims_and_counts_them() -> None:
    p = dra_pod()
    p["metadata"]["namespace"] = "ml"
    error, _, calls = run_handler(p, ENFORCE, workload=gpuw(), claims={"one-gpu": v1_claim(2)})
    assert ("claim", "ml", "ResourceClaimTemplate", "one-gpu") in calls
    assert error is not None and "2 GPU device(s) through DRA" in str(error)
    error, _, _ = run_handler(p, ENFORCE, workload=gpuw(), claims={"one-gpu": v1_claim(1)})
    assert error is None


# ------------------------------------------------------------------ pods no API server sends

MALFORMED = [
    ("containers", "not-a-list"),
    ("containers", [["a", "list"]]),
    ("containers", [{"name": "x", "resources": ["a", "list"]}]),
    ("containers", [{"name": "x", "resources": {"limits": "8"}}]),
    ("initContainers", {"a": 1}),
    ("resourceClaims", "gpu"),
    ("nodeSelector", ["a"]),
    ("affinity", {"nodeAffinity": "x"}),
    ("affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}),
]


@pytest.mark.parametrize(("field", "value"), MALFORMED)
def test_a_type_confused_pod_is_denied_only_under_enforce(field: str, value: Any) -> None:
    p = pod()
    p["spec"][field] = value
    denied = review(p, gpuw())
    assert not denied.allowed and "the pod is malformed" in denied.message
    warned = review(p, gpuw(), WARN)
    assert warned.allowed and warned.pod is None and "malformed" in warned.warnings[0]
    off = review(p, gpuw(), OFF)
    assert off.allowed and off.pod is None and off.warnings == ()


@pytest.mark.parametrize("mode", list(PodEnforcement))
def test_the_handler_never_denies_a_malformed_pod_under_off_or_warn(mode: PodEnforcement) -> None:
    p = pod()
    p["metadata"]["namespace"] = "ml"
    p["spec"]["containers"] = [{"name": "x", "resources": ["a", "list"]}]
    error, warnings, _ = run_handler(p, mode, workload=gpuw())
    assert (error is not None) == (mode is ENFORCE)
    assert bool(warnings) == (mode is WARN)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
PATHS = [
    ("spec",),
    ("spec", "containers"),
    ("spec", "containers", 0),
    ("spec", "containers", 0, "resources"),
    ("spec", "containers", 0, "resources", "limits"),
    ("spec", "initContainers"),
    ("spec", "resourceClaims"),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    (
        "spec",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    ),
    (
        "spec",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
        0,
        "matchExpressions",
    ),
    ("spec", "nodeSelector"),
    ("metadata", "annotations"),
    ("metadata", "labels", "gpusizer.dev/workload"),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=JSON, mode=st.sampled_from(list(PodEnforcement)))
def test_no_shape_makes_the_review_raise_or_deny_outside_enforce(
    path: tuple[Any, ...], value: Any, mode: PodEnforcement
) -> None:
    p = copy.deepcopy(pod())
    p["spec"]["containers"][0]["resources"] = {"limits": {}}
    p["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": []}]
            }
        }
    }
    target: Any = p
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    answer = review(p, gpuw(), mode)
    if mode is not ENFORCE:
        assert answer.allowed
    if mode is OFF:
        assert answer.warnings == ()


def test_a_node_selector_term_with_values_of_the_wrong_type_is_malformed_not_a_crash() -> None:
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": 5}]}
    p = pod(
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    )
    assert not review(p, gpuw()).allowed
    off = review(p, gpuw(), OFF)
    assert off.allowed and off.pod is None


class Shedding(AdmissionCapacity):
    """Every verdict shed, as when its worker process died."""

    async def run(self, fn: Any, /, *args: object, **kwargs: object) -> Any:
        raise Overloaded(503, "WorkerLost", "webhook worker process ended; retry shortly")


@pytest.mark.parametrize("mode", list(PodEnforcement))
def test_a_shed_pod_review_is_answered_as_shed_under_every_mode(mode: PodEnforcement) -> None:
    """A shed review is the server's 503 with Retry-After (the API server retries, then the pod
    webhook's failurePolicy Ignore admits the pod unchanged), never a denial under Enforce nor a
    quiet admission under Off or Warn."""
    old = handlers._config
    handlers.configure_admission(
        handlers.AdmissionConfig(
            policy=parse_policy({"podEnforcement": mode.value}),
            workloads=lambda namespace, name: None,
            claims=lambda namespace, kind, name: None,
            capacity=Shedding(processes=0),
        )
    )
    try:
        with pytest.raises(Overloaded) as err:
            asyncio.run(
                handlers.mutate_pod(
                    body=kopf.Body(pod()),
                    patch=kopf.Patch(),
                    subresource=None,
                    warnings=[],
                    operation="CREATE",
                )
            )
    finally:
        handlers.configure_admission(old)
    assert (err.value.status, err.value.reason) == (503, "WorkerLost")
