"""A serving pod is one engine process group: it never spans nodes, so a replica wider than the
GPUs of one node is refused, never recommended as one pod no node can schedule."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.api import parse_spec
from gpu_sizer.inventory.nodes import ClassCapacity
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess
from tests.architectures import LLAMA_3_8B


def _serve(**inference: Any) -> Any:
    return parse_spec(
        {
            "model": {"architecture": LLAMA_3_8B, "dtype": "bfloat16"},
            "inference": {"engine": "vllm", "maxModelLen": 4096, "maxNumSeqs": 8, **inference},
            "placement": {"gpuClasses": ["nvidia-l4", "nvidia-h100-80gb"]},
        }
    )


@pytest.mark.parametrize(
    "parallel",
    [
        {"tensorParallelSize": 16},
        {"tensorParallelSize": 8, "pipelineParallelSize": 2},
        {"tensorParallelSize": 4, "pipelineParallelSize": 4},
    ],
)
def test_a_replica_wider_than_a_node_is_refused_and_says_why(parallel: dict[str, int]) -> None:
    a = assess(_serve(**parallel))
    assert a.verdict is Verdict.NoSafeHeadroom and a.recommendation is None
    assert "one pod of 16 GPUs" in a.message and "8 GPUs of one node" in a.message
    assert "serving across nodes is not modelled" in a.message


def test_eight_gpus_still_fit_one_node() -> None:
    a = assess(_serve(tensorParallelSize=8))
    assert a.verdict is Verdict.Fits and a.recommendation is not None
    assert a.recommendation.gpu_count == 8


def test_the_cluster_inventory_decides_gpus_per_node() -> None:
    """Nodes of four GPUs (the cluster's GFD labels) hold a TP 4 replica, not a TP 8 one."""
    capacity = {
        "nvidia-l4": ClassCapacity(gpus=16, nodes=4, gpus_per_node=4),
        "nvidia-h100-80gb": ClassCapacity(gpus=16, nodes=4, gpus_per_node=4),
    }
    assert assess(_serve(tensorParallelSize=4), capacity=capacity).verdict is Verdict.Fits
    wide = assess(_serve(tensorParallelSize=8), capacity=capacity)
    assert wide.verdict is Verdict.NoSafeHeadroom
    assert "4 GPUs of one node (the cluster's" in wide.message
