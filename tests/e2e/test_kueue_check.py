"""Kueue AdmissionCheck end to end (``--kueue-admission-check``): the API serves
``kueue.x-k8s.io/v1beta1`` AdmissionChecks, ResourceFlavors and Workloads shaped as Kueue's API
(kubernetes-sigs/kueue apis/kueue/v1beta1/admissioncheck_types.go, workload_types.go); the test
plays Kueue (adds the check as Pending, reserves quota on a flavor) and the operator sets the
check from the GPUWorkload the pod set names.

On a real API server the three kinds come from CRDs the test applies (:func:`kueue_crds`): Kueue's
group, version, kinds, scope and status subresource, with open schemas (Kueue's own generated
schemas are Kueue's to ship; what the operator reads and writes is checked here, not Kueue's
validation). The emulator serves the same kinds from ``kueue_resources()``."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from gpu_sizer_testbed.emulator import LoopbackCluster, kueue_resources

from gpu_sizer.inventory.kueue_check import CONTROLLER_NAME

from .conftest import CRDS, GW, NS, eventually, open_cluster, spec, workload
from .real_cluster import RealCluster

# Plays Kueue, which a real cluster with Kueue runs itself.
pytestmark = [pytest.mark.e2e, pytest.mark.emulated_kubelet]

CHECKS = ("kueue.x-k8s.io", "v1beta1", "admissionchecks")
FLAVORS = ("kueue.x-k8s.io", "v1beta1", "resourceflavors")
WORKLOADS = ("kueue.x-k8s.io", "v1beta1", "workloads")


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The test's cluster serving Kueue's kinds: from :func:`kueue_crds` on a real API server
    (deleted with the test's other cluster-wide objects), ``kueue_resources()`` on the
    emulator."""
    async with open_cluster(request, extra=kueue_resources("v1beta1")) as c:
        if isinstance(c, RealCluster):
            for crd in kueue_crds():
                await c.create(CRDS, crd)
            for group, version, plural in kueue_resources("v1beta1"):
                await eventually(
                    lambda g=group, v=version, p=plural: _served(c, (g, v, p)),
                    what=f"{plural}.{group} served",
                )
        yield c


def kueue_crds(version: str = "v1beta1") -> list[dict[str, Any]]:
    """CRDs for Kueue's kinds as ``kueue_resources()`` describes them: group, version, kind,
    scope and subresources, each with an open schema."""
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    crds = []
    for (group, ver, plural), info in kueue_resources(version).items():
        crds.append(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": f"{plural}.{group}"},
                "spec": {
                    "group": group,
                    "names": {
                        "kind": info["kind"],
                        "plural": plural,
                        "singular": info["singular"],
                        "listKind": f"{info['kind']}List",
                    },
                    "scope": "Namespaced" if info["namespaced"] else "Cluster",
                    "versions": [
                        {
                            "name": ver,
                            "served": True,
                            "storage": True,
                            "schema": copy.deepcopy(schema),
                            "subresources": {s: {} for s in info.get("subresources", ())},
                        }
                    ],
                },
            }
        )
    return crds


async def _served(cluster: RealCluster, resource: tuple[str, str, str]) -> bool:
    """Listed without an error: a new CRD's resources answer 404, then 429 ("storage is
    (re)initializing"), for a moment after it is created."""
    try:
        await cluster.list(resource)
    except Exception:  # ApiStatus 404 / 429: not yet
        return False
    return True


async def create_kueue_workload(cluster: Any, doc: dict[str, Any]) -> None:
    """Create a Workload, then write its status through the status subresource, as Kueue
    does (a real API server drops a status sent in the create)."""
    body = {k: v for k, v in doc.items() if k != "status"}
    await cluster.create(WORKLOADS, body)
    await cluster.patch(
        WORKLOADS,
        doc["metadata"]["namespace"],
        doc["metadata"]["name"],
        {"status": doc["status"]},
        subresource="status",
    )


def flavor(name: str, product: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": product}},
    }


