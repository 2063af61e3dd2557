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
- MIG, ``single`` strategy: every GPU is cut into the same profile, one ``nvidia.com/gpu`` is a
  slice, and the product label gets a ``-MIG-<profile>`` suffix; it maps to the MIG class of that
  profile (catalog :data:`~gpu_sizer.catalog.MIG_CLASSES`), ``gpu.memory`` is the slice's.
- MIG, ``mixed`` strategy (or any node advertising ``nvidia.com/mig-<profile>`` resources): each
  profile is its own resource. The node offers each advertised profile as its MIG class (checked
  against GFD's ``nvidia.com/mig-<profile>.memory``) and whole GPUs only as far as
  ``nvidia.com/gpu`` is advertised *and* ``nvidia.com/gpu.count`` leaves GPUs the slices do not
  fill. The device plugin can keep a stale ``nvidia.com/gpu`` capacity next to the slices
  (NVIDIA/gpu-operator#637: ``nvidia.com/gpu: 2`` with ``mig-1g.10gb: 6`` and
  ``mig-2g.20gb: 4`` on two A100-80GB, i.e. both GPUs fully cut); that count is capped to what
  ``gpu.count`` minus the slices allows, and said in the node's notes.
- A node with several GPU models carries the *first* GPU's labels only (GFD labels one product
  per node). What labels can show is checked: ``gpu.memory`` disagreeing with the product's
  catalog memory by more than 5 %, and ``gpu.count`` disagreeing with the allocatable count, make
  the node ignored. What they cannot show: an 80 GB and a 40 GB card with the 80 GB card first
  read as two 80 GB cards, and nothing on the Node object tells otherwise. Label such a node
  ``gpusizer.dev/ignore=true`` to leave it out.
- A node that joined before the driver has ``nvidia.com/gpu`` allocatable but no GFD labels; it is
  ignored until GFD labels it. A node with a product but no memory label falls back to the
  product-to-class table of the catalog.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Final, Literal

from gpu_sizer.api.record import driver_major
from gpu_sizer.catalog import GPUClass, class_for_product, mig_class

#: How a pod asks for a class: ``nvidia.com/gpu`` (``single``), ``nvidia.com/mig-<profile>``
#: (``mixed``), or a DRA ResourceClaim (``dra``).
RequestMode = Literal["single", "mixed", "dra"]
#: The NVIDIA GPU Operator's MIG strategy on a node: ``single`` offers a slice as
#: ``nvidia.com/gpu``, ``mixed`` as ``nvidia.com/mig-<profile>``. The cluster decides it, so it
#: is the inventory's; placement reads it to name the resource a pod requests.
MigStrategy = Literal["single", "mixed"]

__all__ = [
    "ClassCapacity",
    "GpuNode",
    "IgnoredNode",
    "Inventory",
    "MigStrategy",
    "Offer",
    "RequestMode",
    "build_inventory",
    "parse_memory_label",
    "parse_node",
    "parse_quantity",
]

MIB = 1 << 20
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_COUNT = "nvidia.com/gpu.count"
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
#: The operator's own opt-out for nodes whose labels cannot be trusted (mixed GPU models).
LABEL_IGNORE = "gpusizer.dev/ignore"
RESOURCE_GPU = "nvidia.com/gpu"
RESOURCE_MIG_PREFIX = "nvidia.com/mig-"
#: DRA DeviceClasses of NVIDIA's driver: an ``Offer`` with one of these as its resource is
#: claimed through a ResourceClaim (:mod:`gpu_sizer.inventory.dra`), not requested as a resource.
DRA_DEVICE_CLASSES = frozenset({"gpu.nvidia.com", "mig.nvidia.com"})
#: Allowed relative disagreement between the memory label and the catalog class memory.
MEMORY_TOLERANCE = 0.05
_BYTES_THRESHOLD = 1 << 24
#: MIG compute slices and memory slices of one GPU (A100, H100, H200: 7 and 8).
_COMPUTE_SLICES = 7
_MEMORY_SLICES = 8


_SUFFIX: Final[dict[str, int]] = {
    "": 1,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}
_QUANTITY = re.compile(r"^([0-9.]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")


def parse_quantity(value: Any) -> int | None:
    """A Kubernetes quantity (``80Gi``, ``81920Mi``, ``85899345920``) as an integer; ``None``
    when unreadable (exponent forms and milli units are not used for memory)."""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        number = Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation:
        return None
    return int(number) if number > 0 else None


@dataclass(frozen=True)
class Offer:
    """What a node offers of one class: ``count`` devices requested as ``resource``
    (``nvidia.com/gpu``, or ``nvidia.com/mig-<profile>`` under the MIG ``mixed`` strategy)."""

    gpu_class: str
    count: int
    resource: str = RESOURCE_GPU


