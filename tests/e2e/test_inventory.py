"""The operator reads GPU nodes from the API and says which ones it ignores and why."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import GW, NODES, NS, Kubelet, eventually, gpu_node, spec, workload
from tests.e2e.probe_results import GIB, gpu_success


@pytest.mark.emulated_kubelet
async def test_ignored_nodes_are_logged_with_the_reason(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(
        NODES,
        {"metadata": {"name": "fresh-node"}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}},
    )
    await cluster.create(NODES, gpu_node("mixed-node", "NVIDIA-L4", 81920))
    await cluster.create(GW, workload("inv", spec()))
    op = start_operator()
    await kubelet.wait_job()

    async def logged() -> bool:
        log = op.tail(400)
        return "no nvidia.com/gpu.product label" in log and "mixed GPU models" in log

    await eventually(logged, what="ignored nodes in the log")


def mig_mixed_node(name: str) -> dict:
    """NVIDIA gpu-operator issue 637's node: two A100-80GB, mixed strategy, every GPU cut into
    slices, a stale ``nvidia.com/gpu: 2`` beside them; GFD's per-profile labels."""
    node = gpu_node(name, "NVIDIA-A100-SXM4-80GB", 81920, count=2)
    node["metadata"]["labels"].update(
        {
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig-1g.10gb.count": "6",
            "nvidia.com/mig-1g.10gb.memory": "9728",
            "nvidia.com/mig-2g.20gb.count": "4",
        }
    )
    node["status"]["allocatable"].update(
        {"nvidia.com/mig-1g.10gb": "6", "nvidia.com/mig-2g.20gb": "4"}
    )
    return node


@pytest.mark.emulated_kubelet
async def test_mixed_strategy_mig_job_and_snippets_request_the_slice(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(NODES, mig_mixed_node("mig-mixed-1"))
    pinned = spec(placement={"gpuClasses": ["nvidia-a100-80gb-mig-2g.20gb"]})
    await cluster.create(GW, workload("slice", pinned))
    start_operator()
    job = await kubelet.wait_job()
    pod = job["spec"]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-2g.20gb"] == "1" and "nvidia.com/gpu" not in limits
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {e["key"]: e for e in term["matchExpressions"]}
    assert "NVIDIA-A100-SXM4-80GB" in keys["nvidia.com/gpu.product"]["values"]
    assert keys["nvidia.com/mig-2g.20gb.count"]["operator"] == "Gt"

    # Already while measuring, the provisional recommendation's snippets name the slice.
    async def provisional() -> dict | None:
        obj = await cluster.get(GW, NS, "slice")
        rec = ((obj or {}).get("status") or {}).get("recommendation")
        return rec if rec and rec.get("basis") == "Estimate" else None

    rec = await eventually(provisional, what="the provisional recommendation")
    assert rec["resources"] == {"limits": {"nvidia.com/mig-2g.20gb": "1"}}
    await kubelet.succeed(job, gpu_success(8 * GIB, total=20096 << 20), node="mig-mixed-1")

    async def ready() -> dict | None:
        obj = await cluster.get(GW, NS, "slice")
        status = (obj or {}).get("status") or {}
        return obj if status.get("phase") == "Ready" else None

    done = await eventually(ready, what="Ready on the slice")
    rec = done["status"]["recommendation"]
    assert rec["basis"] == "Measurement"
    assert rec["resources"] == {"limits": {"nvidia.com/mig-2g.20gb": "1"}}
    terms = rec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    exprs = terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert exprs[1] == {"key": "nvidia.com/mig-2g.20gb.count", "operator": "Gt", "values": ["0"]}