def kueue_workload(name: str, gpu_workload: str, flavor_name: str) -> dict[str, Any]:
    """A Workload as Kueue's Job integration makes it, after quota reservation on a flavor."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "queueName": "gpu-queue",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "metadata": {"labels": {"gpusizer.dev/workload": gpu_workload}},
                        "spec": {"containers": [{"name": "server", "image": "vllm"}]},
                    },
                }
            ],
        },
        "status": {
            "admission": {
                "clusterQueue": "gpu-cq",
                "podSetAssignments": [
                    {"name": "main", "flavors": {"nvidia.com/gpu": flavor_name}, "count": 1}
                ],
            },
            "admissionChecks": [
                {
                    "name": "gpu-sizer",
                    "state": "Pending",
                    "message": "",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                }
            ],
        },
    }


async def check_state(cluster: LoopbackCluster, name: str, state: str) -> dict[str, Any] | None:
    obj = await cluster.get(WORKLOADS, NS, name)
    for entry in ((obj or {}).get("status") or {}).get("admissionChecks") or []:
        if entry.get("name") == "gpu-sizer" and entry.get("state") == state:
            return dict(entry)
    return None


async def requeue(cluster: LoopbackCluster, name: str) -> None:
    """Play Kueue after a Retry: the Workload is queued again and its check is Pending again."""
    obj = await cluster.get(WORKLOADS, NS, name)
    checks = [
        dict(c, state="Pending") if c["name"] == "gpu-sizer" else c
        for c in obj["status"]["admissionChecks"]
    ]
    await cluster.patch(
        WORKLOADS, NS, name, {"status": {"admissionChecks": checks}}, subresource="status"
    )


async def decided(
    cluster: LoopbackCluster,
    name: str,
    state: str,
    requeue_on: tuple[str, ...] = ("not Ready yet",),
) -> dict[str, Any]:
    """The check's entry once it says ``state``; a Retry for a reason in ``requeue_on`` (the
    GPUWorkload not decided yet when the check was: the operator starts on both at once) is
    requeued first, as Kueue would."""

    async def settled() -> dict[str, Any] | None:
        obj = await cluster.get(WORKLOADS, NS, name)
        for entry in ((obj or {}).get("status") or {}).get("admissionChecks") or []:
            if entry.get("name") == "gpu-sizer" and entry.get("state") != "Pending":
                return dict(entry)
        return None

    for _ in range(20):
        entry = await eventually(settled, what=f"{name} decided")
        if entry["state"] == state:
            return entry
        assert entry["state"] == "Retry", entry
        assert any(why in entry["message"] for why in requeue_on), entry
        await requeue(cluster, name)
    raise AssertionError(f"{name}: still not {state} after 20 requeues")


async def test_admission_check_follows_the_gpu_workload_and_the_flavor(
    cluster: LoopbackCluster, start_operator: Any
) -> None:
    await cluster.create(
        CHECKS,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "AdmissionCheck",
            "metadata": {"name": "gpu-sizer"},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
    )
    await cluster.create(FLAVORS, flavor("a100", "NVIDIA-A100-SXM4-80GB"))
    await cluster.create(FLAVORS, flavor("l4", "NVIDIA-L4"))
    # Ready on its estimate (measurement disabled): Llama-3.2-1B fits both GPUs.
    await cluster.create(GW, workload("small", spec(measurement={"mode": "Disabled"})))
    # Rejected: the weights alone fit no allowed class.
    await cluster.create(
        GW,
        workload(
            "huge",
            spec(
                params=400_000_000_000,
                measurement={"mode": "Disabled"},
                placement={"gpuClasses": ["nvidia-l4"]},
            ),
        ),
    )
    await create_kueue_workload(cluster, kueue_workload("job-small", "small", "a100"))
    await create_kueue_workload(cluster, kueue_workload("job-huge", "huge", "a100"))
    await create_kueue_workload(cluster, kueue_workload("job-missing", "nobody", "a100"))
    start_operator("--kueue-admission-check")

    async def active() -> bool:
        check = await cluster.get(CHECKS, None, "gpu-sizer")
        conds = ((check or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Active" and c.get("status") == "True" for c in conds)

    await eventually(active, what="the AdmissionCheck marked Active")
    ready = await decided(cluster, "job-small", "Ready")
    assert "nvidia-a100-80gb" in ready["message"] and "headroom" in ready["message"]
    rejected = await decided(cluster, "job-huge", "Rejected")
    assert "ml-team/huge is Rejected" in rejected["message"]
    missing = await eventually(
        lambda: check_state(cluster, "job-missing", "Retry"), what="job-missing Retry"
    )
    assert "not found" in missing["message"]
    # The GPUWorkload it names appears and is Ready: once Kueue asks again, the check passes.
    await cluster.create(GW, workload("nobody", spec(measurement={"mode": "Disabled"})))

    async def sized() -> bool:
        obj = await cluster.get(GW, NS, "nobody")
        return ((obj or {}).get("status") or {}).get("phase") == "Ready"

    await eventually(sized, what="GPUWorkload nobody Ready")
    await requeue(cluster, "job-missing")
    await decided(cluster, "job-missing", "Ready", requeue_on=("not Ready yet", "not found"))
