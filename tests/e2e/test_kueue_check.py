"""Kueue AdmissionCheck end to end (``--kueue-admission-check``): the emulator serves
``kueue.x-k8s.io/v1beta1`` AdmissionChecks, ResourceFlavors and Workloads shaped as Kueue's API
(kubernetes-sigs/kueue apis/kueue/v1beta1/admissioncheck_types.go, workload_types.go); the test
plays Kueue (adds the check as Pending, reserves quota on a flavor) and the operator sets the
check from the GPUWorkload the pod set names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from gpu_sizer_testbed.emulator import LoopbackCluster, crd_document, kueue_resources

from gpu_sizer.kueue_check import CONTROLLER_NAME

from .conftest import CRDS, GW, NODES, NS, eventually, gpu_node, spec, workload

pytestmark = [pytest.mark.e2e, pytest.mark.emulated_api, pytest.mark.emulated_kubelet]

CHECKS = ("kueue.x-k8s.io", "v1beta1", "admissionchecks")
FLAVORS = ("kueue.x-k8s.io", "v1beta1", "resourceflavors")
WORKLOADS = ("kueue.x-k8s.io", "v1beta1", "workloads")


@pytest.fixture
async def cluster() -> AsyncIterator[LoopbackCluster]:
    async with LoopbackCluster(extra=kueue_resources("v1beta1")) as c:
        await c.create(CRDS, crd_document())
        await c.create(NODES, gpu_node("l4-1", "NVIDIA-L4", 23034))
        await c.create(NODES, gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", 81920))
        yield c


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
    await cluster.create(WORKLOADS, kueue_workload("job-small", "small", "a100"))
    await cluster.create(WORKLOADS, kueue_workload("job-huge", "huge", "a100"))
    await cluster.create(WORKLOADS, kueue_workload("job-missing", "nobody", "a100"))
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
