"""GPU inventory from DRA ResourceSlices (``resource.k8s.io/v1``): per-device truth. Pure.

With Dynamic Resource Allocation, NVIDIA's DRA driver (``gpu.nvidia.com``, k8s-dra-driver-gpu)
publishes one ResourceSlice per node and pool, listing every device with typed attributes and
capacities, e.g. (a public ``kubectl get resourceslices -o yaml``, trimmed)::

    spec:
      driver: gpu.nvidia.com
      nodeName: node-1
      devices:
      - name: gpu-0
        attributes:
          type: {string: gpu}              # gpu | mig (| other device kinds, ignored here)
          productName: {string: NVIDIA A100-SXM4-80GB}
          profile: {string: 1g.10gb}       # MIG devices only
        capacity:
          memory: {value: 80Gi}

Unlike GPU Feature Discovery's node labels, which describe a node's first GPU only, every device
is described: a node with an 80 GB and a 40 GB card reads as one of each here. The product name
becomes a catalog class the way GFD turns it into a label (spaces to dashes), MIG devices map to
the MIG class of their parent product and ``profile``, and the published memory is checked
against the class (5 % tolerance, as for labels). Attribute names may carry the driver's domain
(``gpu.nvidia.com/productName``); both forms are read.

Attribute and capacity names follow NVIDIA k8s-dra-driver-gpu, ``cmd/gpu-kubelet-plugin/
deviceinfo.go`` (``GpuInfo.GetDevice``: ``type`` "gpu", ``productName``, capacity ``memory`` in
bytes from NVML; ``MigDeviceInfo.GetDevice``: ``type`` "mig", ``profile``, the parent's
``productName``, capacity ``memory`` = the GPU instance profile's MiB). ``resource.k8s.io/v1beta1``
slices nest both under ``basic``; ``v1`` puts them on the device itself: both are read.

API versions: NVIDIA's driver publishes through ``k8s.io/api/resource/v1`` in current releases
(``deviceinfo.go`` imports ``resourceapi "k8s.io/api/resource/v1"``; earlier releases, and its
quickstart specs such as ``demo/specs/quickstart/gpu-test7.yaml``, use ``v1beta1``). Kubernetes
serves ``resource.k8s.io/v1beta1`` from 1.32, ``v1beta2`` from 1.33 (beta APIs, off unless enabled
with ``--runtime-config``) and ``v1`` from 1.34 (on by default; ``k8s.io/api`` v0.33 has no
``resource/v1`` package). The operator watches ResourceSlices without naming a version, so kopf
reads the group's preferred version from discovery, and writes ResourceClaimTemplates in the
version its slices came in (:func:`claim_template`): ``v1beta1`` puts ``deviceClassName``,
``selectors`` and ``count`` on the request itself, ``v1beta2`` and ``v1`` under ``exactly``.

Pools and generations: a driver publishes each pool (NVIDIA's: one per node) as one or more
slices carrying ``spec.pool: {name, generation, resourceSliceCount}``. When it republishes a
pool it writes the new slices under a higher ``generation`` and deletes the old ones, so for a
while both are visible; consumers must use only the slices of the newest generation of each
pool (Kubernetes API reference, "ResourceSlice v1", ``ResourcePool.generation``: "Combined with
the pool name, this is used to determine whether a slice is outdated"; the scheduler's allocator
does so in ``k8s.io/dynamic-resource-allocation/structured``, ``GatherPools``). Counting both
would see every device twice (8 GPUs as 16) during a rollover. A newest generation with fewer
slices than ``resourceSliceCount`` is counted as far as it is visible (the allocator still
allocates exact counts from it).

The operator merges the slices into the node inventory (:func:`merge_inventory`): a node its
slices describe is read from them instead of its GPU Feature Discovery labels, and a measurement
Job for a class offered through DRA claims one device per GPU through a ResourceClaimTemplate
whose CEL selector names the product (and MIG profile) seen in the slices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpu_sizer.catalog import GPUClass, class_for_product, mig_class
from gpu_sizer.inventory.nodes import (
    DRA_DEVICE_CLASSES,
    MEMORY_TOLERANCE,
    GpuNode,
    IgnoredNode,
    Inventory,
    Offer,
    parse_quantity,
)

__all__ = [
    "DEVICE_CLASSES",
    "NVIDIA_DRA_DRIVER",
    "DraNode",
    "claim_template",
    "device_selector",
    "merge_inventory",
    "newest_generation",
    "parse_quantity",
    "parse_resource_slices",
]

#: The driver name NVIDIA's DRA driver publishes GPUs and MIG devices under.
NVIDIA_DRA_DRIVER: Final = "gpu.nvidia.com"
MIB: Final = 1 << 20
#: The DeviceClasses NVIDIA's driver chart creates (``deviceclass-gpu.yaml``/``deviceclass-mig.
#: yaml``: ``type == 'gpu'`` / ``type == 'mig'`` devices of driver ``gpu.nvidia.com``).
DEVICE_CLASSES: Final = DRA_DEVICE_CLASSES


@dataclass(frozen=True)
class DraNode:
    """What a node's ResourceSlices offer, by class, and the devices left out with why."""

    name: str
    offers: tuple[Offer, ...]
    ignored: tuple[str, ...] = ()
    #: ``(class, productName)`` pairs seen on the node's devices (for claim selectors).
    products: tuple[tuple[str, str], ...] = ()

    def classes(self) -> frozenset[str]:
        """Every class the node offers."""
        return frozenset(o.gpu_class for o in self.offers)


