"""Shared measurement records: one Job and one GPUMeasurement for the same spec in two
namespaces, a namespace that opts out, a deleted record re-measured, a probe image change
re-measured, an expired record not reused, and a restart with a shared measurement in flight
that starts no duplicate. A measurement another namespace may reuse runs in the operator's own
namespace (``--operator-namespace``), where no tenant may create pods: its Job names its
workload in annotations; a result from a tenant's namespace stays that namespace's own
(test_record_trust.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.e2e.conftest import (
    GW,
    NODES,
    NS,
    RECORDS,
    Kubelet,
    condition,
    eventually,
    logged,
    real_namespace,
    spec,
    workload,
)
from tests.e2e.probe_results import GIB, gpu_oom, gpu_success

L4_TOTAL = 23034 << 20
OTHER = "team-b"
#: The operator's own namespace (logical name): measurements that may be shared run there.
OPERATOR_NS = "gpu-sizer"
KEY_LABEL = "gpusizer.dev/measurement-key"
WORKLOAD_NS = "gpusizer.dev/workload-namespace"


async def sharing(cluster) -> tuple[str, ...]:
    """The operator's flags for shared records, with its own namespace (created on a real API
    server, as the chart's release namespace exists before the operator starts)."""
    namespace = real_namespace(cluster, OPERATOR_NS)
    ensure = getattr(cluster, "_ensure_namespace", None)
    if ensure is not None:
        await ensure(namespace)
    return ("--measurement-sharing", "Enabled", "--operator-namespace", namespace)


async def _jobs(kubelet: Kubelet) -> list[dict[str, Any]]:
    return [
        *(await kubelet.jobs(NS)),
        *(await kubelet.jobs(OTHER)),
        *(await kubelet.jobs(OPERATOR_NS)),
    ]


def workload_ns(cluster, job: dict[str, Any]) -> str:
    """The logical namespace of the workload a measurement Job belongs to (its annotation in
    the operator's namespace, else the Job's own namespace)."""
    meta = job["metadata"]
    real = (meta.get("annotations") or {}).get(WORKLOAD_NS) or meta["namespace"]
    return next((ns for ns in (NS, OTHER) if real_namespace(cluster, ns) == real), real)


async def _status(cluster, name: str, namespace: str) -> dict[str, Any]:
    return (await cluster.get(GW, namespace, name) or {}).get("status") or {}


async def _ready(cluster, name: str, namespace: str) -> dict[str, Any] | None:
    status = await _status(cluster, name, namespace)
    return status if status.get("phase") == "Ready" else None


async def _measured_reason(cluster, name: str, namespace: str, reason: str) -> Any:
    return condition(await cluster.get(GW, namespace, name), "Measured").get("reason") == reason


async def _measured_condition(
    cluster, name: str, namespace: str, reason: str
) -> dict[str, Any] | None:
    measured = condition(await cluster.get(GW, namespace, name), "Measured")
    return measured if measured.get("reason") == reason else None


