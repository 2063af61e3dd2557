"""Scenarios written to pass against both backends: the loopback emulator and a real cluster.

The sibling tests that play kubelet carry ``emulated_kubelet`` and are skipped on a real cluster;
these cover what a real API server, Job controller and garbage collector must agree with without
anyone playing kubelet. Measurement Jobs here target a GPU class that no node has, so on a real
cluster their pods stay Pending (the operator's unschedulable timeout is 600 s) instead of being
run or failed by a real kubelet on its own timeline, which would race the assertions.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_sizer.catalog import DEFAULT_CATALOG
from tests.e2e import real_cluster
from tests.e2e.conftest import GW, NS, Kubelet, condition, eventually, logged, spec, workload
from tests.e2e.test_lifecycle import phase_is

#: Keep an unschedulable measurement pod waiting (the chart's default too).
PATIENT = ("--unschedulable-timeout", "600")


async def pending_spec(cluster: Any) -> dict[str, Any]:
    """The small spec placed on a catalog class with no node in the cluster."""
    present = await real_cluster.present_classes(cluster)
    absent = [c.name for c in DEFAULT_CATALOG if c.name not in present and c.vendor == "nvidia"]
    if not absent:
        pytest.skip("every NVIDIA class of the default catalog has a node: no class to wait on")
    return spec(placement={"gpuClasses": [absent[0]]})


async def _observed(cluster: Any, name: str, generation: int) -> Any:
    obj = await cluster.get(GW, NS, name)
    seen = ((obj or {}).get("status") or {}).get("observedGeneration")
    return obj if seen == generation else None


async def _job_gone(kubelet: Kubelet, name: str) -> bool:
    return all(j["metadata"]["name"] != name for j in await kubelet.jobs())


async def test_spec_change_replaces_the_job(cluster, start_operator, kubelet: Kubelet) -> None:
    await cluster.create(GW, workload("respec", await pending_spec(cluster)))
    start_operator(*PATIENT)
    old = await kubelet.wait_job()
    assert old["metadata"]["namespace"] == NS
    # The Job is created before the status naming it is written: a spec change before that
    # write is a new workload's first decision (no SpecChanged to report). Wait for the status.
    await eventually(lambda: _observed(cluster, "respec", 1), 60, "observedGeneration 1")
    await cluster.change_spec(GW, NS, "respec", {"inference": {"maxNumSeqs": 8}})
    new = await kubelet.wait_job(not_named={old["metadata"]["name"]})
    assert (
        new["metadata"]["labels"]["gpusizer.dev/spec-hash"]
        != (old["metadata"]["labels"]["gpusizer.dev/spec-hash"])
    )
    # The API server (or the emulator playing it) bumped generation on the spec change.
    obj = await eventually(lambda: _observed(cluster, "respec", 2), what="observedGeneration 2")
    assert obj["metadata"]["generation"] == 2
    assert obj["status"]["measurement"]["jobName"] == new["metadata"]["name"]
    measured = condition(obj, "Measured")
    assert measured["reason"] == "SpecChanged" and measured["observedGeneration"] == 2
    await eventually(lambda: _job_gone(kubelet, old["metadata"]["name"]), what="old Job deleted")
    assert [j["metadata"]["name"] for j in await kubelet.jobs()] == [new["metadata"]["name"]]


@pytest.mark.local_operator
async def test_operator_restart_keeps_exactly_one_job(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("restart", await pending_spec(cluster)))
    op = start_operator(*PATIENT)
    job = await kubelet.wait_job()
    await eventually(lambda: phase_is(cluster, "restart", "Measuring"), what="Measuring")
    op.kill()
    again = start_operator(*PATIENT)
    # Its actions (an adoption or, wrongly, a new Job) are done when it logs the resumption.
    await eventually(lambda: logged(again, f"{NS}/restart: resumed"), what="the workload resumed")
    jobs = await kubelet.jobs()
    assert [j["metadata"]["name"] for j in jobs] == [job["metadata"]["name"]]
    assert jobs[0]["metadata"]["uid"] == job["metadata"]["uid"], "adopted, not recreated"
    obj = await cluster.get(GW, NS, "restart")
    assert obj["status"]["phase"] == "Measuring"
    assert obj["status"]["measurement"]["jobName"] == job["metadata"]["name"]


async def test_invalid_object_is_refused_or_stalled(cluster, start_operator) -> None:
    bad = spec(measurement={"mode": "Disabled"})
    bad["inference"]["maxNumSeqs"] = 0
    bad["model"]["dtype"] = "float7"
    start_operator()
    if real_cluster.validates_crd_schema(cluster):
        # A real API server validates against the CRD's structural schema (enum, minimum) before
        # storing, so the object never reaches the operator: assert the refusal names the fields.
        with pytest.raises(real_cluster.ApiStatus) as refused:
            await cluster.create(GW, workload("broken", bad))
        assert refused.value.status in (400, 422), refused.value
        assert "maxNumSeqs" in refused.value.text and "dtype" in refused.value.text
        return
    # The emulator stores it as sent (as a cluster would with an older CRD or a bypassed
    # schema): the operator marks it Stalled, naming both fields.
    await cluster.create(GW, workload("broken", bad))
    stalled = await eventually(lambda: _stalled(cluster, "broken"), what="Stalled")
    msg = condition(stalled, "Stalled")["message"]
    assert "spec.inference.maxNumSeqs" in msg and "spec.model.dtype" in msg


async def _stalled(cluster: Any, name: str) -> Any:
    obj = await cluster.get(GW, NS, name)
    return obj if condition(obj, "Stalled").get("status") == "True" else None
