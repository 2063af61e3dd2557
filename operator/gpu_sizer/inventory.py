"""GPU inventory from Node objects: GPU Feature Discovery labels -> catalog classes. Pure.

NVIDIA GPU Feature Discovery (GFD, part of the NVIDIA device plugin / GPU Operator) labels each
GPU node with ``nvidia.com/gpu.product`` (e.g. ``NVIDIA-H100-80GB-HBM3``),
``nvidia.com/gpu.memory`` (MiB of one GPU in current releases), ``nvidia.com/gpu.count`` and, with
MIG, ``nvidia.com/mig.strategy`` (``single`` | ``mixed``) and ``nvidia.com/mig.config``. The
device plugin advertises ``status.allocatable["nvidia.com/gpu"]``. Source: NVIDIA
k8s-device-plugin README, "GPU Feature Discovery" label table, and the GPU Operator MIG guide.

Labels lie in known ways, so parsing is defensive and every node that is not used is reported
with the reason:

- Older GFD releases wrote ``nvidia.com/gpu.memory`` in bytes rather than MiB. A value of at least
  2^24 cannot be MiB (that would be 16 TiB on one GPU) and is read as bytes.
- A node with several GPU models carries the *first* GPU's labels only; when the product's
  catalog memory disagrees with ``gpu.memory`` by more than 5 %, or ``gpu.count`` disagrees with
  the allocatable count, the node is ignored rather than trusted.
- With MIG, one ``nvidia.com/gpu`` is a slice: under the ``single`` strategy the product label
  gets a ``-MIG-<profile>`` suffix and only a catalog class listing that exact product matches;
  under ``mixed`` the slices are separate resources and ``nvidia.com/gpu`` counts whole GPUs only.
- A node that joined before the driver has ``nvidia.com/gpu`` allocatable but no GFD labels; it is
  ignored until GFD labels it. A node with a product but no memory label falls back to the
  product-to-class table of the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_sizer.catalog import GPUClass, class_for_product

__all__ = [
    "GpuNode",
    "IgnoredNode",
    "Inventory",
    "build_inventory",
    "parse_memory_label",
    "parse_node",
]

MIB = 1 << 20
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
RESOURCE_GPU = "nvidia.com/gpu"
#: Allowed relative disagreement between the memory label and the catalog class memory.
MEMORY_TOLERANCE = 0.05
_BYTES_THRESHOLD = 1 << 24


@dataclass(frozen=True)
class GpuNode:
    """A node whose GPUs map to a catalog class."""

    name: str
    gpu_class: str
    product: str
    gpu_count: int
    memory_bytes: int | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class IgnoredNode:
    """A node that has GPU hints but cannot be used, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Inventory:
    """Usable GPU nodes by class, and the ignored ones with reasons."""

    nodes: tuple[GpuNode, ...] = ()
    ignored: tuple[IgnoredNode, ...] = ()
    known: bool = field(default=True)

    def present_classes(self) -> frozenset[str]:
        """Names of catalog classes with at least one usable node."""
        return frozenset(n.gpu_class for n in self.nodes)

    def nodes_of(self, gpu_class: str) -> list[GpuNode]:
        """Usable nodes of ``gpu_class``."""
        return [n for n in self.nodes if n.gpu_class == gpu_class]

    def summary(self) -> str:
        """One line: classes with node counts, then ignored nodes with reasons."""
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.gpu_class] = counts.get(n.gpu_class, 0) + 1
        text = ", ".join(f"{c}: {k} node(s)" for c, k in sorted(counts.items())) or "no GPU nodes"
        if self.ignored:
            text += "; ignored " + "; ".join(f"{i.name} ({i.reason})" for i in self.ignored)
        return text


