"""create -> Estimated -> Measuring -> Ready, and the Job the operator creates for it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from gpu_sizer_testbed.emulator import LoopbackCluster

from tests.e2e import real_cluster
from tests.e2e.conftest import GW, NS, Kubelet, condition, eventually, spec, workload
from tests.e2e.probe_results import GIB, gpu_success


async def phase_is(cluster: LoopbackCluster, name: str, phase: str) -> Any:
    obj = await cluster.get(GW, NS, name)
    return obj if obj and (obj.get("status") or {}).get("phase") == phase else None


@pytest.mark.emulated_kubelet
async def test_create_to_ready_on_measurement(cluster, start_operator, kubelet: Kubelet) -> None:
    await cluster.create(GW, workload("llm", spec()))
    start_operator()
    measuring = await eventually(lambda: phase_is(cluster, "llm", "Measuring"), what="Measuring")
    st = measuring["status"]
    assert st["observedGeneration"] == 1
    assert st["specHash"] and st["estimate"]["perGpu"]["totalBytes"] > 0
    assert st["recommendation"]["basis"] == "Estimate"
    assert st["recommendation"]["presentInCluster"] is True
    assert condition(measuring, "Estimated")["status"] == "True"
    assert condition(measuring, "Reconciling")["status"] == "True"
    assert condition(measuring, "Measured")["status"] == "Unknown"
    job = await kubelet.wait_job()
    assert st["measurement"]["jobName"] == job["metadata"]["name"]
    await kubelet.succeed(job, gpu_success(10 * GIB, total=23034 << 20), node="l4-1")
    ready = await eventually(lambda: phase_is(cluster, "llm", "Ready"), what="Ready")
    st = ready["status"]
    assert st["recommendation"]["basis"] == "Measurement"
    assert st["recommendation"]["requiredBytesPerGpu"] == 10 * GIB
    assert st["measurement"]["peakDeviceUsedBytes"] == 10 * GIB
    assert st["measurement"]["nodeName"] == "l4-1"
    assert st["measurement"]["device"] == "cuda"
    for t, s in (
        ("Ready", "True"),
        ("Reconciling", "False"),
        ("Stalled", "False"),
        ("Measured", "True"),
        ("HeadroomSufficient", "True"),
    ):
        c = condition(ready, t)
        assert c["status"] == s, c
        assert c["observedGeneration"] == 1 and c["reason"] and c["lastTransitionTime"]
    # Estimated did not change status, so its transition time did not move.
    assert (
        condition(ready, "Estimated")["lastTransitionTime"]
        == condition(measuring, "Estimated")["lastTransitionTime"]
    )
    assert len(await kubelet.jobs()) == 1

    async def posted() -> bool:  # Events are posted in the background, after the status
        events = await cluster.list(("", "v1", "events"), NS)
        return {"MeasurementStarted", "Measured"} <= {e.get("reason") for e in events}

    await eventually(posted, what="MeasurementStarted and Measured Events")


@pytest.mark.gpu_classes("nvidia-l4")
async def test_job_manifest_fields(cluster, start_operator, kubelet: Kubelet) -> None:
    long_name = "a-very-long-workload-name-that-goes-on-and-on-beyond-the-label-limit"
    created = await cluster.create(
        GW, workload(long_name, spec(measurement={"timeoutSeconds": 120}))
    )
    start_operator("--probe-image-pull-secret", "regcred", "--probe-image-pull-secret", "mirror")
    job = await kubelet.wait_job()
    meta = job["metadata"]
    assert len(meta["name"]) <= 63 and meta["name"].startswith("gpusizer-a-very-long")
    assert meta["namespace"] == NS
    owner = meta["ownerReferences"][0]
    assert owner["kind"] == "GPUWorkload" and owner["name"] == long_name
    assert owner["uid"] == created["metadata"]["uid"] and owner["controller"] is True
    js = job["spec"]
    assert js["backoffLimit"] == 0
    assert js["activeDeadlineSeconds"] >= 120
    assert js["ttlSecondsAfterFinished"] > 0
    pod = js["template"]["spec"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    expr = term["matchExpressions"][0]
    assert expr["key"] == "nvidia.com/gpu.product" and expr["values"] == ["NVIDIA-L4"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    if not real_cluster.uses_installed_operator(cluster):  # flags reach only our own operator
        assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    (ctr,) = pod["containers"]
    assert ctr["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert int(ctr["resources"]["limits"]["memory"]) == 4 * GIB  # Synthetic: the runtime only
    assert ctr["resources"]["requests"]["memory"] == ctr["resources"]["limits"]["memory"]
    sc = ctr["securityContext"]
    assert (
        sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    )
    assert (
        sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    )
    assert ctr["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert {"name": "tmp", "mountPath": "/tmp"} in ctr["volumeMounts"]
    assert any(v.get("emptyDir") is not None for v in pod["volumes"])
    env = {e["name"]: e["value"] for e in ctr["env"]}
    assert json.loads(env["GPU_SIZER_SPEC"])["model"]["architecture"]["numHiddenLayers"] == 16
    assert ctr["command"][:3] == ["python", "-m", "gpu_sizer.probe"]


async def test_measurement_disabled_is_ready_on_the_estimate(cluster, start_operator) -> None:
    await cluster.create(GW, workload("est-only", spec(measurement={"mode": "Disabled"})))
    start_operator()
    ready = await eventually(lambda: phase_is(cluster, "est-only", "Ready"), what="Ready")
    assert condition(ready, "Ready")["reason"] == "EstimateOnly"
    assert "measurement disabled" in condition(ready, "Ready")["message"]
    assert condition(ready, "Measured")["reason"] == "MeasurementDisabled"
    assert ready["status"]["recommendation"]["basis"] == "Estimate"


async def test_incomplete_estimate_with_measurement_disabled_is_never_ready(
    cluster, start_operator
) -> None:
    """Issue 10: a bare parameterCount leaves the KV cache uncounted. The operator says so in
    Estimated (reason Incomplete), publishes no recommendation and, with nothing to measure,
    stalls with the missing fields and the fix instead of calling it Ready."""
    body = spec(params=1_000_000_000, measurement={"mode": "Disabled"})
    await cluster.create(GW, workload("bare", body))
    start_operator()

    async def stalled() -> Any:
        obj = await cluster.get(GW, NS, "bare")
        return obj if condition(obj, "Stalled").get("status") == "True" else None

    obj = await eventually(stalled, timeout=60, what="Stalled")
    st = obj["status"]
    assert st["phase"] == "Estimated" and "recommendation" not in st
    assert [m["component"] for m in st["estimate"]["missingComponents"]] == [
        "kvCacheBytes",
        "activationBytes",
    ]
    assert condition(obj, "Estimated")["reason"] == "Incomplete"
    ready = condition(obj, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "Incomplete"
    assert "numKeyValueHeads" in ready["message"] and "import-hf-config" in ready["message"]


@pytest.mark.emulated_kubelet
async def test_a_measurement_makes_an_incomplete_estimate_ready(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    await cluster.create(GW, workload("bare-measured", spec(params=1_000_000_000)))
    start_operator()
    measuring = await eventually(
        lambda: phase_is(cluster, "bare-measured", "Measuring"), timeout=60, what="Measuring"
    )
    assert "recommendation" not in measuring["status"]
    assert condition(measuring, "Ready")["status"] == "False"
    job = await kubelet.wait_job()
    await kubelet.succeed(job, gpu_success(6 * GIB, total=23034 << 20), node="l4-1")
    ready = await eventually(
        lambda: phase_is(cluster, "bare-measured", "Ready"), timeout=60, what="Ready"
    )
    assert ready["status"]["recommendation"]["basis"] == "Measurement"
    assert condition(ready, "Estimated")["reason"] == "Incomplete"
