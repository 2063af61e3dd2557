"""Pod admission: apply a GPUWorkload's recommendation to the pods that opt in. Pure decisions.

A pod opts in with the label ``gpusizer.dev/workload: NAME``, naming a GPUWorkload in its own
namespace; the label goes in any pod template (Deployment, StatefulSet, Job, LeaderWorkerSet,
KServe). The chart's webhook configuration sends only such pods here (an ``objectSelector`` on
the label, ``failurePolicy: Ignore``), on CREATE. What the webhook does, in the manner of the
Vertical Pod Autoscaler's admission controller for CPU and memory:

- Required node affinity for the recommended class (``recommendation.nodeAffinity``, else
  :func:`gpu_sizer.placement.node_affinity`): its requirement is ANDed into every existing
  ``nodeSelectorTerms`` entry (terms are ORed, so each keeps its meaning and gains the class), or
  becomes the only term.
- The GPU limit (``recommendation.gpuCount`` of the resource ``recommendation.resources`` names:
  ``nvidia.com/gpu``, or ``nvidia.com/mig-<profile>`` where the class's nodes use the MIG
  ``mixed`` strategy) on the container named by the annotation ``gpusizer.dev/container``, else
  the first container, when no container of the pod sets that resource.
- Annotations saying what was applied: ``gpusizer.dev/gpu-class``, ``gpusizer.dev/basis``,
  ``gpusizer.dev/spec-hash``.

The operator's own measurement pods carry the label too (a measurement Job's pods are labelled
with their workload) and are left alone (:func:`is_measurement_pod`): they run on the class being
measured, which is not the recommendation yet, and they must run before the workload can be
Ready, so enforcing on them would deny every measurement in an ``Enforce`` namespace. The chart's
objectSelector keeps them away from the webhook (``app.kubernetes.io/managed-by NotIn
[gpu-sizer]``); the handler checks again for configurations made by hand. A tenant who sets that
label on a pod escapes the webhook, as one who leaves out ``gpusizer.dev/workload`` does: opting
in is the pod's own choice.

Problems (namespace policy ``podEnforcement``, :class:`~.policy.PodEnforcement`): the
GPUWorkload is missing or could not be read, is ``Rejected``, is not ``Ready`` for its current
spec, or the pod's own GPU request or product node selector contradicts the recommendation.
``Enforce`` denies the pod with every problem and its fix, ``Warn`` admits it with admission
warnings, ``Off`` admits it silently. The recommendation, when there is one, is applied in every
mode except a denial.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import ValidationError

from gpu_sizer.admission.policy import PodEnforcement
from gpu_sizer.api import RecommendationStatus
from gpu_sizer.catalog import GPUClass
from gpu_sizer.measurement.job import LABEL_MANAGED_BY, MANAGED_BY
from gpu_sizer.placement import (
    ANNOTATION_BASIS,
    ANNOTATION_CLASS,
    ANNOTATION_SPEC_HASH,
    WORKLOAD_LABEL,
    gpu_resource,
    node_affinity,
)

__all__ = [
    "ANNOTATION_CONTAINER",
    "PodAnswer",
    "WorkloadFetcher",
    "is_measurement_pod",
    "kubernetes_workload_fetcher",
    "review_pod",
]

#: Names the container that gets the GPU limit (default: the first container).
ANNOTATION_CONTAINER = "gpusizer.dev/container"
#: GPU extended resources: whole GPUs and MIG slices under the ``mixed`` strategy.
_GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu")
#: Blocking function returning the GPUWorkload ``namespace/name`` as a dict, ``None`` when it
#: does not exist; raises on any other failure (run in a worker thread).
WorkloadFetcher = Callable[[str, str], Mapping[str, Any] | None]


@dataclass(frozen=True)
class PodAnswer:
    """The verdict on one pod: denied with ``message``, or allowed with ``warnings`` and, when
    something was applied, the mutated ``pod``."""

    allowed: bool
    message: str = ""
    warnings: tuple[str, ...] = ()
    pod: dict[str, Any] | None = None
    problems: tuple[str, ...] = field(default=(), repr=False)


def _ready(status: Mapping[str, Any]) -> tuple[bool, str]:
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond.get("status") == "True", str(cond.get("message") or "")
    return False, ""


def _recommendation(status: Mapping[str, Any]) -> RecommendationStatus | None:
    raw = status.get("recommendation")
    if not isinstance(raw, Mapping):
        return None
    try:
        return RecommendationStatus.model_validate(raw)
    except ValidationError:
        return None


def _workload_problems(ref: str, workload: Mapping[str, Any]) -> list[str]:
    status = workload.get("status")
    status = status if isinstance(status, Mapping) else {}
    meta = workload.get("metadata") or {}
    phase = str(status.get("phase") or "Pending")
    ready, ready_message = _ready(status)
    generation, observed = meta.get("generation"), status.get("observedGeneration")
    ns, name = ref.split("/", 1)
    wait = f"kubectl wait -n {ns} --for=condition=Ready gpuworkload/{name}"
    if phase == "Rejected":
        why = f": {ready_message.rstrip('.')}" if ready_message else ""
        return [
            f"GPUWorkload {ref} is Rejected{why}. Fix its spec (kubectl describe -n {ns} "
            f"gpuworkload {name}); its pods are admitted once it is Ready"
        ]
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        return [
            f"GPUWorkload {ref} has not been sized for its current spec yet (generation "
            f"{generation}, status of {observed}); wait for it: {wait}"
        ]
    if phase != "Ready" or not ready:
        why = f" ({ready_message})" if ready_message else ""
        return [f"GPUWorkload {ref} is not Ready yet (phase {phase}){why}; wait for it: {wait}"]
    return []


def _gpu_request(container: Mapping[str, Any], resource: str) -> int | None:
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (res.get(part) or {}).get(resource)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return -1
    return None


def _apply_affinity(
    spec: dict[str, Any], cls: GPUClass, rec: RecommendationStatus | None = None
) -> str | None:
    """AND the class requirement into the pod's required node affinity; a contradiction (a term
    or nodeSelector pinning the product label to other products) is returned, nothing changed.

    The requirement is the recommendation's own ``nodeAffinity`` snippet when it has one (the
    operator writes it for the MIG strategy of the class's nodes), else the class's default."""
    snippet = rec.node_affinity if rec is not None and rec.node_affinity is not None else None
    wanted = (snippet or node_affinity(cls)).required_during_scheduling_ignored_during_execution
    ours = [e.model_dump(by_alias=True) for e in wanted.node_selector_terms[0].match_expressions]
    keys = {e["key"] for e in ours}
    products = {v for e in ours if e["operator"] == "In" for v in e.get("values") or ()} or set(
        cls.products
    )
    selector = spec.get("nodeSelector") or {}
    for key in keys & set(selector):
        if selector[key] not in products:
            return (
                f"the pod's nodeSelector {key}={selector[key]} is not a {cls.name} node "
                f"({', '.join(sorted(products))}): remove it, the webhook sets the affinity"
            )
    current = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    merged = []
    for term in current.get("nodeSelectorTerms") or [{}]:
        term = dict(term)
        expressions = list(term.get("matchExpressions") or [])
        for expr in expressions:
            pinned = expr.get("key") in keys and expr.get("operator") == "In"
            if pinned and not products & set(expr.get("values") or ()):
                return (
                    f"the pod's node affinity requires {expr.get('key')} in "
                    f"{expr.get('values')}, none of them a {cls.name} node: remove it, the "
                    "webhook sets the affinity"
                )
        present = {e.get("key") for e in expressions}
        expressions += [e for e in ours if e["key"] not in present]
        term["matchExpressions"] = expressions
        merged.append(term)
    node = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = {**current, "nodeSelectorTerms": merged}
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    return None


def _apply_limit(
    spec: dict[str, Any], annotations: Mapping[str, str], rec: RecommendationStatus, resource: str
) -> str | None:
    """Set the GPU limit when no container asks for ``resource``; a different count is returned
    as a contradiction."""
    containers = spec.get("containers") or []
    other = sorted(
        {
            key
            for c in containers
            for part in ("limits", "requests")
            for key in ((c.get("resources") or {}).get(part) or {})
            if key != resource and key.startswith(_GPU_RESOURCE_PREFIXES)
        }
    )
    if other:
        return (
            f"the pod asks for {', '.join(other)} but the recommendation is {rec.gpu_count} x "
            f"{rec.gpu_class}, requested as {resource}: remove that request, the webhook sets "
            f"{resource}"
        )
    asked = [(c.get("name"), _gpu_request(c, resource)) for c in containers]
    total = sum(n for _, n in asked if n is not None and n > 0)
    if any(n is not None for _, n in asked):
        if total != rec.gpu_count:
            return (
                f"the pod asks for {total} {resource} but the recommendation is "
                f"{rec.gpu_count} x {rec.gpu_class}: set the limit to {rec.gpu_count}, or leave it "
                "unset and the webhook sets it"
            )
        return None
    if not containers:
        return None
    target = annotations.get(ANNOTATION_CONTAINER)
    chosen = next((c for c in containers if c.get("name") == target), None)
    if target and chosen is None:
        return (
            f"annotation {ANNOTATION_CONTAINER}={target} names no container of the pod "
            f"({', '.join(str(c.get('name')) for c in containers)})"
        )
    chosen = chosen or containers[0]
    resources = chosen.setdefault("resources", {})
    resources.setdefault("limits", {})[resource] = str(rec.gpu_count)
    return None


def _resource(cls: GPUClass, rec: RecommendationStatus) -> str:
    """The GPU resource the recommendation's ``resources`` snippet limits (``nvidia.com/mig-*``
    where the class's nodes use the MIG ``mixed`` strategy), else the class's default."""
    limits = rec.resources.limits if rec.resources is not None else None
    return next(iter(limits or {}), None) or gpu_resource(cls)


def is_measurement_pod(labels: Mapping[str, Any]) -> bool:
    """Whether a pod with these labels is one of the operator's measurement pods
    (``app.kubernetes.io/managed-by: gpu-sizer``, as :func:`gpu_sizer.measurement.job_manifest`
    labels them)."""
    return labels.get(LABEL_MANAGED_BY) == MANAGED_BY


def review_pod(
    pod: Mapping[str, Any],
    namespace: str,
    workload: Mapping[str, Any] | None,
    *,
    enforcement: PodEnforcement,
    catalog: Sequence[GPUClass],
    lookup_error: str | None = None,
) -> PodAnswer:
    """Decide on a labelled pod being created in ``namespace``; ``workload`` is the GPUWorkload
    its label names (``None``: not found), ``lookup_error`` why it could not be read."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    if is_measurement_pod(labels):
        return PodAnswer(True, "")
    name = str(labels.get(WORKLOAD_LABEL) or "")
    ref = f"{namespace}/{name}"
    problems: list[str] = []
    mutated: dict[str, Any] | None = None
    if lookup_error is not None:
        problems.append(f"could not read GPUWorkload {ref} ({lookup_error}); retry")
    elif workload is None:
        problems.append(
            f"GPUWorkload {ref} (label {WORKLOAD_LABEL}) not found: create it, or fix or remove "
            "the label"
        )
    else:
        problems += _workload_problems(ref, workload)
        status = workload.get("status")
        rec = _recommendation(status) if isinstance(status, Mapping) else None
        by_name = {c.name: c for c in catalog}
        cls = by_name.get(rec.gpu_class) if rec is not None else None
        if rec is not None and cls is None:
            problems.append(
                f"GPUWorkload {ref} recommends {rec.gpu_class}, which the operator's catalog "
                "no longer has; it is re-sized on its next change"
            )
        elif rec is not None and cls is not None:
            mutated = copy.deepcopy(dict(pod))
            spec = mutated.setdefault("spec", {})
            annotations = dict((mutated.get("metadata") or {}).get("annotations") or {})
            for problem in (
                _apply_affinity(spec, cls, rec),
                _apply_limit(spec, annotations, rec, _resource(cls, rec)),
            ):
                if problem:
                    problems.append(problem)
            annotations[ANNOTATION_CLASS] = rec.gpu_class
            annotations[ANNOTATION_BASIS] = rec.basis.value
            spec_hash = status.get("specHash") if isinstance(status, Mapping) else None
            if isinstance(spec_hash, str) and spec_hash:
                annotations[ANNOTATION_SPEC_HASH] = spec_hash
            mutated.setdefault("metadata", {})["annotations"] = annotations
    if problems and enforcement is PodEnforcement.Enforce:
        return PodAnswer(
            False,
            f"pod denied by gpu-sizer (podEnforcement Enforce): {'; '.join(problems)}",
            problems=tuple(problems),
        )
    warnings = tuple(problems) if enforcement is PodEnforcement.Warn else ()
    return PodAnswer(True, "", warnings, mutated, tuple(problems))


def kubernetes_workload_fetcher(timeout: float = 2.0) -> WorkloadFetcher:
    """A fetcher reading the GPUWorkload with the official client (:func:`.kube.api_client`)."""

    def fetch(namespace: str, name: str) -> Mapping[str, Any] | None:
        from kubernetes.client import CustomObjectsApi
        from kubernetes.client.exceptions import ApiException

        from gpu_sizer.admission.kube import api_client
        from gpu_sizer.api import GROUP, PLURAL, VERSION

        try:
            obj = CustomObjectsApi(api_client()).get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return cast("Mapping[str, Any]", obj)

    return fetch
