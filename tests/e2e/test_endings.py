"""Every way a measurement Job ends, and what the status says."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from tests.e2e.conftest import (
    GW,
    NS,
    PODS,
    QUICK_UNSCHEDULABLE,
    SCHEDULING_GRACE,
    Kubelet,
    busy_pod,
    condition,
    eventually,
    gpu_node,
    spec,
    workload,
)
from tests.e2e.probe_results import GIB, gpu_oom, gpu_success
from tests.e2e.test_lifecycle import phase_is


@pytest.mark.emulated_kubelet
async def test_cuda_oom_moves_to_the_next_larger_class(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("oom", spec()))
    start_operator()
    first = await kubelet.wait_job()
    assert first["metadata"]["labels"]["gpusizer.dev/gpu-class"] == "nvidia-l4"
    await kubelet.succeed(first, gpu_oom(), node="l4-1")
    second = await kubelet.wait_job(not_named={first["metadata"]["name"]})
    # Present classes first: the A100 80 GB node exists, the A100 40 GB does not.
    assert second["metadata"]["labels"]["gpusizer.dev/gpu-class"] == "nvidia-a100-80gb"

    async def remeasuring() -> Any:
        # The Job is created before the status naming it is written: wait for the status.
        obj = await cluster.get(GW, NS, "oom")
        m = ((obj or {}).get("status") or {}).get("measurement") or {}
        return obj if m.get("jobName") == second["metadata"]["name"] else None

    obj = await eventually(remeasuring, what="status of the second measurement")
    assert obj["status"]["phase"] == "Measuring"
    assert obj["status"]["measurement"]["outOfMemoryClasses"] == ["nvidia-l4"]
    assert "CUDA out of memory on nvidia-l4" in condition(obj, "Measured")["message"]
    await eventually(lambda: _gone(kubelet, first["metadata"]["name"]), what="old Job deleted")
    await kubelet.succeed(second, gpu_success(30 * GIB))
    ready = await eventually(lambda: phase_is(cluster, "oom", "Ready"))
    assert ready["status"]["recommendation"]["gpuClass"] == "nvidia-a100-80gb"
    assert ready["status"]["recommendation"]["basis"] == "Measurement"


@pytest.mark.emulated_kubelet
async def test_cuda_oom_on_the_largest_allowed_class_rejects(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("oom-max", spec(placement={"gpuClasses": ["nvidia-l4"]})))
    start_operator()
    job = await kubelet.wait_job()
    await kubelet.succeed(job, gpu_oom(), node="l4-1")
    rejected = await eventually(lambda: phase_is(cluster, "oom-max", "Rejected"))
    assert condition(rejected, "Stalled")["status"] == "True"
    assert condition(rejected, "HeadroomSufficient")["reason"] == "OutOfMemory"
    assert "no larger allowed class" in condition(rejected, "Ready")["message"]


async def _gone(kubelet: Kubelet, name: str) -> bool:
    return all(j["metadata"]["name"] != name for j in await kubelet.jobs())


@pytest.mark.emulated_kubelet
async def test_deadline_exceeded(cluster, start_operator, kubelet: Kubelet) -> None:
    # The shortest timeout the API allows: on the control plane the real Job controller ends
    # the Job activeDeadlineSeconds (timeout + 30 s grace) after its start.
    await cluster.create(GW, workload("slow", spec(measurement={"timeoutSeconds": 30})))
    start_operator()
    job = await kubelet.wait_job()
    assert job["spec"]["activeDeadlineSeconds"] == 60
    await kubelet.running(job, node="l4-1")
    await kubelet.job_condition(
        job, "Failed", "DeadlineExceeded", "Job was active longer than specified deadline"
    )
    failed = await eventually(lambda: phase_is(cluster, "slow", "Failed"))
    assert condition(failed, "Measured")["reason"] == "DeadlineExceeded"
    assert condition(failed, "Stalled")["status"] == "True"
    assert failed["status"]["recommendation"]["basis"] == "Estimate"


@pytest.mark.emulated_kubelet
async def test_unschedulable_keeps_the_estimate(cluster, start_operator, kubelet: Kubelet) -> None:
    # Another team holds every GPU of the only L4 node: the class is there, the room is not.
    await cluster.create(PODS, busy_pod("l4-1", 8))
    await cluster.create(GW, workload("nowhere", spec()))
    start_operator(*QUICK_UNSCHEDULABLE)
    job = await kubelet.wait_job()
    since = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    await kubelet.unschedulable(job, since)
    obj = await eventually(lambda: phase_is(cluster, "nowhere", "Estimated"))
    # Nodes of the class exist (l4-1), so this is capacity, not a missing class.
    assert condition(obj, "Measured")["reason"] == "Unschedulable"
    assert (
        "nodes of class nvidia-l4 exist but none could run" in condition(obj, "Measured")["message"]
    )
    assert obj["status"]["recommendation"]["basis"] == "Estimate"
    assert condition(obj, "Stalled")["status"] == "True"
    await eventually(lambda: _gone(kubelet, job["metadata"]["name"]), what="Job deleted")


@pytest.mark.emulated_kubelet
async def test_host_oom_retries_once_with_more_memory(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("ram", spec()))
    start_operator()
    first = await kubelet.wait_job()
    await kubelet.oom_killed(first)
    second = await kubelet.wait_job(not_named={first["metadata"]["name"]})
    mem1 = int(first["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"])
    mem2 = int(second["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"])
    assert mem2 == 2 * mem1

    async def retrying() -> Any:
        # The new Job is created before the status saying why is written: wait for the status.
        obj = await cluster.get(GW, NS, "ram")
        return obj if condition(obj, "Measured").get("reason") == "HostOOMKilled" else None

    obj = await eventually(retrying, what="Measured reason HostOOMKilled")
    assert "host memory (RAM, not GPU memory" in condition(obj, "Measured")["message"]
    await kubelet.oom_killed(second)
    failed = await eventually(lambda: phase_is(cluster, "ram", "Failed"))
    assert condition(failed, "Measured")["reason"] == "HostOOMKilled"


@pytest.mark.emulated_kubelet
async def test_image_pull_failure(cluster, start_operator, kubelet: Kubelet) -> None:
    await cluster.create(GW, workload("pull", spec()))
    start_operator()
    job = await kubelet.wait_job()
    await kubelet.image_pull_failure(job)
    failed = await eventually(lambda: phase_is(cluster, "pull", "Failed"))
    assert condition(failed, "Measured")["reason"] == "ImagePullFailed"
    assert "ImagePullBackOff" in condition(failed, "Measured")["message"]


@pytest.mark.emulated_kubelet
async def test_evicted_pod_is_retried_once(cluster, start_operator, kubelet: Kubelet) -> None:
    await cluster.create(GW, workload("evict", spec()))
    start_operator()
    first = await kubelet.wait_job()
    await kubelet.evicted(first)
    second = await kubelet.wait_job(not_named={first["metadata"]["name"]})
    await kubelet.evicted(second)
    failed = await eventually(lambda: phase_is(cluster, "evict", "Failed"))
    assert condition(failed, "Measured")["reason"] == "Evicted"


@pytest.mark.emulated_kubelet  # a real kubelet may end the recreated pod first (image pull)
async def test_job_deleted_is_recreated_once(cluster, start_operator, kubelet: Kubelet) -> None:
    await cluster.create(GW, workload("gone", spec()))
    start_operator()
    job = await kubelet.wait_job()
    name = job["metadata"]["name"]
    await cluster.delete(("batch", "v1", "jobs"), NS, name)
    again = await eventually(lambda: _recreated(cluster, name), what="recreated Job")
    assert again["metadata"]["uid"] != job["metadata"]["uid"]

    async def marked() -> Any:
        # The Job is recreated before the status saying so is written: wait for the status.
        obj = await cluster.get(GW, NS, "gone")
        m = ((obj or {}).get("status") or {}).get("measurement") or {}
        return obj if m.get("recreated") is True else None

    await eventually(marked, what="measurement.recreated")
    await cluster.delete(("batch", "v1", "jobs"), NS, name)
    failed = await eventually(lambda: phase_is(cluster, "gone", "Failed"))
    assert condition(failed, "Measured")["reason"] == "JobDeleted"
    assert await kubelet.jobs() == []


async def _recreated(cluster, name: str):
    return await cluster.get(("batch", "v1", "jobs"), NS, name)


async def test_workload_deleted_deletes_its_job(cluster, start_operator, kubelet: Kubelet) -> None:
    await cluster.create(GW, workload("bye", spec()))
    start_operator()
    await kubelet.wait_job()
    await cluster.delete(GW, NS, "bye")
    await eventually(lambda: _no_jobs(kubelet), what="Job deleted by the operator")
    await eventually(lambda: _absent(cluster, "bye"), what="finalizer released")


async def _no_jobs(kubelet: Kubelet) -> bool:
    return not await kubelet.jobs()


async def _absent(cluster, name: str) -> bool:
    return await cluster.get(GW, NS, name) is None


@pytest.mark.emulated_kubelet
async def test_no_node_then_a_node_of_the_class_joins(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    """Unschedulable on an absent class keeps the estimate; when GPU Feature Discovery labels a
    node of that class, the measurement starts again with a new Job."""
    await cluster.create(
        GW, workload("later", spec(placement={"gpuClasses": ["nvidia-h100-80gb"]}))
    )
    # The second Job must be scheduled before its pod counts as unschedulable too.
    start_operator(*SCHEDULING_GRACE)
    first = await kubelet.wait_job()
    since = (datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=5)).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    await kubelet.unschedulable(first, since)
    waiting = await eventually(lambda: phase_is(cluster, "later", "Estimated"))
    assert condition(waiting, "Measured")["reason"] == "NoNodeOfClass"
    await eventually(lambda: _gone(kubelet, first["metadata"]["name"]), what="Job deleted")
    await cluster.create(("", "v1", "nodes"), gpu_node("h100-1", "NVIDIA-H100-80GB-HBM3", 81559))
    second = await kubelet.wait_job(not_named={first["metadata"]["name"]})
    assert second["metadata"]["labels"]["gpusizer.dev/gpu-class"] == "nvidia-h100-80gb"
    await kubelet.succeed(second, gpu_success(9 * GIB, total=81559 << 20), node="h100-1")
    ready = await eventually(lambda: phase_is(cluster, "later", "Ready"))
    assert ready["status"]["recommendation"]["presentInCluster"] is True
