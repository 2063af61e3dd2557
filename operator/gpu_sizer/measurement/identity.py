"""Which measurement pods the operator reads a result from: those the Job controller made for
the Job the operator created. Pure.

Anyone who may create pods in a namespace can create one that names a Job as its owner: the
ownerReference (``kind: Job``, the Job's ``uid``, ``controller: true``) and the Job controller's
labels are plain fields the creator writes, and the API server checks neither who set them nor,
without the OwnerReferencesPermissionEnforcement plugin, whether the creator may touch the Job.
The operator used to read the newest pod naming the Job, so a tenant's pod printing a made-up
peak became the measurement. A pod is read only when it is what the Job controller makes
(``k8s.io/kubernetes/pkg/controller/job``, ``newPod`` from the Job's template through
``PodControl.CreatePodsWithGenerateName``):

- its controlling ownerReference is this Job (kind Job, the Job's uid, ``controller: true``), and
  no other controller claims it;
- its ``batch.kubernetes.io/controller-uid`` label (or the legacy ``controller-uid``) is the
  Job's uid, as the Job's own selector requires;
- its probe container runs the Job template's image and command (the Job's template is
  immutable; a pod with another image or command is not this Job's run);
- it was created no earlier than the Job (second resolution, as Kubernetes timestamps are).

These checks make a forged pod work for it, and they are all a pod in a tenant's namespace can
be checked for: a tenant may copy every one of these fields, exec into the real probe pod or
change its image. That is why results from a tenant's namespace stay private to it
(:mod:`gpu_sizer.api.record`, scope ``Namespace``) and only measurements the operator runs in
its own namespace are shared; the checks are the second line there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from gpu_sizer.api.times import parse_time

__all__ = ["CONTAINER", "made_by_job", "template_container"]

#: The probe container's name in the Job template (``gpu_sizer.measurement.job.CONTAINER``).
CONTAINER: Final = "probe"
_UID_LABELS: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _probe(containers: Any) -> Mapping[str, Any] | None:
    if not isinstance(containers, Sequence) or isinstance(containers, str):
        return None
    return next(
        (c for c in containers if isinstance(c, Mapping) and c.get("name") == CONTAINER), None
    )


def template_container(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The probe container of a Job's pod template (full or slim body)."""
    spec = job.get("spec") or {}
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    return _probe(pod_spec.get("containers")) if isinstance(pod_spec, Mapping) else None


def made_by_job(pod: Mapping[str, Any], job: Mapping[str, Any]) -> str | None:
    """Why ``pod`` is not the Job controller's pod of ``job`` (the module docstring's rules),
    or None when it is. Both are plain API objects (or their slim forms, which keep what is
    checked here)."""
    job_meta, pod_meta = _meta(job), _meta(pod)
    uid = job_meta.get("uid")
    if not uid:
        return "the Job has no uid"
    controllers = [
        ref
        for ref in pod_meta.get("ownerReferences") or ()
        if isinstance(ref, Mapping) and ref.get("controller")
    ]
    if len(controllers) != 1 or (controllers[0].get("kind"), controllers[0].get("uid")) != (
        "Job",
        uid,
    ):
        return f"its controlling ownerReference is not Job uid {uid}"
    labels = pod_meta.get("labels") or {}
    if not isinstance(labels, Mapping) or not any(labels.get(k) == uid for k in _UID_LABELS):
        return f"its label batch.kubernetes.io/controller-uid is not the Job's uid {uid}"
    want = template_container(job)
    pod_spec = pod.get("spec") or {}
    have = _probe(pod_spec.get("containers")) if isinstance(pod_spec, Mapping) else None
    if want is None or have is None:
        return f"it has no {CONTAINER!r} container of the Job's template"
    for field in ("image", "command", "args"):
        if have.get(field) != want.get(field):
            return f"its {CONTAINER} container's {field} is not the Job template's"
    created, job_created = (
        parse_time(pod_meta.get("creationTimestamp")),
        parse_time(job_meta.get("creationTimestamp")),
    )
    if created is None or job_created is None or created < job_created:
        return "it was created before the Job"
    return None
