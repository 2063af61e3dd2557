"""The operator under faults, races and restarts (issue 13, items 2 to 8), one test per defect.

Each scenario injects what a busy or failing API server does (``tests/e2e/faults.py``) into the
loopback emulator and checks what the issue found broken: Jobs recreated after the operator had
deleted them, pods of an old Job deciding a new one, statuses lost to one 409, statuses
rewritten with moved transition times, orphaned Jobs, hangs after a 410, start-up tracebacks and
repeated warnings.
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
import signal
import subprocess
import sys
from typing import Any

import pytest
from gpu_sizer_testbed.emulator import LoopbackCluster

from tests.e2e.conftest import (
    EVENTS,
    GW,
    JOBS,
    NODES,
    NS,
    ROOT,
    SCHEDULING_GRACE,
    Kubelet,
    condition,
    eventually,
    gpu_node,
    invalid_spec,
    spec,
    workload,
)
from tests.e2e.faults import Faults
from tests.e2e.history import job_creations, status_writes
from tests.e2e.probe_results import GIB, gpu_oom, gpu_success
from tests.e2e.refusals import StatusWritesRefused
from tests.e2e.test_lifecycle import phase_is

#: Each test says what it needs: ``emulated_api`` where it injects API faults (the emulator),
#: ``local_operator`` where it kills, signals or reads the log of the operator it started.
ABSENT = {"gpuClasses": ["nvidia-h100-80gb"]}  # no node of this class in the test's cluster
#: Earlier versions polled each measuring workload on a timer of this many seconds; the flag is
#: ignored now (watch events drive everything), and kept here so that these scenarios reproduce
#: the races a timer acting on a stale view ran into.
POLL = ("--poll-interval", "0.2")
#: Every workload measured at once: these scenarios are about faults, not the measurement queue.
UNCAPPED = ("--max-concurrent-measurements", "0")


def _ago(seconds: float) -> str:
    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _live(jobs: list[dict[str, Any]], workload_name: str) -> list[str]:
    """Unfinished Jobs of a workload (no Complete or Failed condition)."""
    out = []
    for job in jobs:
        meta = job["metadata"]
        if (meta.get("annotations") or {}).get("gpusizer.dev/workload-name") != workload_name:
            continue
        conds = (job.get("status") or {}).get("conditions") or []
        if not any(c.get("type") in ("Complete", "Failed") for c in conds):
            out.append(meta["name"])
    return out


async def _reason(cluster: LoopbackCluster, events_of: str) -> list[str]:
    events = await cluster.list(EVENTS, NS)
    return [e["reason"] for e in events if e["involvedObject"]["name"] == events_of]


_TOUCHES = itertools.count()


async def caught_up(cluster: LoopbackCluster, op: Any, name: str, timeout: float = 60) -> None:
    """Wait until the operator (started with ``-v``) has decided workload ``name`` on a state at
    least as new as a metadata change made now: every watch event of the workload before that
    change (its own status writes coming back late, say) has then been seen and acted on. How a
    test waits for "nothing more will happen" without sleeping."""
    touched = await cluster.patch(
        GW, NS, name, {"metadata": {"labels": {"test/touch": str(next(_TOUCHES))}}}
    )
    wanted = int(touched["metadata"]["resourceVersion"])
    pattern = re.compile(rf"{NS}/{name}: decided: .* \(on resourceVersion (\d+)\)")

    async def seen() -> bool:
        return any(int(m[1]) >= wanted for m in pattern.finditer(op.log.read_text()))

    await eventually(seen, timeout, f"a decision on {name} at resourceVersion {wanted} or later")


# --- item 2: decisions rest on confirmed state, not on the last event seen ----------------------


@pytest.mark.emulated_api  # delays watch events
@pytest.mark.local_operator  # reads its log
async def test_delayed_watch_events_never_bring_back_a_job_the_operator_deleted(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    """Watch events late, the workloads' stream more than the Jobs' (separate streams lag
    differently): after the unschedulable timeout and after a CUDA OOM moved the workload to a
    larger class, the operator deleted a Job itself; the stale view (status still Measuring,
    the Job already gone) must not make it recreate that Job."""
    delays = {"gpuworkloads": 1.5, "jobs": 0.3, "pods": 0.3}
    cluster.emulator.faults = Faults(watch_delay=delays)
    await cluster.create(GW, workload("nowhere", spec(placement=ABSENT)))
    await cluster.create(GW, workload("oom", spec()))
    op = start_operator(*POLL, *SCHEDULING_GRACE, "-v")
    nowhere = await eventually(lambda: _job_for(kubelet, "nowhere"), 60, "nowhere's Job")
    oom = await eventually(lambda: _job_for(kubelet, "oom"), 60, "oom's Job")
    await kubelet.unschedulable(nowhere, _ago(5))
    await kubelet.succeed(oom, gpu_oom(), node="l4-1")
    waiting = await eventually(lambda: phase_is(cluster, "nowhere", "Estimated"), 60)
    assert condition(waiting, "Measured")["reason"] == "NoNodeOfClass"
    second = await eventually(
        lambda: _job_for(kubelet, "oom", not_named=oom["metadata"]["name"]), 60, "larger class"
    )
    await kubelet.running(second)  # on the A100 (not left without a pod, unschedulable)
    # Each decision's own writes and deletions come back late: wait until the workloads' watch
    # (the slowest) has caught up with all of them.
    for name in ("nowhere", "oom"):
        await caught_up(cluster, op, name)
    jobs = await kubelet.jobs()
    assert _live(jobs, "nowhere") == []
    assert _live(jobs, "oom") == [second["metadata"]["name"]]
    assert await job_creations(cluster, "nowhere") == [nowhere["metadata"]["name"]]
    assert await job_creations(cluster, "oom") == [
        oom["metadata"]["name"],
        second["metadata"]["name"],
    ]
    for name in ("nowhere", "oom"):
        assert "JobRecreated" not in await _reason(cluster, name)


async def _job_for(kubelet: Kubelet, name: str, not_named: str | None = None) -> Any:
    for job in await kubelet.jobs():
        meta = job["metadata"]
        if meta["annotations"].get("gpusizer.dev/workload-name") == name and (
            meta["name"] != not_named
        ):
            return job
    return None


# --- item 3: pods are matched to their Job by uid, never by name --------------------------------


@pytest.mark.emulated_kubelet
@pytest.mark.local_operator  # reads its log
async def test_the_old_jobs_pod_never_decides_a_new_job_of_the_same_name(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    """Spec A -> B -> A reuses A's Job name; the old A Job's pod, killed with exit code 143,
    reports after the new A Job exists. It must not fail the workload."""
    a = spec()
    await cluster.create(GW, workload("abba", a))
    op = start_operator(*POLL, "-v")
    old = await kubelet.wait_job()
    await kubelet.running(old, node="l4-1")
    kubelet.hold(old)  # its pod, stopped by the Job's deletion, reports below
    await cluster.change_spec(GW, NS, "abba", {"inference": {"maxNumSeqs": 8}})
    b_job = await kubelet.wait_job(not_named={old["metadata"]["name"]})
    await cluster.change_spec(GW, NS, "abba", {"inference": {"maxNumSeqs": 4}})

    async def a_again() -> Any:
        for job in await kubelet.jobs():
            meta = job["metadata"]
            if meta["name"] == old["metadata"]["name"] and meta["uid"] != old["metadata"]["uid"]:
                return job
        return None

    new = await eventually(a_again, 60, "A's Job created again")
    assert b_job["metadata"]["name"] != new["metadata"]["name"]
    await eventually(lambda: _measuring_with(cluster, "abba", new), 60, "status names new A")
    # The old pod (owner: the old Job's uid) ends now, killed by SIGTERM.
    await kubelet.succeed(old, "", node="l4-1", exit_code=143, job_status=False)
    await caught_up(cluster, op, "abba")
    obj = await cluster.get(GW, NS, "abba")
    assert obj["status"]["phase"] == "Measuring", condition(obj, "Measured")
    await kubelet.succeed(new, gpu_success(9 * GIB, total=23034 << 20), node="l4-1")
    ready = await eventually(lambda: phase_is(cluster, "abba", "Ready"), 60)
    assert ready["status"]["measurement"]["jobName"] == new["metadata"]["name"]


async def _measuring_with(cluster: LoopbackCluster, name: str, job: dict[str, Any]) -> Any:
    obj = await cluster.get(GW, NS, name)
    st = (obj or {}).get("status") or {}
    ok = st.get("phase") == "Measuring"
    return (
        obj
        if ok and (st.get("measurement") or {}).get("jobName") == job["metadata"]["name"]
        else None
    )


# --- item 4: every write is retried until it lands ---------------------------------------------


@pytest.mark.emulated_api  # 409 and 500 on status writes
async def test_status_writes_land_despite_conflicts_and_server_errors(
    cluster: LoopbackCluster, start_operator
) -> None:
    faults = Faults(patch_conflict=0.3, patch_error=0.2, resources={"gpuworkloads"}, seed=4)
    cluster.emulator.faults = faults
    names = [f"w{i:02d}" for i in range(16)]
    for name in names:
        await cluster.create(GW, workload(name, spec(measurement={"mode": "Disabled"})))
    start_operator()

    async def all_ready() -> bool:
        for name in names:
            obj = await cluster.get(GW, NS, name)
            st = (obj or {}).get("status") or {}
            if st.get("phase") != "Ready" or st.get("observedGeneration") != 1:
                return False
        return True

    await eventually(all_ready, 180, "every workload's status written")
    assert faults.injected["409 patch gpuworkloads"] > 0
    assert faults.injected["500 patch gpuworkloads"] > 0


# --- item 5: conditions move only on a real change; an unchanged status is not written ---------


@pytest.mark.emulated_kubelet
@pytest.mark.local_operator  # restarts it and reads its log
async def test_a_restart_rewrites_no_status_and_moves_no_transition_time(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("measured", spec()))
    await cluster.create(GW, workload("waiting", spec(placement=ABSENT)))
    await cluster.create(GW, workload("huge", spec(params=10**13)))
    await cluster.create(GW, workload("disabled", spec(measurement={"mode": "Disabled"})))
    await cluster.create(GW, workload("broken", invalid_spec()))
    op = start_operator("-v", *SCHEDULING_GRACE)
    measured = await eventually(lambda: _job_for(kubelet, "measured"), 60)
    waiting = await eventually(lambda: _job_for(kubelet, "waiting"), 60)
    await kubelet.succeed(measured, gpu_success(9 * GIB, total=23034 << 20), node="l4-1")
    await kubelet.unschedulable(waiting, _ago(5))
    await eventually(lambda: phase_is(cluster, "measured", "Ready"), 60)
    await eventually(lambda: phase_is(cluster, "waiting", "Estimated"), 60)
    names = ("measured", "waiting", "huge", "disabled", "broken")
    for name in names:
        await eventually(lambda n=name: _has_status(cluster, n), 60, f"{name}'s status")
        await caught_up(cluster, op, name)
    before = {n: await cluster.get(GW, NS, n) for n in names}
    writes = {n: await status_writes(cluster, n) for n in names}
    op.stop()
    offset = op.log.stat().st_size
    op = start_operator("-v", *SCHEDULING_GRACE)

    def decisions(name: str) -> list[str]:
        text = op.log.read_bytes()[offset:].decode(errors="replace")
        return [line for line in text.splitlines() if f"{NS}/{name}: decided:" in line]

    async def resumed() -> bool:
        return all(decisions(n) for n in names)

    await eventually(resumed, 60, "every workload decided again after the restart")
    for name in names:
        assert all("status unchanged" in line for line in decisions(name)), decisions(name)

    async def said() -> str | None:
        text = op.log.read_bytes()[offset:].decode(errors="replace")
        found = re.search(r"resumed: every workload known at the start decided, .*", text)
        return found[0] if found else None

    line = await eventually(said, 60, "the resume logged")
    assert line.endswith(", 0 status writes"), line
    for name in names:
        after = await cluster.get(GW, NS, name)
        assert after["status"] == before[name]["status"], name
        assert (
            after["metadata"]["resourceVersion"] == before[name]["metadata"]["resourceVersion"]
        ), name
        assert await status_writes(cluster, name) == writes[name], name


async def _has_status(cluster: LoopbackCluster, name: str) -> bool:
    obj = await cluster.get(GW, NS, name)
    return bool(((obj or {}).get("status") or {}).get("phase"))


# --- item 6: at most one live Job per workload; Jobs no workload wants are deleted -------------


def _planted(name: str, owner_name: str, owner_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "gpu-sizer"},
            "annotations": {"gpusizer.dev/workload-name": owner_name},
            "ownerReferences": [
                {
                    "apiVersion": "gpusizer.dev/v1alpha1",
                    "kind": "GPUWorkload",
                    "name": owner_name,
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        # Suspended: no pods (a killed operator's Job would have one; these are about the Jobs).
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "gpu-sizer-probe"}],
                }
            },
        },
    }


async def test_jobs_no_workload_wants_are_deleted(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    created = await cluster.create(GW, workload("keeper", spec()))
    uid = created["metadata"]["uid"]
    # A Job of this workload it does not want (left by a killed operator mid-decision), and one
    # of a workload that no longer exists (its namesake was deleted and never re-created; on a
    # real API server the garbage collector deletes that one too, whoever comes first).
    await cluster.create(JOBS, _planted("gpusizer-keeper-stray", "keeper", uid))
    await cluster.create(JOBS, _planted("gpusizer-ghost-0000000000", "ghost", "ghost-uid"))
    start_operator()
    obj = await eventually(lambda: phase_is(cluster, "keeper", "Measuring"), 60)
    wanted = obj["status"]["measurement"]["jobName"]

    async def only_the_wanted_one() -> bool:
        return [j["metadata"]["name"] for j in await kubelet.jobs()] == [wanted]

    await eventually(only_the_wanted_one, 60, "stray and orphaned Jobs deleted")


@pytest.mark.emulated_kubelet
async def test_a_job_whose_outcome_is_not_recorded_yet_is_never_deleted(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    """A CUDA OOM on the L4 moves the workload to the A100, but the status saying so does not
    land (500s). Deleting the L4 Job before that write left a status naming a Job that was gone,
    and the Job was created again (the soak found it): it must stay until the write lands."""
    await cluster.create(GW, workload("oom", spec()))
    start_operator()
    first = await kubelet.wait_job()
    await eventually(lambda: _measuring_with(cluster, "oom", first), 60, "measuring on the L4")
    refused = await StatusWritesRefused(cluster).start()
    await kubelet.succeed(first, gpu_oom(), node="l4-1")
    second = await eventually(
        lambda: _job_for(kubelet, "oom", not_named=first["metadata"]["name"]), 60, "larger class"
    )

    async def refused_twice() -> bool:
        return refused.refused >= 2

    await eventually(refused_twice, 60, "the status write refused and retried")
    names = [j["metadata"]["name"] for j in await kubelet.jobs()]
    assert first["metadata"]["name"] in names, "deleted before its outcome was recorded"
    await refused.stop()
    await eventually(lambda: _measuring_with(cluster, "oom", second), 60, "on the A100")
    await eventually(lambda: _gone(kubelet, first["metadata"]["name"]), 60, "L4 Job deleted")
    assert await job_creations(cluster, "oom") == [
        first["metadata"]["name"],
        second["metadata"]["name"],
    ]


@pytest.mark.audit_log  # counts the refused status writes
async def test_a_started_measurement_keeps_its_slot_when_its_status_write_fails(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    """With a measurement cap, a Job created by a decision whose status write then failed was
    counted against the cap, its own workload queued again, the Job deleted as unwanted and
    created once more later (the soak found it): the Job must be adopted, never re-created."""
    await cluster.create(GW, workload("capped", spec()))
    refused = await StatusWritesRefused(cluster).start()
    start_operator("--max-concurrent-measurements", "1")
    job = await kubelet.wait_job(timeout=60)

    async def refused_twice() -> bool:
        return refused.refused >= 3

    await eventually(refused_twice, 60, "the status write refused and retried")
    assert [j["metadata"]["uid"] for j in await kubelet.jobs()] == [job["metadata"]["uid"]]
    await refused.stop()
    await eventually(lambda: _measuring_with(cluster, "capped", job), 60, "Measuring, that Job")
    assert [j["metadata"]["uid"] for j in await kubelet.jobs()] == [job["metadata"]["uid"]]
    assert await job_creations(cluster, "capped") == [job["metadata"]["name"]]


async def _gone(kubelet: Kubelet, job_name: str) -> bool:
    return job_name not in [j["metadata"]["name"] for j in await kubelet.jobs()]


@pytest.mark.local_operator  # kills it
async def test_kills_at_any_moment_leave_at_most_one_live_job_per_workload(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    names = [f"k{i}" for i in range(8)]
    for name in names:
        await cluster.create(GW, workload(name, spec()))
    op = start_operator(*UNCAPPED)
    for round_ in range(3):
        # Kill it as soon as it has started creating Jobs, mid-way through its decisions.
        await eventually(lambda: _some_jobs(kubelet), 60, "Jobs being created")
        op.kill()
        # A spec change while it is down: the restarted operator replaces the Job.
        await cluster.change_spec(GW, NS, names[round_], {"inference": {"maxNumSeqs": 5 + round_}})
        op = start_operator(*UNCAPPED)

    async def settled() -> bool:
        jobs = await kubelet.jobs()
        for name in names:
            obj = await cluster.get(GW, NS, name)
            st = (obj or {}).get("status") or {}
            if st.get("observedGeneration") != obj["metadata"]["generation"]:
                return False
            if _live(jobs, name) != [st.get("measurement", {}).get("jobName")]:
                return False
        return True

    await eventually(settled, 120, "one live Job per workload, the one its status names")


async def _some_jobs(kubelet: Kubelet) -> bool:
    return bool(await kubelet.jobs())


# --- item 7: watch failures and stopping ------------------------------------------------------


@pytest.mark.emulated_api  # HTTP 410 on the watch requests
@pytest.mark.local_operator  # restarts it
@pytest.mark.parametrize("plural", ["jobs", "pods"])
async def test_http_410_on_a_watch_exits_promptly_and_a_restart_carries_on(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet, plural: str
) -> None:
    """kopf 1.45 gives up on a watch request answered HTTP 410 (it recovers from the in-stream
    410, see test_resilience): the process must exit at once, saying why, for its Deployment to
    restart it, never hang half-alive."""
    faults = Faults(watch_gone=1.0, resources={plural})
    cluster.emulator.faults = faults
    await cluster.create(GW, workload("gone", spec()))
    op = start_operator()
    # Promptly: a generous bound on a loaded machine, far from the minutes of the defect.
    await eventually(lambda: _exited(op), 60, "operator exit")
    assert op.proc.returncode not in (0, None)
    assert faults.injected[f"410 watch {plural}"] >= 1
    faults.enabled = False
    start_operator()
    await eventually(lambda: phase_is(cluster, "gone", "Measuring"), 60)
    assert len(await kubelet.jobs()) == 1


async def _exited(op: Any) -> bool:
    return op.proc.poll() is not None


@pytest.mark.local_operator  # signals it
@pytest.mark.audit_log  # counts the refused status writes
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_sigterm_stops_it_promptly_whatever_is_pending(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet, signum: signal.Signals
) -> None:
    """Workloads waiting on unschedulable pods (deadlines pending) and status writes failing
    (retries pending): SIGTERM (a Pod's stop) or SIGINT (Ctrl-C, hack/bench-scale.py) still
    ends the process well within a Pod's grace period."""
    names = [f"t{i}" for i in range(12)]
    for name in names:
        await cluster.create(GW, workload(name, spec(placement=ABSENT)))
    op = start_operator("--unschedulable-timeout", "600", *UNCAPPED)
    for name in names:
        job = await eventually(lambda n=name: _job_for(kubelet, n), 60)
        await kubelet.unschedulable(job, _ago(1))
    await eventually(lambda: phase_is(cluster, names[-1], "Measuring"), 60)
    refused = await StatusWritesRefused(cluster).start()
    await cluster.change_spec(GW, NS, names[0], {"inference": {"maxNumSeqs": 6}})

    async def retrying() -> bool:
        return refused.refused >= 2

    await eventually(retrying, 60, "a status write failing and being retried")
    op.proc.send_signal(signum)
    # Within Kubernetes' default terminationGracePeriodSeconds (30; the chart keeps it).
    await eventually(lambda: _exited(op), 30, "exit after SIGTERM")


# --- item 8: start-up and logs ------------------------------------------------------------------


def test_no_kubeconfig_is_one_line(tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "GPU_SIZER_"))}
    env.update(KUBECONFIG=str(tmp_path / "missing"), HOME=str(tmp_path))
    env["PYTHONPATH"] = str(ROOT / "operator")
    argv = [sys.executable, "-m", "gpu_sizer.cli", "operator", "-A", "--no-webhook"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0] and "kubeconfig" in lines[0]
    assert str(tmp_path / "missing") in lines[0] and "KUBECONFIG" in lines[0]