def _basic(device: Mapping[str, Any]) -> Mapping[str, Any]:
    basic = device.get("basic")
    return basic if isinstance(basic, Mapping) else device


def _attr(device: Mapping[str, Any], name: str) -> Any:
    attrs = _basic(device).get("attributes") or {}
    raw = attrs.get(name, attrs.get(f"{NVIDIA_DRA_DRIVER}/{name}"))
    if isinstance(raw, Mapping):
        for kind in ("string", "int", "bool", "version"):
            if kind in raw:
                return raw[kind]
    return None


def _device_class(device: Mapping[str, Any], catalog: Sequence[GPUClass]) -> GPUClass | str | None:
    """The device's class, why it has none, or ``None`` for a device that is not a GPU or MIG
    device (other device kinds the driver may publish)."""
    kind = _attr(device, "type")
    if kind not in ("gpu", "mig"):
        return None
    product = _attr(device, "productName")
    if not isinstance(product, str) or not product:
        return "no productName attribute"
    whole = class_for_product(catalog, product.replace(" ", "-"))
    if kind == "mig":
        profile = _attr(device, "profile")
        if whole is None:
            return f"MIG device of {product!r}, which is not in the catalog"
        cls = mig_class(catalog, whole.name, str(profile))
        if cls is None:
            return f"MIG profile {profile!r} of {whole.name} is not in the catalog"
    else:
        if whole is None:
            return f"productName {product!r} is not in the catalog"
        cls = whole
    capacity = _basic(device).get("capacity") or {}
    memory = parse_quantity((capacity.get("memory") or {}).get("value"))
    if memory is not None and abs(memory - cls.memory_bytes) > MEMORY_TOLERANCE * cls.memory_bytes:
        return (
            f"capacity memory {memory / MIB:.0f} MiB but {cls.name} is "
            f"{cls.memory_bytes / MIB:.0f} MiB"
        )
    return cls


def _pool(item: Mapping[str, Any]) -> tuple[tuple[str, str], int] | None:
    """``((driver, pool name), generation)`` of a slice (a pool's name is unique per driver),
    or None when it names no pool."""
    spec = item.get("spec") or {}
    pool = spec.get("pool") if isinstance(spec, Mapping) else None
    if not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
        return None
    generation = pool.get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int):
        generation = 0
    return (str(spec.get("driver")), pool["name"]), generation


