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
from gpu_sizer.measurement.outcome import Outcome, OutcomeKind

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
        meta = {**body["metadata"], "uid": next(_uids), "creationTimestamp": "2026-01-01T00:00:00Z"}
        stored = {**body, "metadata": meta}
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
        #: Every Job shown, by uid (dropped ones included: their pods outlive them).
        self.all_jobs: dict[str, list[dict[str, Any]]] = {}

    def show_job(self, job: Mapping[str, Any]) -> None:
        self.all_jobs.setdefault(job["metadata"]["uid"], []).append(slim(job))
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

    def show_pod(self, job_uid: str, status: dict[str, Any], **meta: Any) -> None:
        """The pod the Job controller makes from the Job's template (its containers, its uid
        label, the controlling owner reference), in the status given."""
        template = {"containers": [{"name": "probe", "image": "i", "command": ["x"]}]}
        for job in self.all_jobs.get(job_uid, []):
            template = job["spec"]["template"]["spec"]
        pod = {
            "metadata": {
                "name": f"pod-{job_uid}",
                "uid": f"pod-{job_uid}",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"batch.kubernetes.io/controller-uid": job_uid},
                "ownerReferences": [{"kind": "Job", "uid": job_uid, "controller": True}],
                **meta,
            },
            "spec": {"nodeName": "n1", "containers": template["containers"]},
            "status": status,
        }
        self.pods.setdefault(job_uid, []).append(slim(pod))


def no_pod_yet(outcome: Outcome) -> bool:
    """The Job's outcome with no pod of it read: aged from the Job's start for the
    unschedulable timeout (0 s: the Job was created at NOW), never a result nor Missing."""
    return outcome.kind is OutcomeKind.Unschedulable and outcome.seconds_unschedulable == 0


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
    assert no_pod_yet(b.observe("ns", view, NOW))  # not Missing
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
    assert no_pod_yet(b.observe("ns", new, NOW))
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


SUCCESS = {
    "phase": "Succeeded",
    "containerStatuses": [
        {
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "message": '{"schema":"gpusizer.dev/probe-result/v1","status":"Succeeded",'
                    '"mode":"Synthetic","device":"cuda","peakDeviceUsedBytes":3221225472}',
                }
            }
        }
    ],
}


@pytest.mark.parametrize(
    ("forgery", "why"),
    [
        ({"labels": {}}, "batch.kubernetes.io/controller-uid"),
        ({"creationTimestamp": "2025-12-31T23:59:59Z"}, "created before the Job"),
        (
            {
                "ownerReferences": [
                    {"kind": "Job", "uid": "UID", "controller": True},
                    {"kind": "ReplicaSet", "uid": "x", "controller": True},
                ]
            },
            "controlling ownerReference",
        ),
    ],
)
async def test_a_pod_that_only_names_the_job_as_owner_is_never_read(
    forgery: dict[str, Any], why: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Anyone who may create pods can name a Job as their owner; the operator reads only the
    pod the Job controller made: its uid label, one controller (the Job), the template's
    container, created after the Job."""
    b, api, watch, _ = backend()
    view, _ = await b.start(manifest())
    watch.show_job(api.jobs["gpusizer-w-1"])
    if "ownerReferences" in forgery:
        for ref in forgery["ownerReferences"]:
            ref["uid"] = view.uid if ref["uid"] == "UID" else ref["uid"]
    watch.show_pod(view.uid, SUCCESS, **forgery)
    assert no_pod_yet(b.observe("ns", view, NOW))
    assert why in caplog.text and "its result is ignored" in caplog.text


async def test_a_pod_running_another_image_or_command_is_not_the_jobs_run() -> None:
    b, api, watch, _ = backend()
    view, _ = await b.start(manifest())
    job = api.jobs["gpusizer-w-1"]
    watch.show_job(job)
    forged = slim(
        {
            "metadata": {
                "name": "forged",
                "uid": "forged",
                "creationTimestamp": "2026-01-01T00:00:01Z",
                "labels": {"batch.kubernetes.io/controller-uid": view.uid},
                "ownerReferences": [{"kind": "Job", "uid": view.uid, "controller": True}],
            },
            "spec": {"containers": [{"name": "probe", "image": "evil:1", "command": ["echo"]}]},
            "status": SUCCESS,
        }
    )
    watch.pods.setdefault(view.uid, []).append(forged)
    assert no_pod_yet(b.observe("ns", view, NOW))
    watch.show_pod(view.uid, SUCCESS)  # the Job controller's own pod
    assert b.observe("ns", view, NOW).kind is OutcomeKind.Succeeded


def operator_manifest(owner: str = "w-uid") -> dict[str, Any]:
    req = JobRequest(
        "gpu-sizer",
        "w",
        owner,
        spec_hash(SPEC),
        DEFAULT_CATALOG[0],
        1,
        4 * GIB,
        "i",
        "gpusizer-w-1",
        workload_namespace="ns",
    )
    return job_manifest(SPEC, req)


async def test_a_job_in_the_operators_namespace_names_its_workload_in_annotations() -> None:
    """No owner reference across namespaces (the garbage collector would delete the Job): the
    annotations say whose it is, and only a Job in the operator's own namespace is read so."""
    from gpu_sizer.measurement.backends import workload_key
    from gpu_sizer.measurement.job import job_owner

    body = operator_manifest()
    meta = body["metadata"]
    assert "ownerReferences" not in meta and meta["namespace"] == "gpu-sizer"
    assert meta["annotations"]["gpusizer.dev/workload-namespace"] == "ns"
    assert meta["annotations"]["gpusizer.dev/workload-uid"] == "w-uid"
    assert job_owner(body, "gpu-sizer") == ("ns", "w", "w-uid")
    assert job_owner(body) is None and workload_key(body) == ("gpu-sizer", "w")
    assert workload_key(body, "gpu-sizer") == ("ns", "w")
    # The same annotations on a Job in a tenant's namespace are the tenant's words: ignored.
    forged = {**body, "metadata": {**meta, "namespace": "tenant"}}
    assert job_owner(forged, "gpu-sizer") is None
    assert workload_key(forged, "gpu-sizer") == ("tenant", "w")


async def test_the_backend_finds_adopts_and_deletes_a_job_in_the_operators_namespace() -> None:
    clock = [0.0]
    b = KubernetesJobBackend(clock=lambda: clock[0], trusted_namespace="gpu-sizer")
    api, watch = FakeApi(), Watch()
    b.attach(api, watch.jobs, watch.pods)
    view, created = await b.start(operator_manifest())
    assert created and view.namespace == "gpu-sizer" and view.workload_namespace == "ns"
    assert [j.name for j in b.jobs("ns", "w")] == ["gpusizer-w-1"]
    assert b.live_jobs() == {"ns": 1}
    again, created = await b.start(operator_manifest())
    assert not created and again.uid == view.uid
    with pytest.raises(JobConflict):
        await b.start(operator_manifest(owner="someone-else"))
    await b.delete("ns", view)
    assert api.jobs == {}