@dataclass(frozen=True, slots=True)
class ClassCapacity:
    """What the cluster's nodes offer of one class: GPUs of its largest node, all its GPUs and
    its nodes."""

    gpus_per_node: int
    gpus: int
    nodes: int


@dataclass(frozen=True)
class GpuNode:
    """A node whose GPUs map to catalog classes.

    ``gpu_class`` and ``gpu_count`` are the first offer (whole GPUs when there are any);
    ``offers`` lists every class the node offers (MIG ``mixed``: one per advertised profile).
    """

    name: str
    gpu_class: str
    product: str
    gpu_count: int
    memory_bytes: int | None
    notes: tuple[str, ...] = ()
    offers: tuple[Offer, ...] = ()
    mig_strategy: str = ""
    #: NVIDIA driver major version from GFD's labels (see
    #: :func:`gpu_sizer.api.record.driver_major`); empty when unknown. Part of the measurement
    #: key of what runs on this node.
    driver_major: str = ""
    #: ``status.allocatable.memory`` in bytes: the host memory the kubelet lets pods request
    #: (capacity less system and kube reserved and the eviction threshold); ``None`` if absent.
    host_memory_bytes: int | None = None

    def classes(self) -> frozenset[str]:
        """Every class the node offers."""
        return frozenset(o.gpu_class for o in self.offers) or frozenset({self.gpu_class})


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
        """Names of catalog classes offered by at least one usable node."""
        return frozenset(c for n in self.nodes for c in n.classes())

    def capacity(self) -> dict[str, ClassCapacity]:
        """Per present class: GPUs of its largest node, all its GPUs and its nodes (what a job
        wider than one node can be placed on, :func:`gpu_sizer.sizing.workers.bound_problem`)."""
        out: dict[str, ClassCapacity] = {}
        for n in self.nodes:
            for o in n.offers or (Offer(n.gpu_class, n.gpu_count),):
                have = out.get(o.gpu_class, ClassCapacity(0, 0, 0))
                out[o.gpu_class] = ClassCapacity(
                    max(have.gpus_per_node, o.count), have.gpus + o.count, have.nodes + 1
                )
        return out

    def host_memory(self) -> dict[str, int]:
        """Per present class, the most host memory one of its nodes lets a pod request
        (``status.allocatable.memory``, bytes): what a pod holding offloaded weights can get.
        Classes none of whose nodes report it are left out (not checked)."""
        out: dict[str, int] = {}
        for n in self.nodes:
            if n.host_memory_bytes is None:
                continue
            for c in n.classes():
                out[c] = max(out.get(c, 0), n.host_memory_bytes)
        return out

    def nodes_of(self, gpu_class: str) -> list[GpuNode]:
        """Usable nodes offering ``gpu_class``."""
        return [n for n in self.nodes if gpu_class in n.classes()]

    def request_modes(self) -> dict[str, RequestMode]:
        """How a pod asks for each present class, in one pass over the offers: ``dra`` when
        more of its devices are offered by ResourceSlices (:mod:`gpu_sizer.inventory.dra`, claimed
        through a ResourceClaim) than by device plugins; else ``mixed`` when more are advertised as
        ``nvidia.com/mig-<profile>`` (MIG ``mixed`` strategy) than as ``nvidia.com/gpu``; else
        ``single`` (whole GPUs, and MIG slices under the ``single`` strategy). One pod asks for
        one resource, so a class offered several ways is requested the way most of its devices
        are; the others stay idle for it."""
        counts: dict[str, list[int]] = {}
        for node in self.nodes:
            for offer in node.offers:
                per = counts.setdefault(offer.gpu_class, [0, 0, 0])  # single, mixed, dra
                if offer.resource in DRA_DEVICE_CLASSES:
                    per[2] += offer.count
                elif offer.resource.startswith(RESOURCE_MIG_PREFIX):
                    per[1] += offer.count
                else:
                    per[0] += offer.count
        modes: dict[str, RequestMode] = {}
        for cls, (single, mixed, dra) in counts.items():
            if dra > single + mixed:
                modes[cls] = "dra"
            else:
                modes[cls] = "mixed" if mixed > single else "single"
        return modes

    def mig_strategy(self, gpu_class: str) -> MigStrategy:
        """How the cluster's nodes offer a MIG class outside DRA (:meth:`request_modes`):
        ``mixed`` or ``single`` (also for whole GPUs and absent classes)."""
        return "mixed" if self.request_modes().get(gpu_class) == "mixed" else "single"

    def through_dra(self, gpu_class: str) -> bool:
        """Whether a Job for ``gpu_class`` claims a device through DRA (:meth:`request_modes`)
        rather than requesting an extended resource."""
        return self.request_modes().get(gpu_class) == "dra"

    def summary(self) -> str:
        """One line: classes with node counts, then ignored nodes with reasons."""
        counts: dict[str, int] = {}
        for n in self.nodes:
            for c in n.classes():
                counts[c] = counts.get(c, 0) + 1
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


