"""A new measurement held back until a measurement slot is free.

Measurement slots bound how many measurement Jobs run at once. A plan that would start a new
measurement waits in the queue with the estimate-based status; a Job that replaces the running one
of the same spec hash keeps the slot that measurement holds.
"""

from __future__ import annotations

from gpu_sizer.api import ConditionType, GPUWorkloadStatus, Phase
from gpu_sizer.lifecycle.conditions import F, _Conds
from gpu_sizer.lifecycle.plan import (
    Action,
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
    _settled,
)


def starts_measurement(plan: Plan, previous: GPUWorkloadStatus | None, spec_hash: str) -> bool:
    """Whether ``plan`` starts a *new* measurement, one that needs a measurement slot.

    A Job that replaces the running one of the same spec hash (recreated once after a deletion,
    retried after an eviction or a host OOM, moved to a larger class after a CUDA OOM) keeps
    the slot the measurement holds: it is not queued again.
    """
    if not any(isinstance(a, StartJob) for a in plan.actions):
        return False
    holding = (
        previous is not None
        and previous.phase is Phase.Measuring
        and previous.measurement is not None
        and previous.measurement.spec_hash == spec_hash
    )
    return not holding


def queued_plan(
    plan: Plan,
    wl: Workload,
    config: Config,
    *,
    message: str,
    now: str,
) -> Plan:
    """``plan`` (which starts a new measurement) held back until a measurement slot is free.

    The status stays where the estimate puts it (phase ``Estimated``, the estimate-based
    recommendation), with ``Measured=False`` reason ``Queued`` and ``message`` (the position and
    why it waits); no Job is started, Jobs the plan deletes are still deleted. A ``Queued``
    Event is posted when the workload enters the queue, not on every move in it. The stored
    measurement is kept only when it belongs to this spec hash (a measurement that found no node
    of its class, waiting to be retried); one of an older spec is dropped, as a new measurement
    would replace it.
    """
    prev = wl.previous
    kept = prev.measurement if prev is not None else None
    if kept is not None and kept.spec_hash != wl.spec_hash:
        kept = None
    conds = _Conds(plan.status, wl.generation, now)
    conds.put(ConditionType.Measured, F, "Queued", message)
    wait = f"waiting for a measurement slot ({config.runner} not started yet)"
    conds.kstatus((False, "Queued", wait), True, False)
    status = plan.status.model_copy(
        update={"phase": Phase.Estimated, "measurement": kept, "conditions": conds.items}
    )
    was = next((c for c in prev.conditions if c.type == "Measured"), None) if prev else None
    actions: list[Action] = [a for a in plan.actions if isinstance(a, DeleteJob)]
    if was is None or was.reason != "Queued":
        actions.append(Emit("Normal", "Queued", message))
    return _settled(Plan(status, tuple(actions)), prev, now)
