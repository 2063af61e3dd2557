"""The GPUs the cluster offers, as the Node and ResourceSlice watches show them.

GPU nodes come from NVIDIA GPU Feature Discovery labels
(:func:`gpu_sizer.inventory.nodes.parse_node`) and from DRA ResourceSlices
(:func:`gpu_sizer.inventory.dra.parse_resource_slices`); DRA's offers win where both describe a node
(:func:`gpu_sizer.inventory.dra.merge_inventory`). The cache keeps what is derived from them and
read on every decision (the classes present, how each is requested), and says what changed so that
the controller decides again only the workloads it concerns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpu_sizer.catalog import GPUClass
from gpu_sizer.inventory.dra import DraNode, merge_inventory, parse_resource_slices
from gpu_sizer.inventory.nodes import GpuNode, IgnoredNode, Inventory, MigStrategy

__all__ = ["InventoryCache", "InventoryChange"]


@dataclass(frozen=True)
class InventoryChange:
    """What a node or slice event changed.

    :param drivers: GPU classes whose nodes now report another set of NVIDIA driver majors
        (measurements taken on them are checked against the new drivers).
    :param present: whether the set of classes with at least one node changed (workloads
        waiting for a node of their class look again).
    """

    drivers: frozenset[str] = frozenset()
    present: bool = False


class InventoryCache:
    """GPU nodes and ResourceSlices seen, and the inventory derived from them.

    :param catalog: the GPU classes the operator knows (slices name their devices by product).
    """

    def __init__(self, catalog: tuple[GPUClass, ...]) -> None:
        self._catalog = catalog
        self._nodes: dict[str, GpuNode | IgnoredNode] = {}
        self._present: frozenset[str] = frozenset()
        #: MIG classes the cluster's nodes offer under the ``mixed`` strategy (see
        #: :meth:`Inventory.mig_strategy`): their Jobs and snippets use ``nvidia.com/mig-*``.
        self.mixed: frozenset[str] = frozenset()
        #: DRA: ResourceSlices by name, the per-node offers they make, the API version they are
        #: served in (None: no slice seen), and the classes Jobs claim through DRA.
        self._slices: dict[str, Mapping[str, Any]] = {}
        self._dra: dict[str, DraNode] = {}
        self.dra_version: str | None = None
        self.claimed: frozenset[str] = frozenset()

    def node_seen(self, name: str, parsed: GpuNode | IgnoredNode | None) -> InventoryChange | None:
        """Node ``name`` is now ``parsed`` (None: gone, or no GPUs); None when that did not
        change the node's entry."""
        before = self._nodes.get(name)
        if before == parsed:
            return None
        classes = frozenset(
            c for n in (before, parsed) if isinstance(n, GpuNode) for c in n.classes()
        )
        drivers_before = {c: self.drivers(c) for c in classes}
        if parsed is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = parsed
        changed = frozenset(c for c in classes if self.drivers(c) != drivers_before[c])
        return InventoryChange(changed, self._refresh())

    def slice_seen(self, name: str, body: Mapping[str, Any] | None) -> InventoryChange | None:
        """ResourceSlice ``name`` is now ``body`` (None: deleted); None when that did not
        change what the slices offer."""
        if body is None:
            self._slices.pop(name, None)
        else:
            self._slices[name] = body
            version = body.get("apiVersion")
            if isinstance(version, str) and version.startswith("resource.k8s.io/"):
                self.dra_version = version
        dra = parse_resource_slices(self._slices.values(), self._catalog)
        if dra == self._dra:
            return None
        self._dra = dra
        return InventoryChange(present=self._refresh())

    def _refresh(self) -> bool:
        """Recompute the present classes and how each is requested; True when the present
        classes changed."""
        inventory = self.inventory()
        modes = inventory.request_modes()
        present = inventory.present_classes()
        self.mixed = frozenset(c for c, mode in modes.items() if mode == "mixed")
        self.claimed = frozenset(c for c, mode in modes.items() if mode == "dra")
        if present == self._present:
            return False
        self._present = present
        return True

    def dra_nodes(self) -> Mapping[str, DraNode]:
        """What the ResourceSlices seen offer, per node."""
        return self._dra

    def products(self, gpu_class: str) -> set[str]:
        """The DRA device products that offer ``gpu_class``, over every node."""
        return {p for n in self._dra.values() for c, p in n.products if c == gpu_class}

    def inventory(self) -> Inventory:
        """The GPU nodes known (DRA ResourceSlices before GFD labels, :func:`merge_inventory`),
        and the nodes ignored with their reasons."""
        nodes = tuple(n for n in self._nodes.values() if isinstance(n, GpuNode))
        ignored = tuple(n for n in self._nodes.values() if isinstance(n, IgnoredNode))
        return merge_inventory(Inventory(nodes, ignored), self._dra)

    def present(self) -> frozenset[str]:
        """The GPU classes with at least one node in the cluster."""
        return self._present

    def mig_strategy(self, gpu_class: str) -> MigStrategy:
        """How the cluster's nodes offer ``gpu_class`` (MIG ``mixed`` or ``single``)."""
        return "mixed" if gpu_class in self.mixed else "single"

    def drivers(self, gpu_class: str) -> frozenset[str]:
        """NVIDIA driver majors (GFD labels) of the nodes offering ``gpu_class``."""
        return frozenset(
            n.driver_major
            for n in self._nodes.values()
            if isinstance(n, GpuNode) and n.driver_major and gpu_class in n.classes()
        )

    def node_driver(self, node_name: str | None) -> str:
        """The NVIDIA driver major of node ``node_name`` ("" when unknown)."""
        node = self._nodes.get(node_name or "")
        return node.driver_major if isinstance(node, GpuNode) else ""