def _memory_disagrees(memory: int | None, cls: GPUClass) -> bool:
    return (
        memory is not None and abs(memory - cls.memory_bytes) > MEMORY_TOLERANCE * cls.memory_bytes
    )


def _mig_slices(allocatable: Mapping[str, Any]) -> dict[str, int]:
    """``{profile: count}`` of the advertised MIG resources with a positive count."""
    out: dict[str, int] = {}
    for key, value in allocatable.items():
        if isinstance(key, str) and key.startswith(RESOURCE_MIG_PREFIX):
            count = _int(value)
            if count and count > 0:
                out[key.removeprefix(RESOURCE_MIG_PREFIX)] = count
    return out


def _gpus_filled(slices: Mapping[str, int], classes: Mapping[str, GPUClass]) -> int:
    """The fewest whole GPUs the advertised slices can sit on: the larger of the compute bound
    (profile ``<n>g``, 7 per GPU) and the memory bound (eighths of the parent's memory)."""
    compute = 0
    memory = 0
    for profile, count in slices.items():
        head = profile.split("g.", 1)[0]
        compute += count * (int(head) if head.isdigit() else 1)
        cls = classes.get(profile)
        eighths = 1
        if cls is not None and cls.memory_bytes > 0:
            # 9.50 GiB of a 79.0 GiB 7g.80gb is 1/8; 39.25 is 4/8 (MIG User Guide fractions).
            whole = max(
                (c.memory_bytes for c in classes.values() if c.mig_compute_slices == 7),
                default=0,
            )
            if whole:
                eighths = max(1, round(_MEMORY_SLICES * cls.memory_bytes / whole))
        memory += count * eighths
    return max(math.ceil(compute / _COMPUTE_SLICES), math.ceil(memory / _MEMORY_SLICES))


def _parse_mixed(
    name: str,
    product: str,
    labels: Mapping[str, str],
    whole: int,
    slices: Mapping[str, int],
    strategy: str,
    catalog: Sequence[GPUClass],
) -> GpuNode | IgnoredNode:
    """A node under the MIG ``mixed`` strategy: whole GPUs and one offer per MIG profile."""
    notes: list[str] = []
    if strategy != "mixed":
        notes.append(
            f"advertises MIG resources ({', '.join(sorted(slices))}) with "
            f"{LABEL_MIG_STRATEGY}={strategy or 'unset'}: read as the mixed strategy"
        )
    parent = class_for_product(catalog, product)
    offers: list[Offer] = []
    skipped: list[str] = []
    profile_classes: dict[str, GPUClass] = {}
    if parent is not None:
        for c in catalog:
            if c.parent == parent.name:
                profile_classes[c.mig_profile] = c
    for profile, count in sorted(slices.items()):
        cls = mig_class(catalog, parent.name, profile) if parent is not None else None
        if cls is None:
            skipped.append(f"{RESOURCE_MIG_PREFIX}{profile}: no catalog class")
            continue
        raw = labels.get(f"nvidia.com/mig-{profile}.memory")
        memory = parse_memory_label(raw) if raw is not None else None
        if _memory_disagrees(memory, cls):
            skipped.append(
                f"{RESOURCE_MIG_PREFIX}{profile}: nvidia.com/mig-{profile}.memory says "
                f"{(memory or 0) / MIB:.0f} MiB, class {cls.name} is "
                f"{cls.memory_bytes / MIB:.0f} MiB"
            )
            continue
        offers.append(Offer(cls.name, count, cls.mig_resource))
    if skipped:
        notes.append("MIG slices not offered: " + "; ".join(skipped))
    physical = _int(labels.get(LABEL_COUNT))
    filled = _gpus_filled(slices, profile_classes)
    if whole and slices:
        if physical is None:
            notes.append(
                f"allocatable {RESOURCE_GPU}={whole} next to MIG slices and no {LABEL_COUNT} "
                "label: whole GPUs not counted (cannot tell them from stale capacity)"
            )
            whole = 0
        elif whole > physical - filled:
            capped = max(0, physical - filled)
            notes.append(
                f"allocatable {RESOURCE_GPU}={whole} but {LABEL_COUNT}={physical} and the MIG "
                f"slices advertised fill at least {filled} GPU(s): {capped} whole GPU(s) counted "
                "(stale device-plugin capacity, as in NVIDIA/gpu-operator#637)"
            )
            whole = capped
    if whole:
        if parent is None:
            notes.append(f"{whole} whole GPU(s): {LABEL_PRODUCT}={product} is not in the catalog")
        else:
            raw_memory = labels.get(LABEL_MEMORY)
            memory = parse_memory_label(raw_memory) if raw_memory is not None else None
            if _memory_disagrees(memory, parent):
                notes.append(
                    f"whole GPUs not counted: {LABEL_MEMORY} says {(memory or 0) / MIB:.0f} MiB "
                    f"but {parent.name} is {parent.memory_bytes / MIB:.0f} MiB"
                )
            else:
                offers.insert(0, Offer(parent.name, whole))
    notes.append("MIG mixed strategy: whole GPUs and each MIG profile offered separately")
    if not offers:
        return IgnoredNode(
            name,
            f"MIG mixed strategy on {product}: nothing usable offered ("
            + "; ".join(notes[:-1] or [f"no whole {RESOURCE_GPU} and no MIG slice"])
            + ")",
        )
    first = offers[0]
    return GpuNode(
        name,
        first.gpu_class,
        product,
        first.count,
        None,
        tuple(notes),
        tuple(offers),
        "mixed",
    )


