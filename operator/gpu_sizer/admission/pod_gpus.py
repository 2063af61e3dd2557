"""The GPUs a pod asks for: every kind of container and its DRA claims. Pure.

A pod gets GPUs three ways, and the pod webhook's ``Enforce`` must see all of them before it
compares the pod with a recommendation or adds a GPU limit of its own:

- **Extended resources** (``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``, ``amd.com/gpu``) in
  the ``resources`` of any container: the app containers (``spec.containers``), the init
  containers (``spec.initContainers``) and the sidecars among them (init containers with
  ``restartPolicy: Always``, which run beside the app containers for the pod's whole life).
  What a node must hold is the pod's *effective request* (Kubernetes docs, "Init Containers",
  Resource sharing within containers; KEP-753 for sidecars; ``PodRequests`` in
  ``k8s.io/component-helpers/resource/helpers.go``): the larger of (a) the app containers plus
  all sidecars and (b) for each init container in order, its own request plus the sidecars
  started before it. An extended resource's request equals its limit (it cannot be
  overcommitted), so a limit alone counts as the request.
- **DRA claims** (``spec.resourceClaims``: a ResourceClaim by name, or one made per pod from a
  ResourceClaimTemplate): the devices each claim requests of a GPU DeviceClass
  (``gpu.nvidia.com``, ``mig.nvidia.com``, NVIDIA's DRA driver). A request is
  ``exactly: {deviceClassName, allocationMode, count}`` in ``resource.k8s.io/v1`` and
  ``v1beta2`` (or ``firstAvailable``, a list of alternatives), the same fields on the request
  itself in ``v1beta1`` (Kubernetes API reference, "ResourceClaim v1 resource.k8s.io",
  DeviceRequest / ExactDeviceRequest). ``allocationMode: All`` takes every matching device,
  a number only the scheduler knows; alternatives of different counts likewise. Such a claim is
  counted as *unknown*, never as zero.

A claim's devices are allocated to the pod whether or not a container names the claim in
``resources.claims``, so every pod-level claim counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

from gpu_sizer.inventory.nodes import DRA_DEVICE_CLASSES

__all__ = [
    "GPU_RESOURCE_PREFIXES",
    "ClaimGpus",
    "claim_gpus",
    "effective_request",
    "gpu_resources_asked",
    "shape_problems",
]

#: GPU extended resources: whole GPUs and MIG slices under the ``mixed`` strategy.
GPU_RESOURCE_PREFIXES: Final = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu")
_CONTAINER_LISTS: Final = ("initContainers", "containers")


@dataclass(frozen=True)
class ClaimGpus:
    """GPU devices of one pod-level claim: ``count`` (None when it cannot be told) and why."""

    name: str
    count: int | None
    why: str = ""


def _is_object(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping)


def shape_problems(pod: Any) -> list[str]:
    """Where a pod is not shaped as Kubernetes' Pod is, in the parts the webhook reads (each
    names the field): a review sent straight to the webhook skips the API server's decoding,
    so ``spec.containers`` may be a string and ``resources`` a list. Empty: well shaped."""
    if not _is_object(pod):
        return [f"the object is {type(pod).__name__}, not a Pod"]
    problems: list[str] = []
    meta = pod.get("metadata")
    if not _is_object(meta):
        problems.append("metadata is not an object")
    else:
        for key in ("labels", "annotations"):
            value = meta.get(key)
            if value is not None and not (
                _is_object(value) and all(isinstance(v, str) for v in value.values())
            ):
                problems.append(f"metadata.{key} is not a map of strings")
    spec = pod.get("spec")
    if not _is_object(spec):
        return [*problems, "spec is not an object"]
    for key in ("nodeSelector",):
        value = spec.get(key)
        if value is not None and not _is_object(value):
            problems.append(f"spec.{key} is not an object")
    for key in (*_CONTAINER_LISTS, "resourceClaims"):
        items = spec.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            problems.append(f"spec.{key} is not a list")
            continue
        for i, item in enumerate(items):
            where = f"spec.{key}[{i}]"
            if not _is_object(item):
                problems.append(f"{where} is not an object")
                continue
            resources = item.get("resources") if key != "resourceClaims" else None
            if resources is None:
                continue
            if not _is_object(resources):
                problems.append(f"{where}.resources is not an object")
                continue
            for part in ("limits", "requests"):
                value = resources.get(part)
                if value is not None and not _is_object(value):
                    problems.append(f"{where}.resources.{part} is not an object")
    affinity = spec.get("affinity")
    if affinity is not None:
        node = affinity.get("nodeAffinity") if _is_object(affinity) else None
        required = (
            node.get("requiredDuringSchedulingIgnoredDuringExecution") if _is_object(node) else None
        )
        if not _is_object(affinity) or (node is not None and not _is_object(node)):
            problems.append("spec.affinity.nodeAffinity is not an object")
        elif required is not None and not (
            _is_object(required)
            and isinstance(required.get("nodeSelectorTerms") or [], list)
            and all(
                _is_object(t)
                and isinstance(t.get("matchExpressions") or [], list)
                and all(_is_object(e) for e in t.get("matchExpressions") or [])
                for t in required.get("nodeSelectorTerms") or []
            )
        ):
            problems.append(
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution is "
                "not a node selector"
            )
    return problems


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    return [c for c in spec.get(key) or () if _is_object(c)]


def _asked(container: Mapping[str, Any], resource: str) -> int | None:
    """The container's count of ``resource`` (limit, else request); -1 when it is not a whole
    number (a GPU cannot be split: the API server refuses it too); None when not asked."""
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(resource)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return -1
    return None


def gpu_resources_asked(spec: Mapping[str, Any]) -> set[str]:
    """Every GPU extended resource any container (app, init or sidecar) asks for."""
    return {
        key
        for list_key in _CONTAINER_LISTS
        for c in _containers(spec, list_key)
        for part in ("limits", "requests")
        for key in ((c.get("resources") or {}).get(part) or {})
        if str(key).startswith(GPU_RESOURCE_PREFIXES)
    }


def effective_request(spec: Mapping[str, Any], resource: str) -> int | None:
    """The pod's effective request of ``resource`` over its app, init and sidecar containers
    (the module docstring's rule); None when no container asks for it; -1 when one asks for a
    count that is not a whole number."""
    app = [_asked(c, resource) for c in _containers(spec, "containers")]
    init = [
        (_asked(c, resource), c.get("restartPolicy") == "Always")
        for c in _containers(spec, "initContainers")
    ]
    every = [n for n in app if n is not None] + [n for n, _ in init if n is not None]
    if not every:
        return None
    if any(n < 0 for n in every):
        return -1
    sidecars = 0
    init_peak = 0
    for count, is_sidecar in init:
        init_peak = max(init_peak, (count or 0) + sidecars)
        if is_sidecar:
            sidecars += count or 0
    return max(init_peak, sum(n or 0 for n in app) + sidecars)


def _requests(claim_spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = claim_spec.get("devices")
    requests = devices.get("requests") if _is_object(devices) else None
    return [r for r in requests or () if _is_object(r)] if isinstance(requests, list) else []


def _request_count(request: Mapping[str, Any]) -> int | str | None:
    """GPU devices one (exact) request asks for: an int, None when not of a GPU DeviceClass,
    or the reason it cannot be told."""
    cls = request.get("deviceClassName")
    if cls not in DRA_DEVICE_CLASSES:
        return None
    mode = request.get("allocationMode") or "ExactCount"
    if mode == "All":
        return f"allocationMode All of {cls} (every matching device: the scheduler's choice)"
    count = request.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        return f"count {count!r} of {cls} is not a positive whole number"
    return count


def claim_gpus(name: str, claim_spec: Any) -> ClaimGpus:
    """GPU devices a ResourceClaim's ``spec`` (or a ResourceClaimTemplate's ``spec.spec``)
    requests, as one pod-level claim ``name``."""
    if not _is_object(claim_spec):
        return ClaimGpus(name, None, "its spec is not an object")
    total = 0
    for i, request in enumerate(_requests(claim_spec)):
        alternatives: Sequence[Any]
        exact = request.get("exactly")
        if _is_object(exact):
            alternatives = [exact]
        elif isinstance(request.get("firstAvailable"), list):
            alternatives = [a for a in request["firstAvailable"] if _is_object(a)]
        else:
            alternatives = [request]  # v1beta1: the fields on the request itself
        counts = {_request_count(a) for a in alternatives}
        reasons = sorted(c for c in counts if isinstance(c, str))
        if reasons:
            return ClaimGpus(name, None, f"request {i}: {reasons[0]}")
        numbers = {c for c in counts if isinstance(c, int)}
        if len(numbers) > 1 or (numbers and None in counts):
            return ClaimGpus(
                name,
                None,
                f"request {i} lists alternatives of different GPU counts (firstAvailable): "
                "which one is allocated is the scheduler's choice",
            )
        total += next(iter(numbers), 0)
    return ClaimGpus(name, total)
