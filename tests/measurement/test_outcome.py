"""Classifying a measurement Job from the Job and its pods (Kubernetes API reference: Job
conditions, pod containerStatuses, PodScheduled/Unschedulable, Evicted)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from gpu_sizer.measurement.outcome import OutcomeKind, classify
from gpu_sizer.measurement.result import NvmlInfo, PhaseResult, ProbeResult, implausibilities

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
JOB: dict[str, Any] = {
    "metadata": {"name": "j"},
    "spec": {"activeDeadlineSeconds": 930},
    "status": {},
}
RESULT = ProbeResult(
    status="Succeeded", mode="Synthetic", device="cuda", peak_device_used_bytes=5
).model_dump_json(by_alias=True)


def job(*conds: tuple[str, str]) -> dict[str, Any]:
    return {
        **JOB,
        "status": {"conditions": [{"type": t, "status": "True", "reason": r} for t, r in conds]},
    }


def pod(status: dict[str, Any], node: str | None = "n1") -> dict[str, Any]:
    return {
        "metadata": {"creationTimestamp": "2026-01-01T11:00:00Z"},
        "spec": {"nodeName": node},
        "status": status,
    }


def terminated(**term: Any) -> dict[str, Any]:
    return pod({"containerStatuses": [{"state": {"terminated": term}}]})


def test_missing_pending_running() -> None:
    assert classify(None, [], NOW).kind is OutcomeKind.Missing
    assert classify(JOB, [], NOW).kind is OutcomeKind.Pending
    running = classify(JOB, [pod({"phase": "Running"})], NOW)
    assert running.kind is OutcomeKind.Running and running.node_name == "n1"
    assert not running.finished


def test_success_reads_the_termination_message() -> None:
    out = classify(job(("Complete", "Completed")), [terminated(exitCode=0, message=RESULT)], NOW)
    assert out.kind is OutcomeKind.Succeeded and out.result is not None
    assert out.result.peak_device_used_bytes == 5 and out.finished


def test_host_oom_kill_is_not_cuda_oom() -> None:
    out = classify(
        job(("Failed", "BackoffLimitExceeded")), [terminated(exitCode=137, reason="OOMKilled")], NOW
    )
    assert out.kind is OutcomeKind.HostOOMKilled and "RAM, not GPU memory" in out.message


def test_deadline_exceeded_without_a_result() -> None:
    out = classify(job(("Failed", "DeadlineExceeded")), [pod({"phase": "Running"})], NOW)
    assert out.kind is OutcomeKind.DeadlineExceeded and "930 s" in out.message


def test_a_result_wins_over_the_jobs_deadline() -> None:
    late = classify(
        job(("Failed", "DeadlineExceeded")), [terminated(exitCode=0, message=RESULT)], NOW
    )
    assert late.kind is OutcomeKind.Succeeded


def test_unschedulable_with_its_age() -> None:
    p = pod(
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes",
                    "lastTransitionTime": "2026-01-01T11:58:00Z",
                }
            ],
        },
        node=None,
    )
    out = classify(JOB, [p], NOW)
    assert out.kind is OutcomeKind.Unschedulable and out.seconds_unschedulable == 120.0


def test_image_pull_and_eviction() -> None:
    pull = pod(
        {
            "containerStatuses": [
                {"state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}
            ]
        }
    )
    assert classify(JOB, [pull], NOW).kind is OutcomeKind.ImagePullFailed
    evicted = pod({"phase": "Failed", "reason": "Evicted", "message": "low on memory"})
    assert (
        classify(job(("Failed", "BackoffLimitExceeded")), [evicted], NOW).kind
        is OutcomeKind.Evicted
    )


def test_crash_without_a_result_shows_the_log_tail() -> None:
    out = classify(
        job(("Failed", "BackoffLimitExceeded")),
        [terminated(exitCode=1, reason="Error", message="Traceback\nImportError: torch")],
        NOW,
    )
    assert out.kind is OutcomeKind.Failed and "ImportError: torch" in out.message


def test_complete_job_whose_pod_is_gone() -> None:
    out = classify(job(("Complete", "Completed")), [], NOW)
    assert out.kind is OutcomeKind.Failed and "gone" in out.message


def test_newest_pod_decides() -> None:
    old = {
        **terminated(exitCode=137, reason="OOMKilled"),
        "metadata": {"creationTimestamp": "2026-01-01T10:00:00Z"},
    }
    new = terminated(exitCode=0, message=RESULT)
    assert classify(job(("Complete", "Completed")), [new, old], NOW).kind is OutcomeKind.Succeeded


def _gpu_result(**fields: Any) -> ProbeResult:
    base: dict[str, Any] = {
        "status": "Succeeded",
        "mode": "Synthetic",
        "device": "cuda",
        "peak_allocated_bytes": 8 << 30,
        "peak_reserved_bytes": 9 << 30,
        "peak_device_used_bytes": 10 << 30,
        "nvml": NvmlInfo(available=True, total_bytes=24 << 30),
    }
    return ProbeResult(**{**base, **fields})


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"peak_device_used_bytes": -5}, "peakDeviceUsedBytes is -5"),
        ({"peak_reserved_bytes": -5}, "peakReservedBytes is -5"),
        ({"peak_allocated_bytes": -5}, "peakAllocatedBytes is -5"),
        (
            {
                "peak_allocated_bytes": None,
                "peak_reserved_bytes": None,
                "peak_device_used_bytes": None,
            },
            "none of peakAllocatedBytes",
        ),
        ({"peak_device_used_bytes": 30 << 30}, "above the device's memory"),
        ({"phases": [PhaseResult(name="load", seconds=1, peak_reserved_bytes=-1)]}, "phases[0]"),
    ],
)
def test_implausible_figures_fail_the_measurement_naming_the_field(
    fields: dict[str, Any], named: str
) -> None:
    result = _gpu_result(**fields)
    assert any(named in p for p in implausibilities(result))
    message = result.model_dump_json(by_alias=True, exclude_none=True)
    for code in (0, 1):
        out = classify(
            job(("Complete", "Completed")), [terminated(exitCode=code, message=message)], NOW
        )
        assert out.kind is OutcomeKind.Failed and out.result is None
        assert named in out.message


def test_plausible_results_pass_and_oom_may_exceed_the_device() -> None:
    assert implausibilities(_gpu_result()) == []
    oom = _gpu_result(status="OutOfMemory", out_of_memory=True, peak_reserved_bytes=25 << 30)
    assert implausibilities(oom) == []
    cpu = ProbeResult(status="Succeeded", mode="Synthetic", device="cpu", peak_rss_bytes=1 << 30)
    assert implausibilities(cpu) == []


def _created(obj: dict[str, Any], when: str) -> dict[str, Any]:
    return {**obj, "metadata": {**obj.get("metadata", {}), "creationTimestamp": when}}


def test_a_job_without_a_pod_is_unschedulable_since_it_started() -> None:
    """No pod at all (its creations refused by a ResourceQuota or a webhook): aged from the
    Job's start, so that --unschedulable-timeout ends the wait, not activeDeadlineSeconds."""
    started = {
        **_created(JOB, "2026-01-01T11:50:00Z"),
        "status": {"startTime": "2026-01-01T11:55:00Z"},
    }
    out = classify(started, [], NOW)
    assert out.kind is OutcomeKind.Unschedulable and out.seconds_unschedulable == 300.0
    assert "no pod for 300 s" in out.message and "FailedCreate" in out.message
    assert not out.finished
    # Without a start time (a Job controller that has not seen it yet): from its creation.
    fresh = classify(_created(JOB, "2026-01-01T11:59:30Z"), [], NOW)
    assert fresh.kind is OutcomeKind.Unschedulable and fresh.seconds_unschedulable == 30.0


