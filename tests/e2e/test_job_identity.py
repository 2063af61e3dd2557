"""Each GPUWorkload gets its own measurement Job: never shared, never adopted from another owner."""

from __future__ import annotations

from typing import Any

from gpu_sizer_testbed.emulator import LoopbackCluster

from gpu_sizer.api import parse_spec, spec_hash
from gpu_sizer.measurement.job import GIB, job_name
from tests.e2e.conftest import (
    EVENTS,
    GW,
    JOBS,
    NS,
    Kubelet,
    eventually,
    real_namespace,
    spec,
    workload,
)
from tests.e2e.real_cluster import RealCluster


async def _job_of(cluster: LoopbackCluster, name: str) -> Any:
    obj = await cluster.get(GW, NS, name)
    return (((obj or {}).get("status") or {}).get("measurement") or {}).get("jobName")


async def test_names_alike_in_their_first_42_characters_get_separate_jobs(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    one, two = "x" * 44 + "-team-one", "x" * 44 + "-team-two"
    w1 = await cluster.create(GW, workload(one, spec()))
    w2 = await cluster.create(GW, workload(two, spec()))
    start_operator()
    j1 = await eventually(lambda: _job_of(cluster, one), what="team-one's Job")
    j2 = await eventually(lambda: _job_of(cluster, two), what="team-two's Job")
    assert j1 != j2
    jobs = {
        j["metadata"]["name"]: j
        for j in await eventually(lambda: _two_jobs(kubelet), what="two Jobs")
    }
    assert jobs[j1]["metadata"]["ownerReferences"][0]["uid"] == w1["metadata"]["uid"]
    assert jobs[j2]["metadata"]["ownerReferences"][0]["uid"] == w2["metadata"]["uid"]
    await cluster.delete(GW, NS, one)

    async def only_two_left() -> bool:
        return [j["metadata"]["name"] for j in await kubelet.jobs()] == [j2]

    await eventually(only_two_left, what="team-one's Job deleted, team-two's kept")


async def _two_jobs(kubelet: Kubelet) -> list[dict[str, Any]] | None:
    jobs = await kubelet.jobs()
    return jobs if len(jobs) == 2 else None


async def test_a_job_of_our_name_owned_by_another_object_is_reported_not_adopted(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    body = spec()
    created = await cluster.create(GW, workload("victim", body))
    uid = created["metadata"]["uid"]
    name = job_name(
        "victim",
        spec_hash(parse_spec(body)),
        "nvidia-l4",
        4 * GIB,
        namespace=real_namespace(cluster),  # the digest covers the API server's namespace
        uid=uid,
    )
    # Another controller's object that owns a Job of that name (a ConfigMap stands in for it:
    # on a real API server an owner must exist, or the garbage collector deletes the Job; the
    # emulator has neither ConfigMaps nor a garbage collector).
    owner_uid = "another-uid"
    if isinstance(cluster, RealCluster):
        owner = await cluster.create(
            ("", "v1", "configmaps"),
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "someone-else", "namespace": NS},
            },
        )
        owner_uid = owner["metadata"]["uid"]
    squatter = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "gpu-sizer"},
            # Another controller's Job (a GPUWorkload's whose owner is gone would be an orphan,
            # deleted by the garbage collector and by the operator alike).
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "someone-else",
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "step", "image": "pipeline-step"}],
                }
            },
        },
    }
    await cluster.create(JOBS, squatter)
    proc = start_operator()

    async def conflict_event() -> Any:
        events = await cluster.list(EVENTS, NS)
        return [e for e in events if e.get("reason") == "JobNameConflict"]

    (event, *_) = await eventually(conflict_event, what="a JobNameConflict Event")
    assert name in event["message"] and owner_uid in event["message"]
    assert event["type"] == "Warning"
    # Not adopted: the status never names the other object's Job.
    assert await _job_of(cluster, "victim") is None
    assert "adopted existing" not in proc.tail(400)