def newest_generation(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The slices of the newest ``spec.pool.generation`` of each pool (driver and pool name);
    slices naming no pool are kept as they are."""
    listed = [s for s in slices if isinstance(s, Mapping)]
    newest: dict[tuple[str, str], int] = {}
    for item in listed:
        found = _pool(item)
        if found is not None:
            newest[found[0]] = max(newest.get(found[0], found[1]), found[1])
    return [
        item for item in listed if (found := _pool(item)) is None or found[1] == newest[found[0]]
    ]


def parse_resource_slices(
    slices: Iterable[Mapping[str, Any]], catalog: Sequence[GPUClass]
) -> dict[str, DraNode]:
    """Per node, the classes its ``gpu.nvidia.com`` devices offer (one ``Offer`` per class, with
    the device count; the resource is the DRA device class ``gpu.nvidia.com`` /
    ``mig.nvidia.com``, claimed through a ResourceClaim rather than an extended resource). Only
    the newest generation of each pool counts (:func:`newest_generation`)."""
    counts: dict[str, dict[tuple[str, str], int]] = {}
    ignored: dict[str, list[str]] = {}
    products: dict[str, set[tuple[str, str]]] = {}
    for item in newest_generation(slices):
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != NVIDIA_DRA_DRIVER or not isinstance(node, str) or not node:
            continue
        per_node = counts.setdefault(node, {})
        for device in spec.get("devices") or ():
            if not isinstance(device, Mapping):
                continue
            found = _device_class(device, catalog)
            if found is None:
                continue
            if isinstance(found, str):
                ignored.setdefault(node, []).append(f"{device.get('name', '?')}: {found}")
                continue
            resource = "mig.nvidia.com" if found.is_mig else "gpu.nvidia.com"
            key = (found.name, resource)
            per_node[key] = per_node.get(key, 0) + 1
            products.setdefault(node, set()).add((found.name, str(_attr(device, "productName"))))
    return {
        node: DraNode(
            node,
            tuple(Offer(c, n, r) for (c, r), n in sorted(per_node.items())),
            tuple(ignored.get(node, ())),
            tuple(sorted(products.get(node, ()))),
        )
        for node, per_node in sorted(counts.items())
    }


def merge_inventory(inventory: Inventory, dra: Mapping[str, DraNode]) -> Inventory:
    """``inventory`` (from Node labels) with every node its ResourceSlices describe read from
    them instead: per-device truth beats labels that describe the first GPU only. A node the
    labels left out (mixed models, MIG without a known strategy) is used when its slices offer a
    catalog class; a node whose slices offer nothing keeps what its labels say. Cordoned nodes
    and nodes labelled ``gpusizer.dev/ignore`` stay ignored (the label is the operator's own
    opt-out; a cordon is the platform's)."""
    if not dra:
        return inventory
    kept_ignored: list[IgnoredNode] = []
    held: set[str] = set()
    for node in inventory.ignored:
        if node.name in dra and dra[node.name].offers and not _deliberate(node):
            continue
        kept_ignored.append(node)
        held.add(node.name)
    nodes: dict[str, GpuNode] = {n.name: n for n in inventory.nodes}
    for name, found in dra.items():
        if not found.offers or name in held:
            continue
        first = found.offers[0]
        notes: tuple[str, ...] = (
            "read from DRA ResourceSlices (driver gpu.nvidia.com), not GFD labels",
        )
        if found.ignored:
            notes += ("devices left out: " + "; ".join(found.ignored),)
        nodes[name] = GpuNode(
            name,
            first.gpu_class,
            ", ".join(sorted({p for _, p in found.products})),
            first.count,
            None,
            notes,
            found.offers,
            "",
        )
    return Inventory(
        tuple(sorted(nodes.values(), key=lambda n: n.name)),
        tuple(kept_ignored),
        inventory.known,
    )


def _deliberate(node: IgnoredNode) -> bool:
    return node.reason.startswith(("labelled gpusizer.dev/ignore", "cordoned"))


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def device_selector(cls: GPUClass, products: Iterable[str]) -> str:
    """The CEL expression selecting a device of ``cls`` among ``gpu.nvidia.com``'s: of its
    ``type`` (``gpu`` or ``mig``), its ``productName`` one of ``products`` (as the slices spell
    it) and, for a MIG class, its ``profile`` the class's. Attributes are read under the
    driver's domain, as its own DeviceClasses do (``device.attributes['gpu.nvidia.com'].type``).
    """
    attrs = f"device.attributes[{_quote(NVIDIA_DRA_DRIVER)}]"
    names = ", ".join(_quote(p) for p in sorted(set(products)))
    # Every attribute is tested for presence first: reading a missing one is an evaluation
    # error, not false, in Kubernetes' CEL (a whole GPU has no ``profile``).
    kind = "mig" if cls.is_mig else "gpu"
    terms = [
        f"'type' in {attrs}",
        f"{attrs}.type == {_quote(kind)}",
        f"'productName' in {attrs}",
        f"{attrs}.productName in [{names}]",
    ]
    if cls.is_mig:
        terms += [f"'profile' in {attrs}", f"{attrs}.profile == {_quote(cls.mig_profile)}"]
    return " && ".join(terms)


def claim_template(
    api_version: str,
    name: str,
    namespace: str,
    owner: Mapping[str, Any] | None,
    cls: GPUClass,
    count: int,
    products: Iterable[str],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ``ResourceClaimTemplate`` asking for ``count`` devices of ``cls`` (request ``gpu``,
    DeviceClass ``gpu.nvidia.com`` or ``mig.nvidia.com``, :func:`device_selector`), owned by
    ``owner`` (an ownerReference: the GPUWorkload; None for a template in another namespace
    than its workload's, which cannot be owned across namespaces), in ``api_version``'s request
    shape."""
    request: dict[str, Any] = {
        "deviceClassName": "mig.nvidia.com" if cls.is_mig else "gpu.nvidia.com",
        "selectors": [{"cel": {"expression": device_selector(cls, products)}}],
        "allocationMode": "ExactCount",
        "count": count,
    }
    if api_version.endswith("/v1beta1"):
        requests = [{"name": "gpu", **request}]
    else:
        requests = [{"name": "gpu", "exactly": request}]
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": meta,
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
