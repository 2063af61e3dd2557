"""How a measurement Job ended (or why it has not), from the Job and its pods. Pure.

Inputs are the objects as the API returns them (plain dicts). Field meanings: Kubernetes API
reference ("Job v1 batch" conditions ``Complete`` / ``Failed`` with reason ``DeadlineExceeded``,
preceded since 1.31 by ``SuccessCriteriaMet`` / ``FailureTarget`` while the Job controller
stops the remaining pods, Kubernetes docs "Jobs: Job termination and cleanup";
``status.startTime`` reset when a suspended Job resumes; "Pod v1 core"
``status.containerStatuses[].state``, ``spec.nodeName`` set by the scheduler's binding,
``PodScheduled`` condition reason ``Unschedulable``, pod ``status.reason: Evicted``), and the
kubelet's image pull reasons (``ErrImagePull``, ``ImagePullBackOff``, ``InvalidImageName``,
``ErrImageNeverPull``).

A measurement that cannot start is :attr:`OutcomeKind.Unschedulable` however it shows: the
scheduler's ``PodScheduled=False`` condition (aged from its transition), a pod no scheduler has
bound or judged (aged from the pod's creation: a scheduler that is missing, stuck or not the
one ``schedulerName`` names writes no condition), or a Job that has no pod at all (aged from the
Job's start: the Job controller's pod creations are refused, by a ResourceQuota or an
admission webhook, and only the Job's ``FailedCreate`` Events say so). The operator's
``--unschedulable-timeout`` then ends the wait instead of the Job's ``activeDeadlineSeconds``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpu_sizer.api.times import parse_time
from gpu_sizer.measurement.job import LABEL_KUEUE_QUEUE
from gpu_sizer.measurement.result import ImplausibleResult, InvalidResult, ProbeResult, parse_result

__all__ = ["Outcome", "OutcomeKind", "classify", "parse_time"]

#: How long after a Job ended (its ``Complete`` or ``Failed`` condition) its pod's final state
#: may still be on its way: Jobs and pods come through separate watches, so the Job's condition
#: can arrive first. Within this window a Job that ended without a known pod result is waited
#: for, not judged; after it, the result is taken as lost.
POD_RESULT_GRACE_SECONDS = 15.0

IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)


class OutcomeKind(StrEnum):
    """Where a measurement stands. Values are also the ``reason`` people read in the status."""

    Missing = "JobMissing"
    Pending = "Pending"
    Running = "Running"
    Unschedulable = "Unschedulable"
    Succeeded = "Succeeded"
    DeadlineExceeded = "DeadlineExceeded"
    HostOOMKilled = "HostOOMKilled"
    ImagePullFailed = "ImagePullFailed"
    Evicted = "Evicted"
    Failed = "Failed"


@dataclass(frozen=True)
class Outcome:
    """One observation. ``result`` is the probe's report when one was read; ``since`` is when
    the pod became unschedulable (RFC 3339); ``seconds_unschedulable`` its age at ``now``."""

    kind: OutcomeKind
    message: str = ""
    result: ProbeResult | None = None
    node_name: str | None = None
    seconds_unschedulable: float = 0.0
    #: Pending only because the backend queues runs (local backend at its concurrency limit).
    queued: bool = False
    #: Seconds after which this observation changes by time alone (a Job that ended with its
    #: pod's result still on its way); None when only a new event can change it.
    wait_seconds: float | None = None

    @property
    def finished(self) -> bool:
        """True when the Job will not change any more."""
        return self.kind not in (
            OutcomeKind.Pending,
            OutcomeKind.Running,
            OutcomeKind.Unschedulable,
            OutcomeKind.Missing,
        )


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _cond(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for c in _conditions(obj):
        if c.get("type") == type_ and c.get("status") == "True":
            return c
    return None


def _failed(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The Job controller's failure verdict: ``Failed``, or ``FailureTarget``, which it sets
    first (Kubernetes 1.31+) with the same reason (``DeadlineExceeded``,
    ``BackoffLimitExceeded``) and keeps while it stops the pods; ``Failed`` follows once they
    are gone. A pod it stopped that way (exit code 143) must not decide the outcome."""
    return _cond(job, "Failed") or _cond(job, "FailureTarget")


