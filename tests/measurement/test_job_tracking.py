"""The Kubernetes backend's view of Jobs: the watch, corrected by the operator's own confirmed
writes until the watch shows them; pods matched by the Job's uid (issue 13, items 2 and 3)."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Mapping
from typing import Any

import pytest

from gpu_sizer.api import parse_spec, spec_hash
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.measurement.backends import (
    EXPECTATION_SECONDS,
    JobConflict,
    JobExists,
    JobTerminating,
    KubernetesJobBackend,
    slim,
)
from gpu_sizer.measurement.job import GIB, JobRequest, job_manifest
from gpu_sizer.measurement.outcome import OutcomeKind

SPEC = parse_spec(
    {
        "model": {"name": "m", "parameterCount": 1_000_000_000, "dtype": "bfloat16"},
        "inference": {"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 4},
    }
)
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
_uids = (f"job-uid-{i}" for i in itertools.count(1))


def manifest(name: str = "gpusizer-w-1", owner: str = "w-uid") -> dict[str, Any]:
    req = JobRequest("ns", "w", owner, spec_hash(SPEC), DEFAULT_CATALOG[0], 1, 4 * GIB, "i", name)
    return job_manifest(SPEC, req)


class FakeApi:
    """Stores Jobs by name, as an API server would; no watch."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []

    async def create_job(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls.append("create")
        name = body["metadata"]["name"]
        if name in self.jobs:
            raise JobExists(name)
        stored = {**body, "metadata": {**body["metadata"], "uid": next(_uids)}}
        self.jobs[name] = stored
        return stored

    async def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.calls.append("read")
        return self.jobs.get(name)

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append("delete")
        if name in self.jobs and self.jobs[name]["metadata"]["uid"] == uid:
            del self.jobs[name]


class Watch:
    """The indexes as kopf keeps them, fed by hand (delayed: only what the test shows)."""

    def __init__(self) -> None:
        self.jobs: dict[Any, list[dict[str, Any]]] = {}
        self.pods: dict[Any, list[dict[str, Any]]] = {}

    def show_job(self, job: Mapping[str, Any]) -> None:
        self.jobs[("ns", "w")] = [
            j
            for j in self.jobs.get(("ns", "w"), [])
            if j["metadata"]["uid"] != job["metadata"]["uid"]
        ] + [slim(job)]

    def drop_job(self, job: Mapping[str, Any]) -> None:
        uid = job["metadata"]["uid"]
        self.jobs[("ns", "w")] = [
            j for j in self.jobs.get(("ns", "w"), []) if j["metadata"]["uid"] != uid
        ]

    def show_pod(self, job_uid: str, status: dict[str, Any]) -> None:
        pod = {
            "metadata": {
                "name": f"pod-{job_uid}",
                "uid": f"pod-{job_uid}",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "ownerReferences": [{"kind": "Job", "uid": job_uid, "controller": True}],
            },
            "spec": {"nodeName": "n1"},
            "status": status,
        }
        self.pods.setdefault(job_uid, []).append(slim(pod))


def backend() -> tuple[KubernetesJobBackend, FakeApi, Watch, list[float]]:
    clock = [0.0]
    b = KubernetesJobBackend(clock=lambda: clock[0])
    api, watch = FakeApi(), Watch()
    b.attach(api, watch.jobs, watch.pods)
    return b, api, watch, clock


async def test_a_job_just_created_is_known_before_the_watch_shows_it() -> None:
    b, api, watch, _ = backend()
    view, created = await b.start(manifest())
    assert created and [j.name for j in b.jobs("ns", "w")] == ["gpusizer-w-1"]
    assert b.observe("ns", view, NOW).kind is OutcomeKind.Pending  # not Missing
    watch.show_job(api.jobs["gpusizer-w-1"])
    b.seen("ADDED", api.jobs["gpusizer-w-1"])
    assert [j.uid for j in b.jobs("ns", "w")] == [view.uid]


async def test_a_job_just_deleted_is_gone_though_the_watch_still_shows_it() -> None:
    b, api, watch, _ = backend()
    view, _ = await b.start(manifest())
    watch.show_job(api.jobs["gpusizer-w-1"])
    await b.delete("ns", view)
    assert b.jobs("ns", "w") == [], "the lagging watch must not bring it back"
    assert b.observe("ns", view, NOW).kind is OutcomeKind.Missing


async def test_the_same_name_again_waits_for_the_old_job_to_go() -> None:
    """A spec changed A -> B -> A: A's Job name comes back while A's old Job is terminating."""
    b, api, watch, _ = backend()
    old, _ = await b.start(manifest())
    watch.show_job(api.jobs["gpusizer-w-1"])
    api.jobs["gpusizer-w-1"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(JobTerminating):
        await b.start(manifest())
    del api.jobs["gpusizer-w-1"]
    new, created = await b.start(manifest())
    assert created and new.uid != old.uid


async def test_pods_are_matched_by_the_jobs_uid_never_its_name() -> None:
    b, api, watch, _ = backend()
    old, _ = await b.start(manifest())
    watch.show_job(api.jobs["gpusizer-w-1"])
    await b.delete("ns", old)
    watch.drop_job(api.jobs.get("gpusizer-w-1") or {"metadata": {"uid": old.uid}})
    new, _ = await b.start(manifest())  # same name, new uid
    watch.show_job(api.jobs["gpusizer-w-1"])
    # The old Job's pod, being killed, ends with exit code 143 after the new Job exists.
    killed = {"exitCode": 143, "reason": "Error", "message": ""}
    watch.show_pod(
        old.uid, {"phase": "Failed", "containerStatuses": [{"state": {"terminated": killed}}]}
    )
    assert b.observe("ns", new, NOW).kind is OutcomeKind.Pending
    watch.show_pod(new.uid, {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]})
    assert b.observe("ns", new, NOW).kind is OutcomeKind.Running


async def test_another_objects_job_of_our_name_is_never_adopted() -> None:
    b, _, _, _ = backend()
    await b.start(manifest(owner="someone-else"))
    with pytest.raises(JobConflict, match="someone-else"):
        await b.start(manifest(owner="w-uid"))


async def test_expectations_end_when_the_watch_confirms_or_time_runs_out() -> None:
    b, _, watch, clock = backend()
    view, _ = await b.start(manifest())
    await b.delete("ns", view)
    clock[0] = EXPECTATION_SECONDS + 1
    watch.show_job({**manifest(), "metadata": {**manifest()["metadata"], "uid": view.uid}})
    # A watch that never reported the deletion (re-listed meanwhile) is believed again.
    assert [j.uid for j in b.jobs("ns", "w")] == [view.uid]
