"""What a decision takes and what it returns: the workload, the operator settings, the plan.

A decision is pure: it reads a :class:`Workload` (identity, spec, stored status) and a
:class:`Config`, and returns a :class:`Plan`, the status to write and the actions
(:class:`StartJob`, :class:`DeleteJob`, :class:`Emit`) the imperative shell must take, in order.
Two rules the decisions apply to a plan before returning it live here as well: transition times
settled against the stored status (so re-deciding writes nothing) and Events dropped when the
verdict is the one already stored (so a restart posts nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_sizer.api import GPUWorkloadSpec, GPUWorkloadStatus
from gpu_sizer.catalog import GPUClass
from gpu_sizer.lifecycle.conditions import current_conditions, settle_transitions

GIB = 1 << 30


@dataclass(frozen=True)
class StartJob:
    """Create the measurement Job ``name`` (idempotent: an existing Job of that name is adopted).

    ``memory_bytes`` is the host RAM request/limit; ``gpus`` the ``nvidia.com/gpu`` limit.
    """

    name: str
    gpu_class: GPUClass
    gpus: int
    memory_bytes: int


@dataclass(frozen=True)
class DeleteJob:
    """Delete the Job ``name`` (and its pods); a missing Job is not an error."""

    name: str


@dataclass(frozen=True)
class Emit:
    """Post a Kubernetes Event on the GPUWorkload (``type_`` is Normal or Warning)."""

    type_: str
    reason: str
    message: str


Action = StartJob | DeleteJob | Emit


@dataclass(frozen=True)
class Plan:
    """The status to write and the actions to take, in order."""

    status: GPUWorkloadStatus
    actions: tuple[Action, ...] = ()


@dataclass(frozen=True)
class Config:
    """Operator settings the decisions depend on.

    ``unschedulable_timeout_seconds``: how long a measurement pod may stay unschedulable before
    the operator stops waiting for a node of the class.
    """

    catalog: tuple[GPUClass, ...]
    unschedulable_timeout_seconds: float = 600.0
    #: What runs a measurement, as people read it in messages: "Job" (Kubernetes) or
    #: "local probe" (the local backend, where no Job exists).
    runner: str = "Job"


@dataclass(frozen=True)
class Workload:
    """Identity and observed state of one GPUWorkload."""

    name: str
    namespace: str
    generation: int | None
    spec: GPUWorkloadSpec
    spec_hash: str
    previous: GPUWorkloadStatus | None


def _fmt(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def _settled(plan: Plan, previous: GPUWorkloadStatus | None, now: str) -> Plan:
    """The plan with transition times settled against the stored status (see
    :func:`settle_transitions`), and no condition of an older generation left standing (see
    :func:`current_conditions`)."""
    stored = previous.conditions if previous is not None else []
    fresh = current_conditions(plan.status.conditions, plan.status.observed_generation, now)
    conds = settle_transitions(fresh, stored, now)
    if conds == plan.status.conditions:
        return plan
    return Plan(plan.status.model_copy(update={"conditions": conds}), plan.actions)


def _quiet_if_unchanged(plan: Plan, previous: GPUWorkloadStatus | None) -> Plan:
    """Drop the plan's Events when its Ready condition is the one already stored.

    Events announce transitions. A resume (every operator restart) or a no-op re-run decides
    the same verdict again; posting it again would add one Warning per restart per workload.
    """
    if previous is None:
        return plan

    def key(status: GPUWorkloadStatus) -> tuple[str, str | None, str | None] | None:
        ready = next((c for c in status.conditions if c.type == "Ready"), None)
        return None if ready is None else (str(ready.status), ready.reason, ready.message)

    if key(previous) is None or key(previous) != key(plan.status):
        return plan
    return Plan(plan.status, tuple(a for a in plan.actions if not isinstance(a, Emit)))