def _succeeded(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``Complete``, or ``SuccessCriteriaMet``, which the Job controller sets first (1.31+)."""
    return _cond(job, "Complete") or _cond(job, "SuccessCriteriaMet")


#: Exit codes of a container stopped by a signal: SIGTERM (the kubelet stopping it) and SIGKILL.
SIGNAL_EXIT_CODES = frozenset({128 + 15, 128 + 9})


def _stopped_without_verdict(
    term: Mapping[str, Any], outcome: Outcome, now: datetime
) -> Outcome | None:
    """A probe container stopped by a signal, without a result, is someone else's decision:
    the Job controller's (past activeDeadlineSeconds it sets FailureTarget, then stops the pod)
    or a deletion's. Jobs and pods come through separate watches, so the pod's end can arrive
    before the Job's verdict: it is waited for during :data:`POD_RESULT_GRACE_SECONDS` after the
    container finished, then the pod's end is taken as the outcome."""
    if outcome.kind is not OutcomeKind.Failed or term.get("exitCode") not in SIGNAL_EXIT_CODES:
        return None
    finished = parse_time(term.get("finishedAt"))
    waited = (now - finished).total_seconds() if finished is not None else None
    if waited is None or waited >= POD_RESULT_GRACE_SECONDS:
        return None
    return Outcome(
        OutcomeKind.Pending,
        f"the probe container was stopped (exit code {term.get('exitCode')}); waiting for the "
        "Job's verdict",
        node_name=outcome.node_name,
        wait_seconds=POD_RESULT_GRACE_SECONDS - max(0.0, waited),
    )


def _terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return dict(term)
    return None


def _waiting_reason(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in IMAGE_PULL_REASONS:
            return str(waiting["reason"]), str(waiting.get("message") or "")
    return None


def _from_terminated(term: Mapping[str, Any], node: str | None) -> Outcome:
    reason = str(term.get("reason") or "")
    code = term.get("exitCode")
    message = str(term.get("message") or "")
    if reason == "OOMKilled":
        return Outcome(
            OutcomeKind.HostOOMKilled,
            "the probe container was OOMKilled for host memory (RAM, not GPU memory; "
            f"exit code {code})",
            node_name=node,
        )
    if message:
        try:
            result = parse_result(message.strip())
        except ImplausibleResult as exc:
            return Outcome(OutcomeKind.Failed, str(exc), node_name=node)
        except InvalidResult as exc:
            if code == 0:
                return Outcome(OutcomeKind.Failed, f"probe exited 0 but {exc}", node_name=node)
        else:
            return Outcome(OutcomeKind.Succeeded, result.status, result=result, node_name=node)
    tail = message.strip().splitlines()[-1][:300] if message.strip() else "no output"
    return Outcome(
        OutcomeKind.Failed,
        f"probe container exited with code {code} ({reason or 'Error'}): {tail}",
        node_name=node,
    )


def classify(
    job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], now: datetime
) -> Outcome:
    """Classify a measurement Job from the Job and its pods (newest pod decides).

    A result in the termination message wins over the Job's own failure conditions, because the
    probe writes ``Timeout`` or ``OutOfMemory`` results before Kubernetes gives up on the Job.
    A Job that ended without a terminated pod in view is waited for during
    :data:`POD_RESULT_GRACE_SECONDS` after its condition's ``lastTransitionTime``.
    """
    if job is None:
        return Outcome(OutcomeKind.Missing, "the measurement Job does not exist")
    ordered = sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")))
    pod = ordered[-1] if ordered else None
    node = ((pod.get("spec") or {}).get("nodeName") if pod else None) or None
    term = _terminated(pod) if pod is not None else None
    ended = _failed(job) or _succeeded(job)
    if ended is not None and term is None:
        since = parse_time(ended.get("lastTransitionTime"))
        waited = (now - since).total_seconds() if since is not None else None
        if waited is not None and waited < POD_RESULT_GRACE_SECONDS:
            return Outcome(
                OutcomeKind.Pending,
                f"the Job ended ({ended.get('type')}); waiting for its pod's result",
                node_name=node,
                wait_seconds=POD_RESULT_GRACE_SECONDS - max(0.0, waited),
            )
    if pod is not None:
        pstatus = pod.get("status") or {}
        evicted = pstatus.get("reason") == "Evicted"
        if term is not None:
            outcome = _from_terminated(term, node)
            # The kubelet kills an evicted pod's container (exit code 137 and no result): the
            # pod's reason says why, whether or not the Job's Failed condition is in yet.
            if outcome.kind is not OutcomeKind.Failed or not (evicted or _failed(job)):
                stopped = _stopped_without_verdict(term, outcome, now)
                return stopped if stopped is not None and not evicted else outcome
        if evicted:
            return Outcome(
                OutcomeKind.Evicted,
                f"pod evicted: {pstatus.get('message') or 'no message'}",
                node_name=node,
            )
        pull = _waiting_reason(pod)
        if pull is not None:
            return Outcome(OutcomeKind.ImagePullFailed, f"{pull[0]}: {pull[1]}", node_name=node)
    failed = _failed(job)
    if failed is not None:
        if failed.get("reason") == "DeadlineExceeded":
            return Outcome(
                OutcomeKind.DeadlineExceeded,
                "the Job ran past activeDeadlineSeconds "
                f"({(job.get('spec') or {}).get('activeDeadlineSeconds')} s) without a result",
                node_name=node,
            )
        if term is not None:
            return _from_terminated(term, node)
        return Outcome(
            OutcomeKind.Failed,
            f"Job failed ({failed.get('reason')}): {failed.get('message') or 'no message'}",
            node_name=node,
        )
    if _succeeded(job) is not None:
        return Outcome(
            OutcomeKind.Failed,
            "the Job completed but its pod (and the result) is gone",
            node_name=node,
        )
    if pod is None and (job.get("spec") or {}).get("suspend"):
        queue = ((job.get("metadata") or {}).get("labels") or {}).get(LABEL_KUEUE_QUEUE)
        return Outcome(
            OutcomeKind.Pending,
            f"queued in Kueue LocalQueue {queue}: the Job is suspended until Kueue admits it"
            if queue
            else "the Job is suspended (spec.suspend); it runs once resumed",
            queued=True,
        )
    if pod is None:
        return _without_pod(job, now)
    for c in _conditions(pod):
        if (c.get("type"), c.get("status"), c.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            since = parse_time(c.get("lastTransitionTime")) or now
            return Outcome(
                OutcomeKind.Unschedulable,
                str(c.get("message") or "unschedulable"),
                seconds_unschedulable=max(0.0, (now - since).total_seconds()),
            )
    if (pod.get("status") or {}).get("phase") == "Running":
        return Outcome(OutcomeKind.Running, f"running on {node}", node_name=node)
    if node is None:
        return _unbound(pod, now)
    return Outcome(OutcomeKind.Pending, "pod pending", node_name=node)


def _age(since: datetime | None, now: datetime) -> float:
    return max(0.0, (now - since).total_seconds()) if since is not None else 0.0


def _without_pod(job: Mapping[str, Any], now: datetime) -> Outcome:
    """A running (not suspended) Job with no pod: unschedulable since the Job started, or since
    it was created when it shows no start (``status.startTime`` is reset when a suspended Job
    resumes, so a Job that waited in Kueue is aged from its admission, not its creation)."""
    status = job.get("status") or {}
    since = parse_time(status.get("startTime")) or parse_time(
        (job.get("metadata") or {}).get("creationTimestamp")
    )
    for c in _conditions(job):
        if c.get("type") == "Suspended" and c.get("status") == "False":
            resumed = parse_time(c.get("lastTransitionTime"))
            if resumed is not None and (since is None or resumed > since):
                since = resumed
    if since is None:
        return Outcome(OutcomeKind.Pending, "waiting for the Job's pod")
    seconds = _age(since, now)
    return Outcome(
        OutcomeKind.Unschedulable,
        f"the Job has had no pod for {seconds:.0f} s (the Job controller's pod creations "
        "refused, by a ResourceQuota or an admission webhook, or no Job controller running; "
        "kubectl describe job shows its FailedCreate events)",
        seconds_unschedulable=seconds,
    )


def _unbound(pod: Mapping[str, Any], now: datetime) -> Outcome:
    """A pending pod no scheduler has bound to a node, without the scheduler's
    ``PodScheduled=False, Unschedulable`` verdict: aged from its creation."""
    meta = pod.get("metadata") or {}
    since = parse_time(meta.get("creationTimestamp"))
    if since is None:
        return Outcome(OutcomeKind.Pending, "pod pending")
    seconds = _age(since, now)
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    why = next(
        (
            f"PodScheduled={c.get('status')}, reason {c.get('reason')}"
            for c in _conditions(pod)
            if c.get("type") == "PodScheduled" and c.get("reason")
        ),
        "no scheduling decision",
    )
    return Outcome(
        OutcomeKind.Unschedulable,
        f"pod {meta.get('name') or '?'} not bound to a node for {seconds:.0f} s ({why}; "
        f"schedulerName {scheduler})",
        seconds_unschedulable=seconds,
    )
