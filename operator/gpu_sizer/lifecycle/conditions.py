"""Condition rules: how a decision sets, restates and settles status conditions.

Kubernetes API conventions fix what a condition means over time: ``lastTransitionTime`` moves
only when ``status`` changes, and ``observedGeneration`` says which spec generation a condition
was judged for. Every status the state machine writes goes through these functions, so the rules
hold whatever path a decision takes. :class:`_Conds` is the accumulator the decisions use to set
several conditions for one generation and time, and to state Ready/Reconciling/Stalled (kstatus)
from one verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_sizer.api import Condition, ConditionStatus, ConditionType, GPUWorkloadStatus

T, F = ConditionStatus.true, ConditionStatus.false


def set_condition(
    conditions: Sequence[Condition],
    type_: ConditionType | str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: str,
) -> list[Condition]:
    """Return ``conditions`` with ``type_`` set; ``lastTransitionTime`` moves only when the
    condition's status changes (Kubernetes API conventions)."""
    out: list[Condition] = []
    found = False
    for cond in conditions:
        if cond.type == str(type_):
            found = True
            moved = cond.status != status
            out.append(
                Condition(
                    type=str(type_),
                    status=status,
                    reason=reason,
                    message=message,
                    observed_generation=generation,
                    last_transition_time=now if moved else (cond.last_transition_time or now),
                )
            )
        else:
            out.append(cond)
    if not found:
        out.append(
            Condition(
                type=str(type_),
                status=status,
                reason=reason,
                message=message,
                observed_generation=generation,
                last_transition_time=now,
            )
        )
    return out


def settle_transitions(
    conditions: Sequence[Condition], stored: Sequence[Condition], now: str
) -> list[Condition]:
    """``conditions`` with each ``lastTransitionTime`` taken from the *stored* status.

    A decision may pass a condition through intermediate values (re-deriving a measured status
    starts from the estimate, where Measured is Unknown and Ready False); only the stored value
    and the final one matter. Kubernetes API conventions: ``lastTransitionTime`` is when the
    condition's ``status`` last changed, so it stays the stored time when the final status equals
    the stored one, and becomes ``now`` otherwise (a new condition included).
    """
    before = {c.type: c for c in stored}
    out: list[Condition] = []
    for cond in conditions:
        old = before.get(cond.type)
        if old is not None and old.status == cond.status and old.last_transition_time:
            when = old.last_transition_time
        elif old is not None and old.status == cond.status:
            when = cond.last_transition_time or now
        else:
            when = now
        out.append(
            cond
            if cond.last_transition_time == when
            else cond.model_copy(update={"last_transition_time": when})
        )
    return out


def current_conditions(
    conditions: Sequence[Condition], generation: int | None, now: str
) -> list[Condition]:
    """``conditions`` with every one that was not judged for ``generation`` (an older
    ``observedGeneration``) restated as ``Unknown``, reason ``NotEvaluated``: a condition of an
    earlier spec must never read as this spec's (an invalid spec's status kept the old spec's
    ``HeadroomSufficient=True``). Kubernetes API conventions: ``observedGeneration`` says which
    generation a condition describes."""
    if generation is None:
        return list(conditions)
    out: list[Condition] = []
    for cond in conditions:
        old = cond.observed_generation
        if old is not None and old < generation:
            cond = Condition(
                type=cond.type,
                status=ConditionStatus.unknown,
                reason="NotEvaluated",
                message=f"not evaluated for generation {generation} (last judged for {old})",
                observed_generation=generation,
                last_transition_time=(
                    cond.last_transition_time if cond.status == ConditionStatus.unknown else now
                ),
            )
        out.append(cond)
    return out


class _Conds:
    """Accumulates conditions with :func:`set_condition` for one generation and time."""

    def __init__(self, previous: GPUWorkloadStatus | None, generation: int | None, now: str):
        self.items: list[Condition] = list(previous.conditions) if previous else []
        self.generation = generation
        self.now = now

    def put(self, t: ConditionType, s: ConditionStatus, reason: str, msg: str) -> None:
        self.items = set_condition(self.items, t, s, reason, msg, self.generation, self.now)

    def kstatus(self, ready: tuple[bool, str, str], reconciling: bool, stalled: bool) -> None:
        """Ready/Reconciling/Stalled from one (ready, reason, message) triple."""
        ok, reason, msg = ready
        self.put(ConditionType.Ready, T if ok else F, reason, msg)
        self.put(
            ConditionType.Reconciling, T if reconciling else F, reason, msg if reconciling else ""
        )
        self.put(ConditionType.Stalled, T if stalled else F, reason, msg if stalled else "")


def _finish(conds: _Conds, ready: bool, reason: str, text: str) -> list[Condition]:
    """The conditions of a decision that leaves nothing to reconcile: Ready as ``ready`` says,
    Reconciling False, Stalled whenever the workload is not Ready."""
    conds.kstatus((ready, reason, text), False, not ready)
    return conds.items
