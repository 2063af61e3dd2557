"""Writing a GPUWorkload's status, and the metrics and log lines that follow a write.

A status equal to the stored one is not written (resuming over settled workloads costs no API
call). A write carries the ``resourceVersion`` the decision was made on: a 409 means the object
changed meanwhile, so the decision is made again from the fresh object, never re-sent. The
API's answer stands for the workload until the watch shows it
(:class:`~gpu_sizer.controller.workloads.WorkloadIndex`).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpu_sizer import metrics
from gpu_sizer.api import GROUP, PLURAL, VERSION, GPUWorkloadStatus
from gpu_sizer.controller import kube
from gpu_sizer.controller.workloads import Key, WorkloadIndex, merge_patch
from gpu_sizer.controller.workqueue import Requeue
from gpu_sizer.lifecycle import Plan
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind, parse_time

__all__ = ["StatusWriter", "log_transition", "observe_outcome", "record_metrics"]

log = logging.getLogger("gpu_sizer.controller")


class StatusWriter:
    """Writes statuses through the API client (None before the operator is connected)."""

    def __init__(self, client: Callable[[], kube.Client | None], workloads: WorkloadIndex) -> None:
        self._client = client
        self._workloads = workloads

    async def write(
        self, key: Key, body: Mapping[str, Any], stored: Mapping[str, Any], plan: Plan
    ) -> bool:
        """Write the plan's status when it differs from the stored one; True when written.

        :raises Requeue: the object changed since the decision (decided again at once).
        :raises kube.ApiError: the write did not land (the queue retries).
        """
        new = plan.status.model_dump(by_alias=True, mode="json", exclude_none=True)
        if new == stored:
            return False
        client = self._client()
        assert client is not None
        namespace, name = key
        patch: dict[str, Any] = {"status": merge_patch(stored, new)}
        meta = body.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if rv:
            patch["metadata"] = {"resourceVersion": rv}
        path = kube.object_path(GROUP, VERSION, PLURAL, namespace, name, "status")
        try:
            answer = await client.merge_patch(path, patch)
        except kube.NotFound:
            return False  # deleted meanwhile; its DELETED event cleans up
        except kube.Conflict as exc:
            # The object changed since the decision: decide again from the fresh object.
            fresh = await client.get(kube.object_path(GROUP, VERSION, PLURAL, namespace, name))
            if isinstance(fresh, Mapping):
                self._workloads.remember(key, fresh)
            raise Requeue(0.0, f"status write conflicted ({exc}); deciding again") from exc
        if isinstance(answer, Mapping):
            self._workloads.remember(key, answer)
        return True


def log_transition(key: Key, stored: Mapping[str, Any], plan: Plan) -> None:
    """Say a phase change at INFO, with the Ready condition's message."""
    old_phase = stored.get("phase")
    if old_phase == plan.status.phase:
        return
    ready = next((c for c in plan.status.conditions if c.type == "Ready"), None)
    log.info(
        "%s/%s: %s -> %s: %s",
        *key,
        old_phase or "(new)",
        plan.status.phase,
        ready.message if ready else "",
    )


def record_metrics(key: Key, status: GPUWorkloadStatus) -> None:
    """The workload's gauges: its estimate's components, its measured peaks, its headroom."""
    namespace, name = key
    if status.estimate is not None:
        wire = status.estimate.per_gpu.model_dump(by_alias=True)
        # Byte fields only: perGpu also carries display-only figures (totalGiB).
        components = {}
        for component in metrics.ESTIMATE_COMPONENTS:
            value = wire.get(f"{component}Bytes")
            if isinstance(value, int):
                components[component] = value
        metrics.WORKLOADS.estimated(namespace, name, components)
    m = status.measurement
    if m is not None and m.completed_at and m.device == "cuda":
        peaks = {
            kind: value
            for kind, value in (
                ("allocated", m.peak_allocated_bytes),
                ("reserved", m.peak_reserved_bytes),
                ("device", m.peak_device_used_bytes),
            )
            if value is not None
        }
        metrics.WORKLOADS.measured(namespace, name, peaks)
    rec = status.recommendation
    metrics.WORKLOADS.headroom(
        namespace,
        name,
        None if rec is None else (rec.gpu_class, str(rec.basis), rec.headroom_fraction),
    )


def observe_outcome(
    outcome: Outcome, plan: Plan, prev: GPUWorkloadStatus | None, namespace: str
) -> None:
    """Count a measurement that ended (the first time its ending is written), and the
    GPU-seconds it held in its namespace."""
    if not outcome.finished and outcome.kind not in (
        OutcomeKind.Unschedulable,
        OutcomeKind.Missing,
    ):
        return
    m = plan.status.measurement
    reason = (m.reason if m and m.completed_at and m.reason else None) or (
        "OutOfMemory"
        if outcome.result is not None and outcome.result.out_of_memory
        else str(outcome.kind)
    )
    if outcome.kind is OutcomeKind.Unschedulable and not (m and m.reason == "NoNodeOfClass"):
        return
    metrics.MEASUREMENT_OUTCOMES.labels(reason).inc()
    started = parse_time(prev.measurement.started_at if prev and prev.measurement else None)
    if started is not None:
        now = datetime.datetime.now(datetime.UTC)
        seconds = max(0.0, (now - started).total_seconds())
        metrics.MEASUREMENT_DURATION.labels(reason).observe(seconds)
        gpus = plan.status.estimate.gpu_count if plan.status.estimate else 1
        metrics.MEASUREMENT_GPU_SECONDS.labels(namespace).inc(gpus * seconds)
