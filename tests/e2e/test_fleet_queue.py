"""Measurement at fleet scale (issue 15, item 1): a cluster-wide cap on measurement Jobs, a
fair queue with positions in the status, quota refusals queued, and a restart that loses no
queue entry and starts no duplicate."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from tests.e2e.conftest import (
    EVENTS,
    GW,
    JOBS,
    NS,
    Kubelet,
    condition,
    eventually,
    real_namespace,
    spec,
    workload,
)
from tests.e2e.probe_results import GIB, gpu_success
from tests.e2e.real_cluster import RealCluster
from tests.e2e.test_metrics import fetch, free_port

L4_TOTAL = 23034 << 20
QUOTAS = ("", "v1", "resourcequotas")


def _finished(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


async def _measured(cluster, name: str, namespace: str = NS) -> dict[str, Any]:
    return condition(await cluster.get(GW, namespace, name), "Measured")


def _queued_at(position: int):
    def check(measured: dict[str, Any]) -> bool:
        return (
            measured.get("reason") == "Queued"
            and measured.get("status") == "False"
            and f"position {position} " in (measured.get("message") or "")
        )

    return check


async def _until(cluster, name: str, check, what: str, timeout: float = 60.0) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        measured = await _measured(cluster, name)
        return measured if check(measured) else None

    return await eventually(probe, timeout, what)


async def _job_of(kubelet: Kubelet, name: str) -> dict[str, Any]:
    async def find() -> dict[str, Any] | None:
        for job in await kubelet.jobs():
            if job["metadata"]["annotations"].get("gpusizer.dev/workload-name") == name:
                return job
        return None

    return await eventually(find, 60, f"the Job of {name}")


async def _ready(cluster, name: str, namespace: str = NS) -> dict[str, Any] | None:
    obj = await cluster.get(GW, namespace, name)
    return obj if (obj.get("status") or {}).get("phase") == "Ready" else None


@pytest.mark.emulated_kubelet
async def test_fifty_workloads_with_a_cap_of_two_never_run_more_than_two_and_all_finish(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    namespaces = [NS, "team-b", "team-c"]
    names = [(namespaces[i % 3], f"fleet-{i:02d}") for i in range(50)]
    for ns, name in names:
        await cluster.create(GW, workload(name, spec(), ns))
    start_operator("--max-concurrent-measurements", "2")
    seen: dict[str, str] = {}  # Job name -> workload
    peak = 0
    deadline = time.monotonic() + 600
    while True:
        jobs = [j for ns in namespaces for j in await kubelet.jobs(ns)]
        for job in jobs:
            seen.setdefault(
                job["metadata"]["name"],
                job["metadata"]["annotations"]["gpusizer.dev/workload-name"],
            )
        live = [j for j in jobs if not _finished(j)]
        peak = max(peak, len(live))
        assert len(live) <= 2, (
            f"{len(live)} measurement Jobs at once: {[j['metadata']['name'] for j in live]}"
        )
        for job in live:
            await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
        ready = 0
        for ns in namespaces:
            for obj in await cluster.list(GW, ns):
                ready += (obj.get("status") or {}).get("phase") == "Ready"
        if ready == len(names):
            break
        assert time.monotonic() < deadline, f"only {ready} of {len(names)} Ready"
    assert peak == 2
    assert len(seen) == len(names), "one Job per workload, no duplicate"
    assert sorted(seen.values()) == sorted(n for _, n in names)


@pytest.mark.emulated_kubelet
async def test_queue_positions_and_the_queued_event(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    start_operator("--max-concurrent-measurements", "1")
    await cluster.create(GW, workload("first", spec()))
    first = await _job_of(kubelet, "first")
    await cluster.create(GW, workload("second", spec()))
    await _until(cluster, "second", _queued_at(1), "second queued at position 1")
    await cluster.create(GW, workload("third", spec()))
    measured = await _until(cluster, "third", _queued_at(2), "third queued at position 2")
    assert "--max-concurrent-measurements" in measured["message"]
    obj = await cluster.get(GW, NS, "third")
    assert obj["status"]["phase"] == "Estimated"
    assert condition(obj, "Ready")["reason"] == "Queued"
    assert condition(obj, "Reconciling")["status"] == "True"

    async def queued_event() -> Any:
        events = await cluster.list(EVENTS, NS)
        return [
            e
            for e in events
            if e.get("reason") == "Queued" and e["involvedObject"]["name"] == "third"
        ]

    assert len(await eventually(queued_event, what="a Queued Event")) == 1
    await kubelet.succeed(first, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    second = await _job_of(kubelet, "second")
    await _until(cluster, "third", _queued_at(1), "third moved to position 1")
    await kubelet.succeed(second, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    third = await _job_of(kubelet, "third")
    await kubelet.succeed(third, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    await eventually(lambda: _ready(cluster, "third"), 60, "third Ready")
    assert len(await kubelet.jobs()) == 3


@pytest.mark.emulated_kubelet
async def test_restart_loses_no_queue_entry_and_starts_no_duplicate(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    op = start_operator("--max-concurrent-measurements", "1")
    await cluster.create(GW, workload("a", spec()))
    a = await _job_of(kubelet, "a")
    await cluster.create(GW, workload("b", spec()))
    await _until(cluster, "b", _queued_at(1), "b queued")
    await cluster.create(GW, workload("c", spec()))
    await _until(cluster, "c", _queued_at(2), "c queued")
    op.kill()
    start_operator("--max-concurrent-measurements", "1")
    await kubelet.succeed(a, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    b = await _job_of(kubelet, "b")
    await _until(cluster, "c", _queued_at(1), "c moved to position 1 after the restart")
    jobs = await kubelet.jobs()
    assert sorted(j["metadata"]["name"] for j in jobs) == sorted(
        [a["metadata"]["name"], b["metadata"]["name"]]
    ), "no duplicate of a, and c still waits"
    await kubelet.succeed(b, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    c = await _job_of(kubelet, "c")
    await kubelet.succeed(c, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    for name in ("a", "b", "c"):
        await eventually(lambda name=name: _ready(cluster, name), 60, f"{name} Ready")
    assert len(await kubelet.jobs()) == 3


class _RefuseJobs:
    """A ResourceQuota in front of Job creation: 403 exceeded quota while ``refusing``."""

    def __init__(self) -> None:
        self.refusing = True
        self.refused = 0

    def before(self, request: Any) -> Exception | None:
        resource = request.resource
        if (
            self.refusing
            and request.action == kmock.action.CREATE
            and getattr(resource, "plural", None) == "jobs"
        ):
            self.refused += 1
            return kmock.KubernetesError(
                status=403,
                reason="Forbidden",
                message='jobs.batch "x" is forbidden: exceeded quota: gpu-quota, requested: '
                "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: "
                "requests.nvidia.com/gpu=4",
            )
        return None

    def watch(self, request: Any, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        return events


@pytest.mark.emulated_kubelet  # reports the measurement pod's end
async def test_a_job_refused_by_quota_is_queued_not_failed(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    """A ResourceQuota refuses the Job: the workload waits its turn (Queued), retried every
    --quota-retry-seconds, and is measured once the quota allows it."""
    quota: _RefuseJobs | None = None
    if isinstance(cluster, RealCluster):  # the API server's own ResourceQuota admission
        await cluster.create(QUOTAS, _object_count_quota())
        await eventually(lambda: _quota_counted(cluster), what="the quota's usage counted")
    else:
        quota = _RefuseJobs()
        cluster.emulator.faults = quota
    await cluster.create(GW, workload("quota", spec()))
    start_operator("--quota-retry-seconds", "1")
    measured = await _until(
        cluster, "quota", lambda m: m.get("reason") == "Queued", "queued by quota"
    )
    assert "ResourceQuota" in measured["message"] and "exceeded quota" in measured["message"]
    assert "gpu-quota" in measured["message"]
    obj = await cluster.get(GW, NS, "quota")
    assert obj["status"]["phase"] == "Estimated"
    if quota is None:
        await cluster.delete(QUOTAS, NS, "gpu-quota")
    else:
        assert quota.refused >= 1
        quota.refusing = False
    job = await _job_of(kubelet, "quota")
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    await eventually(lambda: _ready(cluster, "quota"), 60, "Ready after the quota frees")


def _object_count_quota() -> dict[str, Any]:
    """No Jobs in the namespace (an object-count quota: Kubernetes docs, "Resource Quotas")."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": NS},
        "spec": {"hard": {"count/jobs.batch": "0"}},
    }


