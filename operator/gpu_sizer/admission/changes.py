"""Which admission requests the webhooks judge: new specs, never metadata or status writes.

The API server sends the webhooks every UPDATE of a GPUWorkload, including the ones that touch
only metadata: finalizers added or removed (by kopf, by GitOps tools, by the garbage collector's
foreground deletion), labels and annotations (Argo CD's tracking label, Flux's), and the removal
of the last finalizer that completes a deletion. Judging those on the spec would deny them
whenever the stored spec no longer passes: an object stored while the webhook was bypassed, or
one admitted before the namespace policy was tightened, could then never be relabelled, and one
being deleted would stay Terminating for good. A spec that was admitted stays deletable and
editable in its metadata whatever the policy became; it is judged again when its spec changes.

Kubernetes API conventions: ``spec`` is the desired state the user writes; a change to it bumps
``metadata.generation``. Pure: plain mappings in, a bool out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["JUDGED_OPERATIONS", "judged"]

#: The operations whose spec the webhooks judge; every other one is allowed untouched.
JUDGED_OPERATIONS = frozenset({"CREATE", "UPDATE"})

_ABSENT = object()


def judged(
    operation: str | None,
    subresource: str | None,
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
) -> bool:
    """Whether an admission request carries a spec to judge (validate, or fill defaults into).

    - ``CREATE`` of the main resource: judged.
    - ``UPDATE`` of the main resource: judged only when ``spec`` differs between ``old`` and
      ``new`` (an absent spec counts as a value), and never while ``old`` is being deleted
      (``metadata.deletionTimestamp`` set): the object is on its way out.
    - An ``UPDATE`` without ``oldObject`` (the API server always sends it) is judged: unknown is
      not "unchanged".
    - Subresources (``status``), ``DELETE``, ``CONNECT`` and anything else: not judged.
    """
    if subresource or operation not in JUDGED_OPERATIONS:
        return False
    if operation == "CREATE":
        return True
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        return True
    old_meta = old.get("metadata")
    if isinstance(old_meta, Mapping) and old_meta.get("deletionTimestamp"):
        return False
    return bool(old.get("spec", _ABSENT) != new.get("spec", _ABSENT))