def parse_node(
    node: Mapping[str, Any], catalog: Sequence[GPUClass]
) -> GpuNode | IgnoredNode | None:
    """Classify one Node object (a dict as the API returns it).

    Returns ``None`` for a node with no sign of NVIDIA GPUs (no GFD labels, no allocatable GPUs
    or MIG slices). A usable node carries its GFD driver major version.
    """
    parsed = _classify(node, catalog)
    if isinstance(parsed, GpuNode):
        labels = (node.get("metadata") or {}).get("labels") or {}
        major = driver_major(labels) if isinstance(labels, Mapping) else None
        alloc = (node.get("status") or {}).get("allocatable") or {}
        host = parse_quantity(alloc.get("memory")) if isinstance(alloc, Mapping) else None
        parsed = replace(parsed, driver_major=major or "", host_memory_bytes=host)
    return parsed


def _classify(node: Mapping[str, Any], catalog: Sequence[GPUClass]) -> GpuNode | IgnoredNode | None:
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "?")
    labels: Mapping[str, str] = meta.get("labels") or {}
    status = node.get("status") or {}
    alloc: Mapping[str, Any] = status.get("allocatable") or {}
    allocatable = _int(alloc.get(RESOURCE_GPU))
    slices = _mig_slices(alloc)
    product = labels.get(LABEL_PRODUCT)
    if not product and not allocatable and not slices:
        return None
    if str(labels.get(LABEL_IGNORE, "")).lower() == "true":
        return IgnoredNode(name, f"labelled {LABEL_IGNORE}=true")
    if (node.get("spec") or {}).get("unschedulable"):
        return IgnoredNode(name, "cordoned (spec.unschedulable)")
    if not product:
        return IgnoredNode(
            name,
            f"allocatable {RESOURCE_GPU}={allocatable or 0} but no {LABEL_PRODUCT} label "
            "(joined before the driver or GPU Feature Discovery is not running)",
        )
    strategy = labels.get(LABEL_MIG_STRATEGY, "")
    is_mig_product = "-MIG-" in product.upper()
    if (strategy == "mixed" or slices) and not is_mig_product:
        return _parse_mixed(name, product, labels, allocatable or 0, slices, strategy, catalog)
    if not allocatable:
        return IgnoredNode(
            name,
            f"{LABEL_PRODUCT}={product} but no allocatable {RESOURCE_GPU} "
            "(device plugin not running, or every GPU partitioned into MIG slices)",
        )
    mig_config = labels.get(LABEL_MIG_CONFIG, "")
    cls = class_for_product(catalog, product)
    if is_mig_product and cls is None:
        return IgnoredNode(
            name,
            f"MIG slice {product} (mig.strategy={strategy or 'unknown'}): one {RESOURCE_GPU} is "
            "a slice, and no catalog class lists this product",
        )
    if not is_mig_product and mig_config and mig_config != "all-disabled":
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
    if _memory_disagrees(memory, cls):
        return IgnoredNode(
            name,
            f"{LABEL_MEMORY} says {(memory or 0) / MIB:.0f} MiB but {product} is "
            f"{cls.memory_bytes / MIB:.0f} MiB in class {cls.name} (mixed GPU models? labels "
            "describe the first GPU only)",
        )
    count = _int(labels.get(LABEL_COUNT))
    if count is not None and count != allocatable:
        return IgnoredNode(
            name,
            f"{LABEL_COUNT}={count} but allocatable {RESOURCE_GPU}={allocatable} "
            "(mixed GPU models or MIG reconfiguration in progress)",
        )
    if cls.is_mig:
        notes.append(f"MIG single strategy: one {RESOURCE_GPU} is a {cls.mig_profile} slice")
    return GpuNode(
        name,
        cls.name,
        product,
        allocatable,
        memory,
        tuple(notes),
        (Offer(cls.name, allocatable),),
        "single" if cls.is_mig else "",
    )


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
