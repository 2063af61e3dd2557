"""Where an offloaded pipeline's weights wait: host memory holds every component that is
offloaded or placed on the CPU, whole, between its forwards (diffusers' offload hooks), so the
estimate reports it (``hostBytesPerNode``), the recommendation requests it and the measurement
Job, whose probe builds those components on the CPU, gets it on top of its runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_sizer.api import parse_workload
from gpu_sizer.budget import estimate
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.measurement.job import BASE_HOST_MEMORY_BYTES, host_memory_bytes
from gpu_sizer.sizing.verdict import assess

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _doc(name: str, offload: str | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    if offload is not None:
        doc["spec"]["generation"]["offload"] = offload
    return doc


@pytest.mark.parametrize("offload", ["Model", "Sequential", "Group"])
def test_offloaded_pipeline_weights_are_held_by_the_host(offload: str) -> None:
    name = "flux1-schnell-48gb-offload.yaml"
    resident = estimate(parse_workload(_doc(name, "None")))
    offloaded = estimate(parse_workload(_doc(name, offload)))
    # Offload None keeps every component on the GPU: its weights are the pipeline's whole.
    assert resident.host_bytes_per_node is None
    assert offloaded.host_bytes_per_node == resident.per_gpu.weights_bytes
    assert offloaded.per_gpu.weights_bytes < resident.per_gpu.weights_bytes


def test_the_recommendation_and_the_measurement_job_request_that_host_memory() -> None:
    spec = parse_workload(_doc("flux1-schnell-48gb-offload.yaml"))
    assessment = assess(spec, DEFAULT_CATALOG)
    assert assessment.estimate is not None and assessment.recommendation is not None
    host = assessment.estimate.host_bytes_per_node
    assert host is not None and host > 30 * 2**30  # T5-XXL, the 12B DiT, CLIP and the VAE
    assert assessment.recommendation.host_memory_bytes_per_worker == host
    weights = assessment.estimate.per_gpu.weights_bytes
    assert host_memory_bytes(spec, weights, host) >= BASE_HOST_MEMORY_BYTES + host


def test_a_component_on_the_cpu_is_held_by_the_host_alone() -> None:
    doc = _doc("wan21-t2v-1.3b-480p-4090.yaml", "None")  # its UMT5 encoder on the CPU
    on_cpu = estimate(parse_workload(doc))
    for c in doc["spec"]["model"]["pipeline"]["components"]:
        if c["name"] == "text_encoder":
            c["device"] = "Gpu"
    on_gpu = estimate(parse_workload(doc))
    assert on_gpu.host_bytes_per_node is None
    moved = on_gpu.per_gpu.weights_bytes - on_cpu.per_gpu.weights_bytes
    assert on_cpu.host_bytes_per_node == moved > 0