def parse_memory_label(value: str) -> int | None:
    """``nvidia.com/gpu.memory`` as bytes: MiB normally, bytes from older GFD releases.

    Returns ``None`` for a missing, non-numeric or non-positive value.
    """
    try:
        number = int(value.strip())
    except (ValueError, AttributeError):
        return None
    if number <= 0:
        return None
    return number if number >= _BYTES_THRESHOLD else number * MIB


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def parse_node(
    node: Mapping[str, Any], catalog: Sequence[GPUClass]
) -> GpuNode | IgnoredNode | None:
    """Classify one Node object (a dict as the API returns it).

    Returns ``None`` for a node with no sign of NVIDIA GPUs (no GFD labels, no allocatable GPUs).
    """
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "?")
    labels: Mapping[str, str] = meta.get("labels") or {}
    status = node.get("status") or {}
    allocatable = _int((status.get("allocatable") or {}).get(RESOURCE_GPU))
    product = labels.get(LABEL_PRODUCT)
    if not product and not allocatable:
        return None
    if (node.get("spec") or {}).get("unschedulable"):
        return IgnoredNode(name, "cordoned (spec.unschedulable)")
    if not product:
        return IgnoredNode(
            name,
            f"allocatable {RESOURCE_GPU}={allocatable} but no {LABEL_PRODUCT} label "
            "(joined before the driver or GPU Feature Discovery is not running)",
        )
    if not allocatable:
        return IgnoredNode(
            name,
            f"{LABEL_PRODUCT}={product} but no allocatable {RESOURCE_GPU} "
            "(device plugin not running, or every GPU partitioned into MIG slices)",
        )
    strategy = labels.get(LABEL_MIG_STRATEGY, "")
    mig_config = labels.get(LABEL_MIG_CONFIG, "")
    is_mig_product = "-MIG-" in product.upper()
    cls = class_for_product(catalog, product)
    if is_mig_product and cls is None:
        return IgnoredNode(
            name,
            f"MIG slice {product} (mig.strategy={strategy or 'unknown'}): one {RESOURCE_GPU} is "
            "a slice, and no catalog class lists this product",
        )
    if not is_mig_product and mig_config and mig_config != "all-disabled" and strategy != "mixed":
        return IgnoredNode(
            name,
            f"{LABEL_MIG_CONFIG}={mig_config} with mig.strategy={strategy or 'unknown'}: "
            f"cannot tell what one {RESOURCE_GPU} is",
        )
    if cls is None:
        return IgnoredNode(name, f"{LABEL_PRODUCT}={product} is not in the GPU catalog")
    notes: list[str] = []
    raw_memory = labels.get(LABEL_MEMORY)
    memory = parse_memory_label(raw_memory) if raw_memory is not None else None
    if raw_memory is None:
        notes.append(f"no {LABEL_MEMORY} label: class from the product table")
    elif memory is None:
        notes.append(f"unreadable {LABEL_MEMORY}={raw_memory!r}: class from the product table")
    elif memory >= _BYTES_THRESHOLD and raw_memory.strip() == str(memory):
        notes.append(f"{LABEL_MEMORY} read as bytes (older GPU Feature Discovery)")
    if memory is not None and abs(memory - cls.memory_bytes) > MEMORY_TOLERANCE * cls.memory_bytes:
        return IgnoredNode(
            name,
            f"{LABEL_MEMORY} says {memory / MIB:.0f} MiB but {product} is "
            f"{cls.memory_bytes / MIB:.0f} MiB in class {cls.name} (mixed GPU models? labels "
            "describe the first GPU only)",
        )
    count = _int(labels.get(LABEL_COUNT))
    if count is not None and strategy != "mixed" and count != allocatable:
        return IgnoredNode(
            name,
            f"{LABEL_COUNT}={count} but allocatable {RESOURCE_GPU}={allocatable} "
            "(mixed GPU models or MIG reconfiguration in progress)",
        )
    if strategy == "mixed":
        notes.append("MIG mixed strategy: only whole GPUs counted")
    return GpuNode(name, cls.name, product, allocatable, memory, tuple(notes))


def build_inventory(nodes: Iterable[Mapping[str, Any]], catalog: Sequence[GPUClass]) -> Inventory:
    """Classify every node; nodes without GPU hints are left out of both lists."""
    used: list[GpuNode] = []
    ignored: list[IgnoredNode] = []
    for node in nodes:
        parsed = parse_node(node, catalog)
        if isinstance(parsed, GpuNode):
            used.append(parsed)
        elif isinstance(parsed, IgnoredNode):
            ignored.append(parsed)
    return Inventory(
        tuple(sorted(used, key=lambda n: n.name)), tuple(sorted(ignored, key=lambda n: n.name))
    )
