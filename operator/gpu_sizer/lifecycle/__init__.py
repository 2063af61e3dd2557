"""The pure workload state machine: (spec, assessment, observed state) -> status and actions.

kopf handlers call these functions and only move their results in and out of the API. The same
:func:`estimated_status` gives ``gpu-sizer estimate -o json`` the status the operator would write
before measuring.
"""

from gpu_sizer.lifecycle.outcome import (
    DELETED_ON_END,
    GIB,
    Action,
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
    current_conditions,
    decide,
    estimated_status,
    invalid_plan,
    measured_peak,
    plan_outcome,
    plan_spec,
    queued_plan,
    set_condition,
    settle_transitions,
    starts_measurement,
)

__all__ = [
    "DELETED_ON_END",
    "GIB",
    "Action",
    "Config",
    "DeleteJob",
    "Emit",
    "Plan",
    "StartJob",
    "Workload",
    "current_conditions",
    "decide",
    "estimated_status",
    "invalid_plan",
    "measured_peak",
    "plan_outcome",
    "plan_spec",
    "queued_plan",
    "set_condition",
    "settle_transitions",
    "starts_measurement",
]
