"""The cluster's own scheduling policy on measurement Jobs (issue 15, item 2): a PriorityClass
for the probe pod, and Kueue's queue label with the Job created suspended."""

from __future__ import annotations

from dataclasses import replace

import kubernetes_validate
import pytest

from gpu_sizer.measurement.job import LABEL_KUEUE_QUEUE, JobRequest, job_manifest
from tests.measurement.test_job import GIB, H100, SPEC, manifest


def _request() -> JobRequest:
    doc = manifest()
    meta = doc["metadata"]
    return JobRequest(
        namespace=meta["namespace"],
        workload="llama",
        workload_uid="0b7e-uid",
        spec_hash=meta["labels"]["gpusizer.dev/spec-hash"],
        gpu_class=H100,
        gpus=2,
        memory_bytes=18 * GIB,
        image="registry.example/gpu-sizer:1",
        name=meta["name"],
    )


def test_plain_jobs_have_no_priority_class_queue_label_or_suspend() -> None:
    doc = job_manifest(SPEC, _request())
    assert "priorityClassName" not in doc["spec"]["template"]["spec"]
    assert LABEL_KUEUE_QUEUE not in doc["metadata"]["labels"]
    assert "suspend" not in doc["spec"]


@pytest.mark.parametrize("version", ["1.30", "1.31"])
def test_priority_class_and_kueue_queue(version: str) -> None:
    req = replace(_request(), priority_class_name="gpu-sizer-low", kueue_queue="team-a")
    doc = job_manifest(SPEC, req)
    assert doc["spec"]["template"]["spec"]["priorityClassName"] == "gpu-sizer-low"
    # Kueue reads the label on the Job (kueue.x-k8s.io/queue-name) and admits suspended Jobs.
    assert doc["metadata"]["labels"][LABEL_KUEUE_QUEUE] == "team-a"
    assert LABEL_KUEUE_QUEUE not in doc["spec"]["template"]["metadata"]["labels"]
    assert doc["spec"]["suspend"] is True
    kubernetes_validate.validate(doc, version, strict=True)


def test_a_suspended_job_waits_in_its_kueue_queue() -> None:
    import datetime

    from gpu_sizer.measurement.outcome import OutcomeKind, classify

    doc = job_manifest(SPEC, replace(_request(), kueue_queue="team-a"))
    outcome = classify(doc, [], datetime.datetime.now(datetime.UTC))
    assert outcome.kind is OutcomeKind.Pending and outcome.queued
    assert "Kueue LocalQueue team-a" in outcome.message
    resumed = {**doc, "spec": {**doc["spec"], "suspend": False}}
    assert not classify(resumed, [], datetime.datetime.now(datetime.UTC)).queued