@pytest.mark.emulated_kubelet  # registers a Node
@pytest.mark.local_operator  # reads its log
async def test_log_lines_name_their_object_and_warnings_are_not_repeated(
    cluster: LoopbackCluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("broken", invalid_spec()))
    node = gpu_node("odd-1", "NVIDIA-L4", 81920)  # memory label disagrees with the product
    await cluster.create(NODES, node)
    op = start_operator("-v")
    await eventually(lambda: _stalled(cluster, "broken"), 60)
    for i in range(5):  # metadata changes and node heartbeats: events, nothing new to say
        await cluster.patch(GW, NS, "broken", {"metadata": {"labels": {"touch": str(i)}}})
        await cluster.patch(NODES, None, "odd-1", {"metadata": {"annotations": {"hb": str(i)}}})
    await caught_up(cluster, op, "broken")
    log = op.tail(5000).splitlines()
    mine = [line for line in log if " gpu_sizer." in line]
    assert sum("WARNING" in line and "invalid spec" in line for line in mine) == 1, mine
    assert sum("GPU node odd-1 ignored" in line for line in mine) == 1, mine
    for line in mine:
        if "WARNING" in line or "ERROR" in line:
            assert f"{NS}/" in line or "GPU node" in line, line


async def _stalled(cluster: LoopbackCluster, name: str) -> Any:
    obj = await cluster.get(GW, NS, name)
    return obj if condition(obj, "Stalled").get("status") == "True" else None