def test_a_resumed_job_is_aged_from_its_resumption() -> None:
    """A Job that waited suspended (Kueue) for an hour and was resumed a minute ago."""
    resumed = {
        **_created(JOB, "2026-01-01T11:00:00Z"),
        "status": {
            "conditions": [
                {
                    "type": "Suspended",
                    "status": "False",
                    "reason": "JobResumed",
                    "lastTransitionTime": "2026-01-01T11:59:00Z",
                }
            ]
        },
    }
    out = classify(resumed, [], NOW)
    assert out.kind is OutcomeKind.Unschedulable and out.seconds_unschedulable == 60.0
    suspended = {**resumed, "spec": {**resumed["spec"], "suspend": True}, "status": {}}
    assert classify(suspended, [], NOW).kind is OutcomeKind.Pending


def test_an_unbound_pod_without_a_scheduler_verdict_is_unschedulable_since_its_creation() -> None:
    """No scheduler wrote PodScheduled=False (none runs, or none for its schedulerName)."""
    unbound = _created(pod({"phase": "Pending"}, node=None), "2026-01-01T11:58:30Z")
    out = classify(JOB, [unbound], NOW)
    assert out.kind is OutcomeKind.Unschedulable and out.seconds_unschedulable == 90.0
    assert "not bound to a node for 90 s" in out.message and "default-scheduler" in out.message
    gated = {
        **unbound,
        "spec": {"schedulerName": "volcano"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
            ],
        },
    }
    out = classify(JOB, [gated], NOW)
    assert out.kind is OutcomeKind.Unschedulable and "reason SchedulingGated" in out.message
    assert "schedulerName volcano" in out.message
    # Bound and waiting for the kubelet (image pull, volumes): the Job's deadline governs.
    bound = _created(pod({"phase": "Pending"}), "2026-01-01T11:00:00Z")
    assert classify(JOB, [bound], NOW).kind is OutcomeKind.Pending


