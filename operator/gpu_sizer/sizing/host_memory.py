"""Host memory a workload holds per node, against what the cluster's nodes let a pod request. Pure.

An offloaded pipeline keeps its weights in host memory (``status.estimate.hostBytesPerNode``:
``enable_model_cpu_offload``, group and sequential offload move them between host and GPU, and
a component placed on the CPU lives there). A node whose ``status.allocatable.memory`` is
smaller cannot run such a pod: the kubelet never schedules a request above it, and a pod
without a request is OOM-killed while loading. The operator knows each class's nodes
(:meth:`gpu_sizer.inventory.nodes.Inventory.host_memory`) and checks every class choice, the
spec's and each fix's, against them; without an inventory (the webhook, ``gpu-sizer
estimate``) nothing is checked, and each fix that moves weights to the host says how much it
needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_sizer.catalog import GPUClass
from gpu_sizer.sizing.assessment import gib

__all__ = ["held_by_nodes", "host_problem"]


def host_problem(
    need_bytes: int, classes: Sequence[GPUClass], host_memory: Mapping[str, int] | None
) -> str | None:
    """Why no class of ``classes`` has a node with ``need_bytes`` of allocatable host memory
    (bytes), or ``None`` when one has (or nothing is known of the nodes)."""
    if held_by_nodes(need_bytes, classes, host_memory) or not classes:
        return None
    assert host_memory is not None
    most = max(host_memory[c.name] for c in classes)
    return (
        f"needs {gib(need_bytes)} of host memory per node (status.estimate.hostBytesPerNode), "
        f"and the cluster's nodes of the allowed classes let a pod request at most {gib(most)} "
        "(status.allocatable.memory)"
    )


def held_by_nodes(
    need_bytes: int, classes: Sequence[GPUClass], host_memory: Mapping[str, int] | None
) -> list[GPUClass]:
    """The classes of ``classes`` one of whose nodes lets a pod request ``need_bytes`` of host
    memory; a class whose nodes report none, or every class when ``host_memory`` is ``None``,
    is kept (not checked)."""
    if not host_memory or need_bytes <= 0:
        return list(classes)
    return [c for c in classes if need_bytes <= host_memory.get(c.name, need_bytes)]
