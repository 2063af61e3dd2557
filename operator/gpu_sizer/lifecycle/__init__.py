"""The pure workload state machine: (spec, assessment, observed state) -> status and actions.

kopf handlers call these functions and only move their results in and out of the API; nothing
here reads the cluster or the clock (the time comes in as ``now``), and import-linter's pure-core
contract keeps kopf and the Kubernetes client out. The same :func:`estimated_status` gives
``gpu-sizer estimate -o json`` the status the operator would write before measuring.

Modules, by idea: :mod:`~gpu_sizer.lifecycle.plan` (what a decision takes and returns),
:mod:`~gpu_sizer.lifecycle.conditions` (condition rules), :mod:`~gpu_sizer.lifecycle.estimated`
(the status an estimate gives), :mod:`~gpu_sizer.lifecycle.spec` (decisions on the spec),
:mod:`~gpu_sizer.lifecycle.queued` (waiting for a measurement slot),
:mod:`~gpu_sizer.lifecycle.gpu_class` (the class a measurement runs on),
:mod:`~gpu_sizer.lifecycle.outcome` (decisions on what the Job says),
:mod:`~gpu_sizer.lifecycle.measured` and :mod:`~gpu_sizer.lifecycle.recommendation` (the status
and recommendation a measurement gives), :mod:`~gpu_sizer.lifecycle.machine` (:func:`decide`,
the one level-triggered decision).
"""

from gpu_sizer.lifecycle.conditions import current_conditions, set_condition, settle_transitions
from gpu_sizer.lifecycle.estimated import estimated_status
from gpu_sizer.lifecycle.machine import DELETED_ON_END, decide
from gpu_sizer.lifecycle.measured import measured_peak
from gpu_sizer.lifecycle.outcome import plan_outcome
from gpu_sizer.lifecycle.plan import (
    GIB,
    Action,
    Config,
    DeleteJob,
    Emit,
    Plan,
    StartJob,
    Workload,
)
from gpu_sizer.lifecycle.queued import queued_plan, starts_measurement
from gpu_sizer.lifecycle.spec import invalid_plan, plan_spec

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
