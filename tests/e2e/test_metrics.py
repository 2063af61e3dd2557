"""Prometheus metrics and kopf's liveness endpoint of the running operator."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import GW, NS, Kubelet, eventually, real_namespace, spec, workload
from tests.e2e.probe_results import GIB, gpu_success
from tests.e2e.test_lifecycle import phase_is


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def fetch(url: str) -> str | None:
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            return await resp.text() if resp.status == 200 else None
    except aiohttp.ClientError:
        return None


@pytest.mark.emulated_kubelet
async def test_metrics_and_liveness(cluster, start_operator, kubelet: Kubelet) -> None:
    metrics, health = free_port(), free_port()
    await cluster.create(GW, workload("metered", spec()))
    start_operator("--metrics-port", str(metrics), "--health-port", str(health))
    job = await kubelet.wait_job()
    await kubelet.succeed(job, gpu_success(10 * GIB, total=23034 << 20), node="l4-1")
    await eventually(lambda: phase_is(cluster, "metered", "Ready"))
    namespace = real_namespace(cluster)  # the label is the API server's namespace

    async def counted() -> str | None:  # counted right after the status write lands
        text = await fetch(f"http://127.0.0.1:{metrics}/metrics")
        # The running gauge follows the Job's own event, which may come after the pod's result.
        settled = f'gpusizer_measurement_jobs_running{{namespace="{namespace}"}} 0.0'
        return (
            text
            if text and "gpusizer_measurement_outcomes_total{" in text and settled in text
            else None
        )

    text = await eventually(counted, what="/metrics with the measurement counted")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    me = (("name", "metered"), ("namespace", namespace))

    def value(metric: str, *labels: tuple[str, str]) -> float | None:
        return samples.get((metric, tuple(sorted((*me, *labels)))))

    assert (value("gpusizer_estimated_bytes", ("component", "total")) or 0) > 0
    assert value("gpusizer_measured_peak_bytes", ("kind", "device")) == 10 * GIB
    rec = value(
        "gpusizer_recommendation_headroom_fraction",
        ("basis", "Measurement"),
        ("gpu_class", "nvidia-l4"),
    )
    assert rec is not None and 0.5 < rec < 0.6
    assert samples[("gpusizer_measurement_outcomes_total", (("reason", "Succeeded"),))] == 1
    count = ("gpusizer_measurement_duration_seconds_count", (("outcome", "Succeeded"),))
    assert samples[count] == 1
    # GPU-seconds charged to the namespace (1 GPU x the Job's run time); nothing queued or
    # running once it is Ready.
    ns = (("namespace", namespace),)
    assert samples[("gpusizer_measurement_gpu_seconds_total", ns)] >= 0
    assert samples[("gpusizer_measurement_queue_length", ns)] == 0
    assert samples[("gpusizer_measurement_jobs_running", ns)] == 0
    healthz = await eventually(lambda: fetch(f"http://127.0.0.1:{health}/healthz"), what="/healthz")
    assert healthz is not None
    # Byte components only (perGpu's display-only totalGiB is not a byte figure).
    components = {
        dict(labels)["component"]
        for (metric, labels) in samples
        if metric == "gpusizer_estimated_bytes" and dict(labels).get("name") == "metered"
    }
    assert components == {
        "weights",
        "quantizationOverhead",
        "kvCache",
        "activation",
        "gradient",
        "optimizerState",
        "masterWeight",
        "communicationBuffer",
        "runtimeOverhead",
        "total",
    }
    # Deleting the workload removes every series that names it.
    await cluster.delete(GW, NS, "metered")

    async def forgotten() -> bool:
        text = await fetch(f"http://127.0.0.1:{metrics}/metrics")
        return text is not None and not any(
            s.labels.get("name") == "metered"
            for family in text_string_to_metric_families(text)
            for s in family.samples
        )

    await eventually(forgotten, what="no series of the deleted workload")
