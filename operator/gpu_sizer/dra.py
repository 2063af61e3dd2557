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

This module parses slices into per-node offers; the operator does not watch ResourceSlices yet
(it would need ``list``/``watch`` on ``resourceslices.resource.k8s.io``), see the README.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from gpu_sizer.catalog import GPUClass, class_for_product, mig_class
from gpu_sizer.inventory import MEMORY_TOLERANCE, Offer

__all__ = [
    "NVIDIA_DRA_DRIVER",
    "DraNode",
    "parse_quantity",
    "parse_resource_slices",
]

#: The driver name NVIDIA's DRA driver publishes GPUs and MIG devices under.
NVIDIA_DRA_DRIVER: Final = "gpu.nvidia.com"
MIB: Final = 1 << 20

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
    when unreadable (exponent forms and milli units are not used for device memory)."""
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    try:
        number = Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
    except InvalidOperation:
        return None
    return int(number) if number > 0 else None


@dataclass(frozen=True)
class DraNode:
    """What a node's ResourceSlices offer, by class, and the devices left out with why."""

    name: str
    offers: tuple[Offer, ...]
    ignored: tuple[str, ...] = ()

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


def parse_resource_slices(
    slices: Iterable[Mapping[str, Any]], catalog: Sequence[GPUClass]
) -> dict[str, DraNode]:
    """Per node, the classes its ``gpu.nvidia.com`` devices offer (one ``Offer`` per class, with
    the device count; the resource is the DRA device class ``gpu.nvidia.com`` /
    ``mig.nvidia.com``, claimed through a ResourceClaim rather than an extended resource)."""
    counts: dict[str, dict[tuple[str, str], int]] = {}
    ignored: dict[str, list[str]] = {}
    for item in slices:
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
    return {
        node: DraNode(
            node,
            tuple(Offer(c, n, r) for (c, r), n in sorted(per_node.items())),
            tuple(ignored.get(node, ())),
        )
        for node, per_node in sorted(counts.items())
    }
