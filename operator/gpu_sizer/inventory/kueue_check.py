"""Kueue AdmissionCheck: admit a Kueue Workload only when its GPUWorkload is Ready with headroom
on the GPU of the flavor Kueue assigned. Pure decisions.

Kueue (kubernetes-sigs/kueue) runs external admission checks this way (``apis/kueue/v1beta1/
admissioncheck_types.go``: ``AdmissionCheckSpec.controllerName``, ``CheckState`` Pending / Ready /
Retry / Rejected; ``apis/kueue/v1beta1/workload_types.go``: ``WorkloadStatus.admissionChecks``, a
list keyed by ``name`` of ``AdmissionCheckState`` {name, state, lastTransitionTime, message};
``WorkloadStatus.admission.podSetAssignments[].flavors``, resource name -> ResourceFlavor name;
``spec.podSets[].template``; ``ResourceFlavorSpec.nodeLabels``):

- a ClusterQueue lists AdmissionCheck names; an AdmissionCheck whose ``spec.controllerName`` is
  :data:`CONTROLLER_NAME` is this operator's, and is marked ``Active`` by it (Kueue keeps a
  ClusterQueue inactive while one of its checks is not);
- Kueue adds each check to the Workload as ``Pending``; after quota is reserved
  (``status.admission`` set) the controller sets the state: ``Ready`` lets the Workload start,
  ``Retry`` releases the quota and queues it again, ``Rejected`` deactivates it.

The rule here: every pod set whose template carries the label ``gpusizer.dev/workload: NAME``
names a GPUWorkload in the Workload's namespace; the check is ``Ready`` when each such GPUWorkload
is ``Ready`` for its current spec and the GPU of its pod set's flavor (the flavor's
``nvidia.com/gpu.product`` node label, a catalog class) leaves at least the workload's
``minHeadroomFraction`` over ``recommendation.requiredBytesPerGpu``; ``Rejected`` when a
GPUWorkload is ``Rejected``; ``Retry`` otherwise (missing, not Ready yet, or the flavor's GPU too
small or unknown: Kueue may assign another flavor next time). A Workload with no labelled pod set
is not this check's business: ``Ready``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gpu_sizer.api.spec import Placement
from gpu_sizer.catalog import GPUClass, class_for_product, headroom_fraction

__all__ = [
    "CONTROLLER_NAME",
    "CheckVerdict",
    "check_names",
    "decide_check",
    "min_headroom",
    "pending_checks",
    "status_patch",
]

#: ``spec.controllerName`` of the AdmissionChecks this operator serves.
CONTROLLER_NAME: Final = "gpusizer.dev/admission-check"
WORKLOAD_LABEL: Final = "gpusizer.dev/workload"
PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
#: ``spec.placement.minHeadroomFraction`` when a stored spec leaves it out: the API model's own
#: default, so that the check and the operator's sizing judge an unset field alike.
DEFAULT_MIN_HEADROOM: Final[float] = float(Placement.model_fields["min_headroom_fraction"].default)
GIB: Final = 1 << 30
_GPU_RESOURCES: Final = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu")

State = Literal["Ready", "Retry", "Rejected"]


@dataclass(frozen=True)
class CheckVerdict:
    """The state to set and the message saying why (``None`` from :func:`decide_check`: leave
    the check as it is, e.g. quota not reserved yet)."""

    state: State
    message: str


def check_names(admission_checks: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Names of the AdmissionChecks whose ``spec.controllerName`` is :data:`CONTROLLER_NAME`."""
    return frozenset(
        str((c.get("metadata") or {}).get("name"))
        for c in admission_checks
        if (c.get("spec") or {}).get("controllerName") == CONTROLLER_NAME
    )


def pending_checks(workload: Mapping[str, Any], ours: frozenset[str]) -> list[str]:
    """Our checks on a Kueue Workload that are ``Pending`` (the ones to decide)."""
    states = (workload.get("status") or {}).get("admissionChecks") or []
    return [
        str(s.get("name"))
        for s in states
        if isinstance(s, Mapping) and s.get("name") in ours and s.get("state") == "Pending"
    ]


def _ready(status: Mapping[str, Any]) -> bool:
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _flavor_of(assignment: Mapping[str, Any] | None) -> str | None:
    flavors = (assignment or {}).get("flavors") or {}
    for resource, flavor in sorted(flavors.items()):
        if str(resource).startswith(_GPU_RESOURCES):
            return str(flavor)
    return None


