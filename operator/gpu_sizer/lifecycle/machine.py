"""The state machine's one level-triggered decision for a workload.

:func:`decide` composes the spec decision (:mod:`gpu_sizer.lifecycle.spec`) and, while the
measurement of the current spec hash runs, the Job decision (:mod:`gpu_sizer.lifecycle.outcome`),
and keeps deleting the Job of a measurement that ended by deletion until it is gone.
"""

from __future__ import annotations

from collections.abc import Callable

from gpu_sizer.api import MeasurementStatus, Phase
from gpu_sizer.lifecycle.outcome import _plan_outcome
from gpu_sizer.lifecycle.plan import Config, DeleteJob, Plan, StartJob, Workload, _settled
from gpu_sizer.lifecycle.spec import _plan_spec
from gpu_sizer.measurement.outcome import Outcome
from gpu_sizer.sizing.assessment import Assessment

#: Endings the operator brings about by deleting the Job (its pod never ran, or never will): a
#: Job of such an ending that still exists is deleted on every decision until it is gone, so a
#: deletion that failed once (a 500, a 429) is tried again instead of leaving the Job to hold
#: its slot and its waiters until its deadline.
DELETED_ON_END: frozenset[str] = frozenset({"Unschedulable", "NoNodeOfClass", "ImagePullFailed"})


def _leftover(plan: Plan, spec_hash: str) -> Plan:
    """``plan`` with a :class:`DeleteJob` for the Job of a measurement that ended in one of
    :data:`DELETED_ON_END` (a no-op for the shell when the Job is gone already)."""
    m = plan.status.measurement
    if (
        m is None
        or not m.job_name
        or not m.completed_at
        or m.spec_hash != spec_hash
        or m.reason not in DELETED_ON_END
        or any(isinstance(a, DeleteJob) and a.name == m.job_name for a in plan.actions)
    ):
        return plan
    return Plan(plan.status, (*plan.actions, DeleteJob(m.job_name)))


def decide(
    wl: Workload,
    assessment: Assessment,
    config: Config,
    *,
    present: frozenset[str] | None,
    now: str,
    job_name: Callable[[str, int, int], str],
    memory_bytes: int,
    observe: Callable[[MeasurementStatus], Outcome],
) -> Plan:
    """One level-triggered decision from everything known about a workload.

    The spec first (:func:`plan_spec`: estimate, start, stop or keep a measurement); then, while
    the measurement of the current spec hash runs in a Job it did not just start, what that Job
    says (``observe(measurement) -> Outcome``, then :func:`plan_outcome`). The same inputs give
    the same plan, and the stored status back (same object, equal) when nothing changed, so the
    caller can run it on any event, any number of times, and write only when the status differs.
    """
    plan = _plan_spec(
        wl,
        assessment,
        config,
        present=present,
        now=now,
        job_name=job_name,
        memory_bytes=memory_bytes,
    )
    m = plan.status.measurement
    if (
        plan.status.phase is Phase.Measuring
        and m is not None
        and m.job_name
        and m.spec_hash == wl.spec_hash
        and not any(isinstance(a, StartJob) for a in plan.actions)
    ):
        measuring = Workload(
            wl.name, wl.namespace, wl.generation, wl.spec, wl.spec_hash, plan.status
        )
        then = _plan_outcome(
            measuring, observe(m), config, present=present, now=now, job_name=job_name
        )
        plan = Plan(then.status, (*plan.actions, *then.actions))
    return _settled(_leftover(plan, wl.spec_hash), wl.previous, now)
