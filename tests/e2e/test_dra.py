"""DRA end to end: the API serves ``resource.k8s.io/v1`` ResourceSlices shaped as NVIDIA's
driver publishes them (tests/fixtures/dra-resourceslices.yaml); the operator builds its inventory
from them (the 80/40 GB node GFD labels cannot show) and its measurement Job claims a device
through a ResourceClaimTemplate it creates, owned by the GPUWorkload.

On the control plane (which serves ``resource.k8s.io/v1`` itself since Kubernetes 1.34) the
claim goes the whole way: the resource claim controller makes the pod's ResourceClaim from the
template, the scheduler allocates it a device of the DeviceClass that NVIDIA's driver installs
(``gpu.nvidia.com``) matching the template's selector, and binds the pod to the node whose slice
has that device. The test plays the driver (its slices and DeviceClass) and the kubelet. Without
the resource claim controller in the control plane it runs on the emulator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_sizer_testbed.emulator import LoopbackCluster, dra_resources

from .conftest import GW, NODES, NS, Kubelet, eventually, gpu_node, open_cluster, spec, workload
from .probe_results import GIB, gpu_success
from .real_cluster import RealCluster

# Plays NVIDIA's DRA driver (slices, DeviceClass) and the kubelet.
pytestmark = [pytest.mark.e2e, pytest.mark.emulated_kubelet]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "dra-resourceslices.yaml"
SLICES = ("resource.k8s.io", "v1", "resourceslices")
TEMPLATES = ("resource.k8s.io", "v1", "resourceclaimtemplates")
DEVICE_CLASSES = ("resource.k8s.io", "v1", "deviceclasses")
#: The DeviceClass for whole GPUs that NVIDIA's DRA driver installs (NVIDIA/k8s-dra-driver-gpu,
#: its Helm chart: the driver's devices whose ``type`` attribute is ``gpu``).
GPU_DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """One L4 node, and resource.k8s.io/v1 besides the usual resources."""
    async with open_cluster(
        request,
        extra=dra_resources("v1"),
        nodes=[gpu_node("l4-1", "NVIDIA-L4", 23034)],
        controllers=("resourceclaim-controller",),
    ) as c:
        if isinstance(c, RealCluster):
            await c.create(DEVICE_CLASSES, GPU_DEVICE_CLASS)
        yield c


async def test_slices_feed_the_inventory_and_the_job_claims_a_device(
    cluster: LoopbackCluster, start_operator: Any, kubelet: Kubelet
) -> None:
    # GFD labels the 80/40 node from its first GPU: two 80 GB cards, and no 40 GB class.
    await cluster.create(NODES, gpu_node("mixed-80-40", "NVIDIA-A100-SXM4-80GB", 81920, 2))
    for doc in yaml.safe_load_all(FIXTURE.read_text()):
        if doc:
            await cluster.create(SLICES, doc)
    pinned = spec(placement={"gpuClasses": ["nvidia-a100-40gb"]})
    created = await cluster.create(GW, workload("forty", pinned))
    op = start_operator()
    job = await kubelet.wait_job()
    pod = job["spec"]["template"]["spec"]
    name = job["metadata"]["name"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": name}]
    resources = pod["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpu"}]
    assert "nvidia.com/gpu" not in resources["limits"]
    template = await cluster.get(TEMPLATES, NS, name)
    assert template is not None
    owner = template["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "GPUWorkload" and owner["uid"] == created["metadata"]["uid"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == "gpu.nvidia.com" and exactly["count"] == 1
    selector = exactly["selectors"][0]["cel"]["expression"]
    assert "'NVIDIA A100-SXM4-40GB'" in selector
    # The scheduler bound it to the node whose slice has the 40 GB card (checked there).
    await kubelet.succeed(job, gpu_success(8 * GIB, total=40 * GIB), node="mixed-80-40")

    async def ready() -> dict[str, Any] | None:
        obj = await cluster.get(GW, NS, "forty")
        return obj if ((obj or {}).get("status") or {}).get("phase") == "Ready" else None

    done = await eventually(ready, what="Ready on the 40 GB card")
    assert done["status"]["recommendation"]["gpuClass"] == "nvidia-a100-40gb"
    assert done["status"]["recommendation"]["presentInCluster"] is True
    assert "GPU node mixed-80-40 from DRA ResourceSlices" in op.tail(400)