async def _quota_counted(cluster) -> bool:
    """The quota controller has counted the namespace's usage: until then its admission
    refuses every Job with "status unknown for quota", not "exceeded quota"."""
    found = await cluster.get(QUOTAS, NS, "gpu-quota")
    return bool(((found or {}).get("status") or {}).get("used"))


def _policy(tmp_path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.emulated_kubelet
async def test_a_namespace_limit_holds_its_namespace_back_but_not_others(
    cluster, start_operator, kubelet: Kubelet, tmp_path
) -> None:
    policy = _policy(tmp_path, "maxConcurrentMeasurements: 1\n")
    start_operator("--max-concurrent-measurements", "4", "--policy", policy)
    await cluster.create(GW, workload("one", spec()))
    one = await _job_of(kubelet, "one")
    await cluster.create(GW, workload("two", spec()))
    measured = await _until(cluster, "two", _queued_at(1), "two held by the namespace limit")
    assert "maxConcurrentMeasurements" in measured["message"]
    # Another namespace is not held back by ml-team's limit.
    await cluster.create(GW, workload("other", spec(), "team-b"))
    await eventually(lambda: kubelet.jobs("team-b"), 60, "team-b's Job")
    await kubelet.succeed(one, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    two = await _job_of(kubelet, "two")
    await kubelet.succeed(two, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    await eventually(lambda: _ready(cluster, "two"), 60, "two Ready")


@pytest.mark.emulated_kubelet
async def test_kueue_mode_creates_suspended_labelled_jobs_measured_once_admitted(
    cluster, start_operator, kubelet: Kubelet, tmp_path
) -> None:
    # A catch-all rule: kmock 0.8 cannot store Namespace objects (500 on create), so label
    # selection is covered by the unit tests (tests/fleet/test_namespace_policy.py).
    policy = _policy(
        tmp_path,
        "namespaceRules:\n  - namespaceSelector: {}\n    localQueue: team-gpus\n",
    )
    # A cap of 1 is ours; Kueue's namespaces are counted by Kueue: both Jobs are created.
    start_operator("--max-concurrent-measurements", "1", "--policy", policy)
    await cluster.create(GW, workload("kq1", spec()))
    await cluster.create(GW, workload("kq2", spec()))
    first = await _job_of(kubelet, "kq1")
    second = await _job_of(kubelet, "kq2")
    for job in (first, second):
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpus"
        assert job["spec"]["suspend"] is True
    measured = await _until(
        cluster, "kq1", lambda m: m.get("reason") == "Queued", "kq1 waits for Kueue"
    )
    assert "Kueue LocalQueue team-gpus" in measured["message"]
    # Kueue admits the first: it resumes the Job; its pod runs and succeeds.
    await cluster.patch(JOBS, NS, first["metadata"]["name"], {"spec": {"suspend": False}})
    await _until(cluster, "kq1", lambda m: m.get("reason") == "Measuring", "kq1 admitted")
    await kubelet.succeed(first, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    await eventually(lambda: _ready(cluster, "kq1"), 60, "kq1 Ready")
    obj = await cluster.get(GW, NS, "kq2")
    assert condition(obj, "Measured")["reason"] == "Queued"
    assert len(await kubelet.jobs()) == 2


@pytest.mark.emulated_kubelet
async def test_a_namespace_out_of_gpu_seconds_waits_until_the_budget_frees_even_after_a_restart(
    cluster, start_operator, kubelet: Kubelet, tmp_path
) -> None:
    # 1 GPU-second a day: the first Job (charged at least 1 GPU-second) uses it all up.
    policy = _policy(tmp_path, "measurementGpuSecondsPerDay: 1\n")
    args = ("--max-concurrent-measurements", "4", "--policy", policy)
    port = free_port()
    op = start_operator(*args, "--metrics-port", str(port))
    await cluster.create(GW, workload("spender", spec()))
    job = await _job_of(kubelet, "spender")
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    spender = await eventually(lambda: _ready(cluster, "spender"), 60, "spender Ready")
    usage = spender["status"]["measurementUsage"]
    assert usage["gpuSeconds"] >= 1 and usage["lastJobName"] == job["metadata"]["name"]

    def budget_queued(measured: dict[str, Any]) -> bool:
        return measured.get("reason") == "Queued" and "measurementGpuSecondsPerDay" in (
            measured.get("message") or ""
        )

    await cluster.create(GW, workload("late", spec()))
    measured = await _until(cluster, "late", budget_queued, "late held by the GPU-second budget")
    text = measured["message"]
    assert f"used {usage['gpuSeconds']} of its 1 measurement GPU-seconds of UTC day" in text
    assert "the budget frees at " in text and "T00:00:00Z" in text
    obj = await cluster.get(GW, NS, "late")
    assert obj["status"]["phase"] == "Estimated"
    assert condition(obj, "Ready")["reason"] == "Queued"
    assert condition(obj, "Stalled")["status"] == "False"

    async def budget_event() -> Any:
        return [
            e
            for e in await cluster.list(EVENTS, NS)
            if e.get("reason") == "MeasurementBudgetExhausted"
            and e["involvedObject"]["name"] == "late"
        ]

    await eventually(budget_event, what="a MeasurementBudgetExhausted Event")

    namespace = real_namespace(cluster)  # the label is the API server's namespace

    async def gauged() -> str | None:
        text = await fetch(f"http://127.0.0.1:{port}/metrics")
        line = f'gpusizer_measurement_gpu_seconds_today{{namespace="{namespace}"}} '
        return text if text and line in text else None

    text = await eventually(gauged, what="the GPU-seconds-today gauge")
    used = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(f'gpusizer_measurement_gpu_seconds_today{{namespace="{namespace}"}}')
    )
    assert used == usage["gpuSeconds"]
    # Another namespace has its own budget.
    await cluster.create(GW, workload("elsewhere", spec(), "team-b"))
    await eventually(lambda: kubelet.jobs("team-b"), 60, "team-b's Job")
    # The charge lives in the status: a restarted operator still holds the namespace back.
    op.kill()
    start_operator(*args)
    await cluster.create(GW, workload("after-restart", spec()))
    await _until(cluster, "after-restart", budget_queued, "still held after the restart")
    started = {
        j["metadata"]["annotations"]["gpusizer.dev/workload-name"] for j in await kubelet.jobs()
    }
    assert not started & {"late", "after-restart"}, "no Job started over the budget"


CONFIGMAPS = ("", "v1", "configmaps")
#: The operator's own namespace (logical name), where its GPU-seconds ledger is kept.
LEDGER_NS = "gpu-sizer"


@pytest.mark.emulated_kubelet
async def test_deleting_and_recreating_the_workload_that_spent_the_budget_gives_nothing_back(
    cluster, start_operator, kubelet: Kubelet, tmp_path
) -> None:
    # The charge is the namespace's: kept in the ledger ConfigMap in the operator's namespace,
    # it outlives the workload (deleted, then recreated under the same name) and a restart.
    policy = _policy(tmp_path, "measurementGpuSecondsPerDay: 1\n")
    operator_ns = real_namespace(cluster, LEDGER_NS)
    ensure = getattr(cluster, "_ensure_namespace", None)
    if ensure is not None:  # the chart's release namespace exists before the operator starts
        await ensure(operator_ns)
    args = ("--max-concurrent-measurements", "4", "--policy", policy)
    args += ("--operator-namespace", operator_ns, "--measurement-ledger", "gs-ledger")
    op = start_operator(*args)
    await cluster.create(GW, workload("spender", spec()))
    job = await _job_of(kubelet, "spender")
    await kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
    spender = await eventually(lambda: _ready(cluster, "spender"), 60, "spender Ready")
    spent = spender["status"]["measurementUsage"]["gpuSeconds"]
    namespace = real_namespace(cluster)

    async def charged() -> dict[str, Any] | None:
        ledger = await cluster.get(CONFIGMAPS, LEDGER_NS, "gs-ledger")
        raw = ((ledger or {}).get("data") or {}).get(namespace)
        entry = json.loads(raw) if raw else None
        return entry if entry and entry["gpuSeconds"] == spent else None

    entry = await eventually(charged, 60, "the ledger holding the namespace's charge")
    assert entry["jobs"] == [job["metadata"]["uid"]]

    def budget_queued(measured: dict[str, Any]) -> bool:
        return measured.get("reason") == "Queued" and "measurementGpuSecondsPerDay" in (
            measured.get("message") or ""
        )

    # The tenant deletes the measured workload (its status and its Job go with it) and creates
    # it again: the new one starts with no measurementUsage, and still waits for tomorrow.
    await cluster.delete(GW, NS, "spender")

    async def gone() -> bool:
        return await cluster.get(GW, NS, "spender") is None

    await eventually(gone, 60, "spender deleted")
    await cluster.create(GW, workload("spender", spec()))
    measured = await _until(cluster, "spender", budget_queued, "the new spender held back")
    assert f"used {spent} of its 1 measurement GPU-seconds" in measured["message"]
    assert "measurementUsage" not in (await cluster.get(GW, NS, "spender"))["status"]
    # A restarted operator reads the ledger back: no live workload holds a charge now.
    op.kill()
    start_operator(*args)
    await cluster.create(GW, workload("after-restart", spec()))
    await _until(cluster, "after-restart", budget_queued, "still held after the restart")
    started = [j["metadata"]["uid"] for j in await kubelet.jobs()]
    assert started in ([], [job["metadata"]["uid"]]), "no Job started over the budget"