def min_headroom(spec: Any) -> float | None:
    """``spec.placement.minHeadroomFraction`` of a stored GPUWorkload spec (plain data):
    :data:`DEFAULT_MIN_HEADROOM` when unset, the value when it is a number (``0`` is a value,
    never "unset": a falsy default read ``0`` as 10%), None when it is not a number (a spec
    stored past the webhook: not this check's to guess)."""
    placement = spec.get("placement") if isinstance(spec, Mapping) else None
    value = placement.get("minHeadroomFraction") if isinstance(placement, Mapping) else None
    if value is None:
        return DEFAULT_MIN_HEADROOM
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def decide_check(
    workload: Mapping[str, Any],
    gpu_workload: Callable[[str, str], Mapping[str, Any] | None],
    flavors: Mapping[str, Mapping[str, Any]],
    catalog: Sequence[GPUClass],
) -> CheckVerdict | None:
    """The state of our check on the Kueue ``workload``; ``gpu_workload(namespace, name)`` is
    the GPUWorkload (None: absent), ``flavors`` the ResourceFlavors by name. None while Kueue
    has not reserved quota (no flavor assigned yet): the check stays Pending."""
    meta = workload.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    pod_sets = (workload.get("spec") or {}).get("podSets") or []
    labelled = [
        (str(ps.get("name")), str(labels[WORKLOAD_LABEL]))
        for ps in pod_sets
        if isinstance(ps, Mapping)
        and WORKLOAD_LABEL
        in (labels := ((ps.get("template") or {}).get("metadata") or {}).get("labels") or {})
    ]
    if not labelled:
        return CheckVerdict("Ready", f"no pod set carries the label {WORKLOAD_LABEL}")
    admission = (workload.get("status") or {}).get("admission")
    if not isinstance(admission, Mapping):
        return None
    assignments = {
        str(a.get("name")): a
        for a in admission.get("podSetAssignments") or ()
        if isinstance(a, Mapping)
    }
    retry: list[str] = []
    ready: list[str] = []
    for pod_set, name in labelled:
        ref = f"{namespace}/{name}"
        gw = gpu_workload(namespace, name)
        if gw is None:
            retry.append(f"GPUWorkload {ref} (pod set {pod_set}) not found: create it")
            continue
        status = gw.get("status") or {}
        gw_meta = gw.get("metadata") or {}
        phase = str(status.get("phase") or "Pending")
        if phase == "Rejected":
            return CheckVerdict(
                "Rejected",
                f"GPUWorkload {ref} is Rejected: no allowed GPU class fits it; fix its spec "
                f"(kubectl describe -n {namespace} gpuworkload {name})",
            )
        generation, observed = gw_meta.get("generation"), status.get("observedGeneration")
        stale = isinstance(generation, int) and isinstance(observed, int) and observed < generation
        rec = status.get("recommendation") or {}
        required = rec.get("requiredBytesPerGpu")
        if stale or phase != "Ready" or not _ready(status) or not isinstance(required, int):
            retry.append(f"GPUWorkload {ref} is not Ready yet (phase {phase})")
            continue
        flavor = _flavor_of(assignments.get(pod_set))
        if flavor is None:
            retry.append(f"pod set {pod_set} has no GPU flavor assigned")
            continue
        labels = (flavors.get(flavor) or {}).get("spec", {}).get("nodeLabels") or {}
        product = labels.get(PRODUCT_LABEL)
        cls = class_for_product(catalog, str(product)) if product else None
        if cls is None:
            retry.append(
                f"ResourceFlavor {flavor} names no catalog GPU ({PRODUCT_LABEL}="
                f"{product or 'unset'} in spec.nodeLabels)"
            )
            continue
        minimum = min_headroom(gw.get("spec"))
        if minimum is None:
            retry.append(
                f"GPUWorkload {ref}: spec.placement.minHeadroomFraction is not a number; fix it"
            )
            continue
        room = headroom_fraction(cls.usable, required)
        what = (
            f"GPUWorkload {ref} needs {_gib(required)} per GPU ({rec.get('basis', '?')}); "
            f"flavor {flavor} is {cls.name} ({_gib(cls.usable)} usable): {room:.0%} headroom"
        )
        if room < minimum:
            retry.append(f"{what}, under the required {minimum:.0%}")
        else:
            ready.append(what)
    if retry:
        return CheckVerdict("Retry", "; ".join(retry))
    return CheckVerdict("Ready", "; ".join(ready))


def status_patch(
    workload: Mapping[str, Any], check: str, verdict: CheckVerdict, now: str
) -> dict[str, Any] | None:
    """A JSON merge patch of the Workload's status setting ``check`` to ``verdict`` (the whole
    ``admissionChecks`` list, other checks unchanged, with ``metadata.resourceVersion`` as the
    precondition); None when the check already says so."""
    states = list((workload.get("status") or {}).get("admissionChecks") or [])
    out: list[dict[str, Any]] = []
    changed = False
    for entry in states:
        entry = dict(entry)
        if entry.get("name") == check:
            if entry.get("state") == verdict.state and entry.get("message") == verdict.message:
                return None
            if entry.get("state") != verdict.state:
                entry["lastTransitionTime"] = now
            entry["state"] = verdict.state
            entry["message"] = verdict.message[:32768]
            changed = True
        out.append(entry)
    if not changed:
        return None
    meta = workload.get("metadata") or {}
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"admissionChecks": out},
    }