def test_an_evicted_pod_whose_container_was_killed_is_evicted_before_the_job_fails() -> None:
    """The kubelet kills an evicted pod's container (exit code 137, no result); the pod's
    reason decides even while the Job's Failed condition is still on its way."""
    evicted = pod(
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 137, "reason": "Error"}}}],
        }
    )
    for ended in (JOB, job(("Failed", "BackoffLimitExceeded"))):
        out = classify(ended, [evicted], NOW)
        assert out.kind is OutcomeKind.Evicted and "low on resource" in out.message
    # A result written before the eviction still counts.
    done = pod(
        {
            **evicted["status"],
            "containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": RESULT}}}],
        }
    )
    assert classify(JOB, [done], NOW).kind is OutcomeKind.Succeeded


def test_the_job_controllers_failure_target_decides_before_its_pod_is_gone() -> None:
    """Past activeDeadlineSeconds the Job controller sets FailureTarget (reason
    DeadlineExceeded), stops the pod (exit code 143) and sets Failed only once it is gone: the
    stopped pod is not a crash of the probe."""
    target = job(("FailureTarget", "DeadlineExceeded"))
    stopped = terminated(exitCode=143, reason="Error")
    out = classify(target, [stopped], NOW)
    assert out.kind is OutcomeKind.DeadlineExceeded and "930 s" in out.message
    # Decided as soon as the verdict is in, the pod still being stopped.
    running = classify(target, [pod({"phase": "Running"})], NOW)
    assert running.kind is OutcomeKind.DeadlineExceeded
    # SuccessCriteriaMet comes before Complete in the same way.
    met = job(("SuccessCriteriaMet", "CompletionsReached"))
    assert classify(met, [terminated(exitCode=0, message=RESULT)], NOW).kind is (
        OutcomeKind.Succeeded
    )


def test_a_container_stopped_by_a_signal_waits_for_the_jobs_verdict() -> None:
    """The Job controller's FailureTarget and the pod it stopped come through separate
    watches: a container ended by SIGTERM or SIGKILL without a result a moment ago waits for the
    Job's verdict; once that is in, or after the grace period, it decides."""
    stopped = terminated(exitCode=143, reason="Error", finishedAt="2026-01-01T11:59:55Z")
    early = classify(JOB, [stopped], NOW)
    assert early.kind is OutcomeKind.Pending and early.wait_seconds == 10.0
    assert "exit code 143" in early.message
    verdict = classify(job(("FailureTarget", "DeadlineExceeded")), [stopped], NOW)
    assert verdict.kind is OutcomeKind.DeadlineExceeded
    late = datetime.datetime(2026, 1, 1, 12, 0, 10, tzinfo=datetime.UTC)
    assert classify(JOB, [stopped], late).kind is OutcomeKind.Failed
    # A crash of the probe itself (exit code 1) is its outcome at once.
    crash = terminated(exitCode=1, reason="Error", finishedAt="2026-01-01T11:59:55Z")
    assert classify(JOB, [crash], NOW).kind is OutcomeKind.Failed
