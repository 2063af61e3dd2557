"""The operator reads GPU nodes from the API and says which ones it ignores and why."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import GW, NODES, Kubelet, eventually, gpu_node, spec, workload


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