async def _one_job(kubelet: Kubelet, unlike: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    async def find() -> dict[str, Any] | None:
        jobs = [j for j in await _jobs(kubelet) if j["metadata"]["name"] not in unlike]
        return jobs[0] if jobs else None

    return await eventually(find, what="a measurement Job")


async def _records(cluster) -> list[dict[str, Any]]:
    return list(await cluster.list(RECORDS, None))


def fresh(result: str) -> str:
    """A probe result document as a run ending now reports it (the fixtures' dates are months
    old; a reader checks that a record's result did not complete before its Job started)."""
    doc = json.loads(result)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc["completedAt"] = now
    doc.pop("startedAt", None)
    return json.dumps(doc, separators=(",", ":"))


def _fresh_success(peak: int) -> str:
    """gpu_success, completed now (its fixture's completedAt is months old)."""
    return fresh(gpu_success(peak, total=L4_TOTAL))


@pytest.mark.emulated_kubelet
async def test_two_namespaces_with_the_same_spec_share_one_job_and_one_record(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("llama", spec(), NS))
    await cluster.create(GW, workload("llama", spec(), OTHER))
    start_operator(*await sharing(cluster))
    job = await _one_job(kubelet)
    assert job["metadata"]["namespace"] in (OPERATOR_NS, real_namespace(cluster, OPERATOR_NS))
    producer = workload_ns(cluster, job)
    waiter = OTHER if producer == NS else NS
    assert job["metadata"]["labels"][KEY_LABEL]
    await eventually(
        lambda: _measured_reason(cluster, "llama", waiter, "WaitingForSharedMeasurement"),
        what=f"llama in {waiter} waiting for {producer}'s measurement",
    )
    assert len(await _jobs(kubelet)) == 1
    await kubelet.succeed(job, _fresh_success(9 * GIB), node="l4-1")
    first = await eventually(lambda: _ready(cluster, "llama", producer), what="producer Ready")
    second = await eventually(lambda: _ready(cluster, "llama", waiter), what="waiter Ready")
    records = await _records(cluster)
    assert len(records) == 1, [r["metadata"]["name"] for r in records]
    record = records[0]
    name = record["metadata"]["name"]
    assert record["metadata"]["labels"][KEY_LABEL] == job["metadata"]["labels"][KEY_LABEL]
    assert record["metadata"]["labels"]["gpusizer.dev/engine"] == "vllm"
    assert record["metadata"]["labels"]["gpusizer.dev/workload-kind"] == "Inference"
    assert record["spec"]["result"]["sourceNamespace"] == real_namespace(cluster, producer)
    assert record["spec"]["scope"] == "Cluster"
    assert record["spec"]["result"]["peakDeviceUsedBytes"] == 9 * GIB
    assert record["spec"]["estimate"]["perGpu"]["totalBytes"] > 0
    assert "reusedFrom" not in first["measurement"]
    assert first["measurement"]["measurementKey"] == record["spec"]["key"]
    assert second["measurement"]["reusedFrom"] == name
    assert second["measurement"]["peakDeviceUsedBytes"] == 9 * GIB
    assert f"reused GPUMeasurement {name}" in condition({"status": second}, "Measured")["message"]
    assert len(await _jobs(kubelet)) == 1, "one Job for both namespaces"


@pytest.mark.emulated_kubelet
async def test_a_namespace_that_opts_out_measures_on_its_own(
    cluster, start_operator, kubelet: Kubelet, tmp_path
) -> None:
    # kmock 0.8 cannot store Namespace objects, so the policy opts out every namespace; the
    # per-namespace selection is unit-tested (tests/fleet/test_record_sharing.py).
    policy = tmp_path / "policy.yaml"
    policy.write_text("measurementSharing: Disabled\n")
    start_operator(*await sharing(cluster), "--policy", str(policy))
    await cluster.create(GW, workload("private", spec(), NS))
    await cluster.create(GW, workload("private", spec(), OTHER))
    first = await eventually(lambda: kubelet.jobs(NS), what="ml-team's own Job")
    second = await eventually(lambda: kubelet.jobs(OTHER), what="team-b's own Job")
    for job in (*first, *second):
        assert KEY_LABEL not in job["metadata"]["labels"]
        await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    for ns in (NS, OTHER):
        status = await eventually(lambda ns=ns: _ready(cluster, "private", ns), what="Ready")
        assert "reusedFrom" not in status["measurement"]
    assert await _records(cluster) == []


@pytest.mark.emulated_kubelet
async def test_deleting_a_record_measures_its_users_again(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    start_operator(*await sharing(cluster))
    await cluster.create(GW, workload("again", spec(), NS))
    job = await _one_job(kubelet)
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    await eventually(lambda: _ready(cluster, "again", NS), what="Ready")
    records = await eventually(lambda: _records(cluster), what="the record")
    await cluster.delete(RECORDS, None, records[0]["metadata"]["name"])
    second = await _one_job(kubelet, {job["metadata"]["name"]})
    await eventually(
        lambda: _measured_condition(cluster, "again", NS, "RecordDeleted"),
        what="Measured reason RecordDeleted",
    )
    await kubelet.succeed(second, gpu_success(10 * GIB, total=L4_TOTAL), node="l4-1")

    async def measured_again() -> dict[str, Any] | None:
        status = await _ready(cluster, "again", NS)
        m = (status or {}).get("measurement") or {}
        return status if m.get("peakDeviceUsedBytes") == 10 * GIB else None

    await eventually(measured_again, what="the second measurement")
    records = await eventually(lambda: _records(cluster), what="the record published again")
    assert records[0]["spec"]["result"]["peakDeviceUsedBytes"] == 10 * GIB


@pytest.mark.emulated_kubelet
async def test_a_new_probe_image_measures_again(cluster, start_operator, kubelet: Kubelet) -> None:
    op = start_operator(*await sharing(cluster), "--probe-image", "example.com/probe:1")
    await cluster.create(GW, workload("image", spec(), NS))
    job = await _one_job(kubelet)
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    ready = await eventually(lambda: _ready(cluster, "image", NS), what="Ready")
    assert ready["measurement"]["keyFields"]["probeImage"] == "example.com/probe:1"
    op.stop()
    start_operator(*await sharing(cluster), "--probe-image", "example.com/probe:2")
    second = await _one_job(kubelet, {job["metadata"]["name"]})
    image = second["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "example.com/probe:2"
    measured = await eventually(
        lambda: _measured_condition(cluster, "image", NS, "ProbeImageChanged"),
        what="Measured reason ProbeImageChanged",
    )
    assert "example.com/probe:1 -> example.com/probe:2" in measured["message"]
    await kubelet.succeed(second, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")

    async def rekeyed() -> dict[str, Any] | None:
        status = await _ready(cluster, "image", NS)
        fields = ((status or {}).get("measurement") or {}).get("keyFields") or {}
        return status if fields.get("probeImage") == "example.com/probe:2" else None

    await eventually(rekeyed, what="measured with the new image")
    assert len(await _records(cluster)) == 2, "one record per probe image"


@pytest.mark.emulated_kubelet
async def test_an_expired_record_is_not_reused_and_is_deleted(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    start_operator(*await sharing(cluster))
    await cluster.create(GW, workload("old", spec(), NS))
    job = await _one_job(kubelet)
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    await eventually(lambda: _ready(cluster, "old", NS), what="Ready")
    records = await eventually(lambda: _records(cluster), what="the record")
    name = records[0]["metadata"]["name"]
    await cluster.patch(RECORDS, None, name, {"spec": {"expiresAt": "2020-01-01T00:00:00Z"}})

    async def gone() -> bool:
        return all(r["metadata"]["name"] != name for r in await _records(cluster))

    await eventually(gone, what="the expired record deleted by the operator")
    await cluster.create(GW, workload("old", spec(), OTHER))
    own = await _one_job(kubelet, {job["metadata"]["name"]})
    assert workload_ns(cluster, own) == OTHER, "team-b measures on its own"
    await kubelet.succeed(own, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    status = await eventually(lambda: _ready(cluster, "old", OTHER), what="team-b Ready")
    assert "reusedFrom" not in status["measurement"]
    # The expiry re-measures nobody: ml-team's workload keeps its measurement.
    assert [workload_ns(cluster, j) for j in await _jobs(kubelet)].count(NS) == 1
    assert (await _status(cluster, "old", NS))["phase"] == "Ready"


@pytest.mark.emulated_kubelet
async def test_a_restart_with_a_shared_measurement_in_flight_starts_no_duplicate(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("inflight", spec(), NS))
    await cluster.create(GW, workload("inflight", spec(), OTHER))
    op = start_operator(*await sharing(cluster))
    job = await _one_job(kubelet)
    waiter = OTHER if workload_ns(cluster, job) == NS else NS
    await eventually(
        lambda: _measured_reason(cluster, "inflight", waiter, "WaitingForSharedMeasurement"),
        what="the second namespace waiting",
    )
    op.kill()
    again = start_operator(*await sharing(cluster))
    await eventually(
        lambda: logged(again, "resumed: every workload known at the start decided"),
        what="the restarted operator decided every workload",
    )
    assert [j["metadata"]["name"] for j in await _jobs(kubelet)] == [job["metadata"]["name"]]
    assert await _measured_reason(cluster, "inflight", waiter, "WaitingForSharedMeasurement")
    await kubelet.succeed(job, _fresh_success(9 * GIB), node="l4-1")
    for ns in (NS, OTHER):
        await eventually(lambda ns=ns: _ready(cluster, "inflight", ns), what=f"{ns} Ready")
    assert len(await _jobs(kubelet)) == 1
    assert len(await _records(cluster)) == 1


@pytest.mark.emulated_kubelet
async def test_an_out_of_memory_is_shared_and_the_waiter_walks_on_with_the_producer(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("big", spec(), NS))
    await cluster.create(GW, workload("big", spec(), OTHER))
    start_operator(*await sharing(cluster))
    small = await _one_job(kubelet)
    producer = workload_ns(cluster, small)
    waiter = OTHER if producer == NS else NS
    await eventually(
        lambda: _measured_reason(cluster, "big", waiter, "WaitingForSharedMeasurement"),
        what="the second namespace waiting",
    )
    await kubelet.succeed(small, gpu_oom(), node="l4-1")
    large = await _one_job(kubelet, {small["metadata"]["name"]})
    assert workload_ns(cluster, large) == producer, "the producer moves on, not the waiter"

    async def waits_on_large() -> bool:
        measured = condition(await cluster.get(GW, waiter, "big"), "Measured")
        return measured.get("reason") == "WaitingForSharedMeasurement" and large["metadata"][
            "name"
        ] in (measured.get("message") or "")

    await eventually(waits_on_large, what="the waiter waiting for the larger class's Job")
    await kubelet.succeed(large, fresh(gpu_success(30 * GIB)), node="a100-1")
    for ns in (NS, OTHER):
        await eventually(lambda ns=ns: _ready(cluster, "big", ns), what=f"{ns} Ready")
    reused = (await _status(cluster, "big", waiter))["measurement"]
    assert reused["outOfMemoryClasses"] == ["nvidia-l4"]
    assert reused["gpuClass"] == "nvidia-a100-80gb" and reused["reusedFrom"]
    records = await _records(cluster)
    assert sorted(r["spec"]["gpuClass"] for r in records) == ["nvidia-a100-80gb", "nvidia-l4"]
    assert [
        r["spec"]["result"]["outOfMemory"] for r in records if r["spec"]["gpuClass"] == "nvidia-l4"
    ] == [True]
    jobs = await _jobs(kubelet)
    assert waiter not in [workload_ns(cluster, j) for j in jobs], "no Job for the waiter"


@pytest.mark.emulated_kubelet
async def test_a_driver_upgrade_on_the_class_measures_again(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    label = "nvidia.com/cuda.driver-version.major"
    await cluster.patch(NODES, None, "l4-1", {"metadata": {"labels": {label: "550"}}})
    start_operator(*await sharing(cluster))
    await cluster.create(GW, workload("driver", spec(), NS))
    job = await _one_job(kubelet)
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    ready = await eventually(lambda: _ready(cluster, "driver", NS), what="Ready")
    assert ready["measurement"]["keyFields"]["driverMajor"] == "550"
    await cluster.patch(NODES, None, "l4-1", {"metadata": {"labels": {label: "560"}}})
    second = await _one_job(kubelet, {job["metadata"]["name"]})
    await eventually(
        lambda: _measured_condition(cluster, "driver", NS, "DriverChanged"),
        what="Measured reason DriverChanged",
    )
    await kubelet.succeed(second, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")

    async def rekeyed() -> dict[str, Any] | None:
        status = await _ready(cluster, "driver", NS)
        fields = ((status or {}).get("measurement") or {}).get("keyFields") or {}
        return status if fields.get("driverMajor") == "560" else None

    await eventually(rekeyed, what="measured under the new driver")


@pytest.mark.emulated_kubelet
async def test_revalidation_measures_an_old_result_again_once(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    # The fixture's result completed on 2026-01-01: older than 300 days by the session's date.
    start_operator(*await sharing(cluster), "--measurement-revalidate-after", str(300 * 86400))
    await cluster.create(GW, workload("reval", spec(), NS))
    job = await _one_job(kubelet)
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    second = await _one_job(kubelet, {job["metadata"]["name"]})
    await eventually(
        lambda: _measured_condition(cluster, "reval", NS, "Revalidation"),
        what="Measured reason Revalidation",
    )
    await kubelet.succeed(second, _fresh_success(10 * GIB), node="l4-1")

    async def revalidated() -> dict[str, Any] | None:
        status = await _ready(cluster, "reval", NS)
        m = (status or {}).get("measurement") or {}
        return status if m.get("peakDeviceUsedBytes") == 10 * GIB else None

    await eventually(revalidated, what="the re-validated measurement")
    # A second namespace reuses the fresh result; the old record is not reused.
    await cluster.create(GW, workload("reval", spec(), OTHER))
    status = await eventually(lambda: _ready(cluster, "reval", OTHER), what="team-b Ready")
    assert status["measurement"]["peakDeviceUsedBytes"] == 10 * GIB
    assert status["measurement"]["reusedFrom"]
    assert len(await _jobs(kubelet)) == 2
