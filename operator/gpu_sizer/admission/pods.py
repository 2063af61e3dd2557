"""Pod admission: apply a GPUWorkload's recommendation to the pods that opt in. Pure decisions.

A pod opts in with the label ``gpusizer.dev/workload: NAME``, naming a GPUWorkload in its own
namespace; the label goes in any pod template (Deployment, StatefulSet, Job, LeaderWorkerSet,
KServe). The chart's webhook configuration sends only such pods here (an ``objectSelector`` on
the label, ``failurePolicy: Ignore``), on CREATE. What the webhook does, in the manner of the
Vertical Pod Autoscaler's admission controller for CPU and memory:

- Required node affinity for the recommended class (``recommendation.nodeAffinity``, else
  :func:`gpu_sizer.sizing.placement.node_affinity`): its requirement is ANDed into every existing
  ``nodeSelectorTerms`` entry (terms are ORed, so each keeps its meaning and gains the class), or
  becomes the only term.
- The GPU limit (``recommendation.gpuCount`` of the resource ``recommendation.resources`` names:
  ``nvidia.com/gpu``, or ``nvidia.com/mig-<profile>`` where the class's nodes use the MIG
  ``mixed`` strategy) on the container named by the annotation ``gpusizer.dev/container``, else
  the first container, when the pod asks for no GPU at all: none of its containers (app, init
  or sidecar) sets a GPU resource and none of its DRA claims requests a GPU device (a limit
  beside a DRA claim would give the pod the claim's GPUs *and* the device plugin's).

The GPUs a pod already asks for are counted as the scheduler counts them
(:mod:`.pod_gpus`: the effective request over app, init and sidecar containers, plus the GPU
devices of its DRA claims, which the handler reads); a count it cannot tell (``allocationMode:
All``, alternatives of different sizes, a claim it could not read) is a problem, never zero.
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

Problems (namespace policy ``podEnforcement``, :class:`~.policy.PodEnforcement`): the label
is not a GPUWorkload name (it is used in an API path only once it is one: ``mine/../x`` would
resolve to ``mine``), the GPUWorkload is missing or could not be read, is ``Rejected``, is not
``Ready`` for its current spec, the pod's own GPU request or product node selector contradicts
the recommendation, or the pod is not shaped as a Pod is (a review sent to the webhook
directly skips the API server's decoding: :func:`.pod_gpus.shape_problems`); a malformed pod
is never mutated, and, as every problem, denied only under ``Enforce``.
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

from gpu_sizer.admission.pod_gpus import (
    ClaimGpus,
    effective_request,
    gpu_resources_asked,
    shape_problems,
)
from gpu_sizer.api import RecommendationStatus
from gpu_sizer.api.workload import validate_name
from gpu_sizer.catalog import GPUClass
from gpu_sizer.measurement.job import LABEL_MANAGED_BY, MANAGED_BY
from gpu_sizer.policy.namespace import PodEnforcement
from gpu_sizer.sizing.placement import (
    ANNOTATION_BASIS,
    ANNOTATION_CLASS,
    ANNOTATION_SPEC_HASH,
    WORKLOAD_LABEL,
    gpu_resource,
    node_affinity,
)

__all__ = [
    "ANNOTATION_CONTAINER",
    "ClaimFetcher",
    "PodAnswer",
    "WorkloadFetcher",
    "is_measurement_pod",
    "kubernetes_claim_fetcher",
    "kubernetes_workload_fetcher",
    "review_pod",
    "workload_label",
]

#: Names the container that gets the GPU limit (default: the first container).
ANNOTATION_CONTAINER = "gpusizer.dev/container"
#: Blocking function returning the GPUWorkload ``namespace/name`` as a dict, ``None`` when it
#: does not exist; raises on any other failure (run in a worker thread).
WorkloadFetcher = Callable[[str, str], Mapping[str, Any] | None]
#: Blocking function returning the claim ``spec`` of a ResourceClaim (kind ``ResourceClaim``)
#: or of a ResourceClaimTemplate (kind ``ResourceClaimTemplate``: its ``spec.spec``) in a
#: namespace, ``None`` when it does not exist; raises on any other failure.
ClaimFetcher = Callable[[str, str, str], Any]


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


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]`` as an object to write into: created when absent or null (a field the
    pod sets to ``null`` is the same as one it leaves out)."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


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
    node = _child(_child(spec, "affinity"), "nodeAffinity")
    required = {**current, "nodeSelectorTerms": merged}
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    return None


def _apply_limit(
    spec: dict[str, Any],
    annotations: Mapping[str, str],
    rec: RecommendationStatus,
    resource: str,
    claims: Sequence[ClaimGpus] = (),
) -> str | None:
    """Set the GPU limit when the pod asks for no GPU at all (no container of any kind sets a
    GPU resource, no DRA claim requests a GPU device); a different count, or one that cannot be
    told, is returned as a contradiction and nothing is changed."""
    containers = spec.get("containers") or []
    want = f"{rec.gpu_count} x {rec.gpu_class}"
    other = sorted(r for r in gpu_resources_asked(spec) if r != resource)
    if other:
        return (
            f"the pod asks for {', '.join(other)} but the recommendation is {want}, requested "
            f"as {resource}: remove that request, the webhook sets {resource}"
        )
    unknown = [c for c in claims if c.count is None]
    if unknown:
        return "; ".join(
            f"the pod's resource claim {c.name!r} asks for a number of GPUs the webhook cannot "
            f"tell ({c.why}); the recommendation is {want}: claim exactly {rec.gpu_count} "
            "(allocationMode ExactCount)"
            for c in unknown
        )
    claimed = sum(c.count or 0 for c in claims)
    asked = effective_request(spec, resource)
    if asked is not None and asked < 0:
        return f"the pod asks for a {resource} count that is not a whole number"
    if claimed or asked is not None:
        total = claimed + (asked or 0)
        if total != rec.gpu_count:
            parts = [f"{asked} {resource}"] * (asked is not None) + [
                f"{claimed} GPU device(s) through DRA resource claims"
            ] * bool(claimed)
            return (
                f"the pod asks for {' and '.join(parts)} but the recommendation is {want} "
                "(counted as the scheduler does: app containers, init containers and sidecars, "
                f"and the devices of its resource claims): set the limit to {rec.gpu_count} in "
                "all, or leave it unset and the webhook sets it"
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
    _child(_child(chosen, "resources"), "limits")[resource] = str(rec.gpu_count)
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


def workload_label(pod: Any) -> tuple[str | None, str | None]:
    """The GPUWorkload name a pod's ``gpusizer.dev/workload`` label gives, and the problem with
    it: ``(None, None)`` when the pod does not opt in; ``(None, problem)`` when the value is not
    a GPUWorkload name (a DNS-1123 subdomain): such a value is never put into an API path."""
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(WORKLOAD_LABEL) if isinstance(labels, Mapping) else None
    if value is None or value == "":
        return None, None
    ok = isinstance(value, str) and len(value) <= 63 and validate_name(value) is None
    if not ok:
        return None, (
            f"label {WORKLOAD_LABEL}={value!r} is not a GPUWorkload name (lower-case letters, "
            "digits, '-' and '.', starting and ending with a letter or digit, at most 63 "
            "characters as a label value): fix or remove the label"
        )
    return str(value), None


def _answer(problems: Sequence[str], enforcement: PodEnforcement, mutated: Any) -> PodAnswer:
    if problems and enforcement is PodEnforcement.Enforce:
        return PodAnswer(
            False,
            f"pod denied by gpu-sizer (podEnforcement Enforce): {'; '.join(problems)}",
            problems=tuple(problems),
        )
    warnings = tuple(problems) if enforcement is PodEnforcement.Warn else ()
    return PodAnswer(True, "", warnings, mutated, tuple(problems))


def review_pod(
    pod: Mapping[str, Any],
    namespace: str,
    workload: Mapping[str, Any] | None,
    *,
    enforcement: PodEnforcement,
    catalog: Sequence[GPUClass],
    lookup_error: str | None = None,
    claims: Sequence[ClaimGpus] = (),
) -> PodAnswer:
    """Decide on a labelled pod being created in ``namespace``; ``workload`` is the GPUWorkload
    its label names (``None``: not found), ``lookup_error`` why it could not be read, ``claims``
    the GPU devices of each of its DRA resource claims (:func:`.pod_gpus.claim_gpus`). Never
    raises on a malformed pod: its shape is a problem like any other."""
    malformed = shape_problems(pod)
    if malformed:
        return _answer(
            [f"the pod is malformed ({'; '.join(malformed)}); gpu-sizer left it unchanged"],
            enforcement,
            None,
        )
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if isinstance(labels, Mapping) and is_measurement_pod(labels):
        return PodAnswer(True, "")
    name, label_problem = workload_label(pod)
    if label_problem is not None or name is None:
        return _answer([label_problem] if label_problem else [], enforcement, None)
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
            try:
                mutated = _applied(pod, cls, rec, claims, problems, status)
            except (AttributeError, TypeError, ValueError, KeyError) as exc:
                # A part shape_problems does not look into (a selector term's values...):
                # the same answer as any malformed pod, never an exception.
                return _answer(
                    [f"the pod is malformed ({type(exc).__name__}: {exc}); gpu-sizer left it "
                     "unchanged"],
                    enforcement,
                    None,
                )  # fmt: skip
    return _answer(problems, enforcement, mutated)


def _applied(
    pod: Mapping[str, Any],
    cls: GPUClass,
    rec: RecommendationStatus,
    claims: Sequence[ClaimGpus],
    problems: list[str],
    status: Any,
) -> dict[str, Any]:
    """A copy of ``pod`` with the recommendation applied; contradictions go to ``problems``."""
    mutated = copy.deepcopy(dict(pod))
    spec = _child(mutated, "spec")
    annotations = dict((mutated.get("metadata") or {}).get("annotations") or {})
    for problem in (
        _apply_affinity(spec, cls, rec),
        _apply_limit(spec, annotations, rec, _resource(cls, rec), claims),
    ):
        if problem:
            problems.append(problem)
    annotations[ANNOTATION_CLASS] = rec.gpu_class
    annotations[ANNOTATION_BASIS] = rec.basis.value
    spec_hash = status.get("specHash") if isinstance(status, Mapping) else None
    if isinstance(spec_hash, str) and spec_hash:
        annotations[ANNOTATION_SPEC_HASH] = spec_hash
    _child(mutated, "metadata")["annotations"] = annotations
    return mutated


#: The DRA API versions a claim is read in, newest first (``resource.k8s.io/v1`` from Kubernetes
#: 1.34; ``v1beta2`` and ``v1beta1`` where only those are served): the first that answers.
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")


def kubernetes_claim_fetcher(timeout: float = 2.0) -> ClaimFetcher:
    """A fetcher reading a ResourceClaim or ResourceClaimTemplate with the official client, in
    the first of :data:`DRA_VERSIONS` the API server serves; the claim spec (a template's
    ``spec.spec``), or None when no version has the object."""

    def fetch(namespace: str, kind: str, name: str) -> Any:
        from kubernetes.client import CustomObjectsApi
        from kubernetes.client.exceptions import ApiException

        from gpu_sizer.kube.client import api_client

        plural = "resourceclaimtemplates" if kind == "ResourceClaimTemplate" else "resourceclaims"
        api = CustomObjectsApi(api_client())
        for version in DRA_VERSIONS:
            try:
                obj = api.get_namespaced_custom_object(
                    "resource.k8s.io", version, namespace, plural, name, _request_timeout=timeout
                )
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            spec = obj.get("spec") if isinstance(obj, Mapping) else None
            if kind == "ResourceClaimTemplate":
                return spec.get("spec") if isinstance(spec, Mapping) else None
            return spec
        return None

    return fetch


def kubernetes_workload_fetcher(timeout: float = 2.0) -> WorkloadFetcher:
    """A fetcher reading the GPUWorkload with the official client (:func:`.kube.api_client`)."""

    def fetch(namespace: str, name: str) -> Mapping[str, Any] | None:
        from kubernetes.client import CustomObjectsApi
        from kubernetes.client.exceptions import ApiException

        from gpu_sizer.api import GROUP, PLURAL, VERSION
        from gpu_sizer.kube.client import api_client

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
