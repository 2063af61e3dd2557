"""A class is chosen only where one of its nodes lets a pod request the host memory the
workload holds there (offloaded weights: status.estimate.hostBytesPerNode), for the spec and for
each fix; a fix that moves weights to the host says how much. The operator reads the figure from
its nodes' status.allocatable.memory; the webhook and the CLI have no nodes, and only state it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from tests.controller.test_inventory import gfd, node

from gpu_sizer.api import parse_workload
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.inventory.nodes import build_inventory, parse_node
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GIB = 1 << 30


def _on_l4(example: str) -> Any:
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    doc["spec"].setdefault("placement", {})["gpuClasses"] = ["nvidia-l4"]
    return parse_workload(doc)


def test_an_offloaded_pipeline_is_refused_where_no_node_holds_its_weights() -> None:
    # FLUX.1-schnell with model offload holds its 31.4 GiB of weights in host memory.
    spec = parse_workload(
        yaml.safe_load((EXAMPLES / "flux1-schnell-48gb-offload.yaml").read_text())
    )
    held = assess(spec).estimate.host_bytes_per_node
    assert held is not None and 31 * GIB < held < 32 * GIB
    roomy = assess(spec, host_memory={c.name: 64 * GIB for c in DEFAULT_CATALOG})
    assert roomy.verdict is Verdict.Fits
    small = assess(spec, host_memory={c.name: 16 * GIB for c in DEFAULT_CATALOG})
    assert small.verdict is Verdict.NoSafeHeadroom
    assert small.message.startswith("needs 31.4 GiB of host memory per node")
    assert "at most 16.0 GiB (status.allocatable.memory)" in small.message
    # A class whose nodes report nothing is not checked; one that holds it is chosen.
    some = assess(spec, host_memory={"nvidia-rtx-a6000": 16 * GIB, "nvidia-l40s": 48 * GIB})
    assert some.verdict is Verdict.Fits
    assert some.recommendation is not None
    assert some.recommendation.gpu_class != "nvidia-rtx-a6000"


def test_offload_fixes_state_their_host_memory_and_are_judged_by_it() -> None:
    spec = _on_l4("flux1-dev-1024.yaml")  # 33.6 GiB per GPU: no fit on an L4 without a fix
    plain = assess(spec)
    assert plain.verdict is Verdict.NoSafeHeadroom
    sequential = next(f for f in plain.fixes if "offload Sequential" in str(f))
    assert sequential.fits and "31.4 GiB host memory per node" in str(sequential)
    vae = next(f for f in plain.fixes if "vaeTiling" in str(f))
    assert "host memory" not in str(vae)  # nothing moved to the host
    small = assess(spec, host_memory={"nvidia-l4": 16 * GIB})
    offloads = [f for f in small.fixes if "offload" in str(f)]
    assert offloads and not any(f.fits for f in offloads)
    assert all("more host memory per node than" in str(f) for f in offloads)
    assert "Fits with" not in small.message


def test_the_inventory_reads_each_class_s_largest_allocatable_host_memory() -> None:
    def l4(name: str, memory: str | None) -> dict[str, Any]:
        n = node(name, gfd("NVIDIA-L4", "23034", "1"), gpus=1)
        if memory is not None:
            n["status"]["allocatable"]["memory"] = memory
        return n

    nodes = [l4("a", "31811Mi"), l4("b", "64Gi"), l4("c", None)]
    assert build_inventory(nodes, DEFAULT_CATALOG).host_memory() == {"nvidia-l4": 64 * GIB}
    assert build_inventory([l4("c", None)], DEFAULT_CATALOG).host_memory() == {}
    parsed = parse_node(l4("a", "31811Mi"), DEFAULT_CATALOG)
    assert parsed is not None and not isinstance(parsed, str)
    assert getattr(parsed, "host_memory_bytes", None) == 31811 << 20
