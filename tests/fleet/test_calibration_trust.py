"""No one namespace moves calibration for everyone (gpu_sizer.records.calibration): cluster-wide
factors learn only from records no tenant could have written, from at least three namespaces, each
one vote, outliers trimmed (Iglewicz and Hoaglin's modified z-score); a namespace's own records
raise only its own estimates. The attack run's cases: seven Command-mode workloads of one
namespace allocating extra memory pushed the L4 factor to its 1.5 cap; five hand-made records
did the same."""

from __future__ import annotations

from typing import Any

from gpu_sizer.api import CalibrationMode
from gpu_sizer.records.calibration import (
    MIN_NAMESPACES,
    Calibration,
    Component,
    Sample,
    learn,
    learn_calibration,
    sample_from_record,
)

GIB = 1 << 30
L4 = ("vllm", "nvidia-l4", Component.Total)


def sample(ratio: float, namespace: str, name: str = "w", *, trusted: bool = True) -> Sample:
    return Sample(
        "vllm",
        "nvidia-l4",
        {Component.Total: 10 * GIB},
        {Component.Total: int(ratio * 10 * GIB)},
        namespace=namespace,
        source=f"{namespace}/{name}",
        trusted=trusted,
    )


def test_seven_workloads_of_one_namespace_are_one_vote_and_not_enough() -> None:
    seven = [sample(1.6, "tenant", f"w{i}") for i in range(7)]
    factor = learn(seven)[L4]
    assert factor.records == 7 and factor.namespaces == 1 and not factor.usable
    assert MIN_NAMESPACES == 3


def test_one_namespace_among_honest_ones_is_trimmed_not_followed() -> None:
    honest = [sample(1.1, f"team-{x}", f"w{i}") for x in "abcd" for i in range(2)]
    attack = [sample(1.5, "tenant", f"w{i}") for i in range(7)]
    factor = learn([*honest, *attack])[L4]
    assert factor.observed_ratio == 1.1 and factor.factor == 1.1
    assert factor.namespaces == 4 and factor.records == 8  # the tenant's 7 are trimmed
    assert not any(s.startswith("tenant/") for s in factor.sources)
    assert factor.sources[:2] == ("team-a/w0", "team-a/w1")


def test_each_namespace_is_its_median_before_the_median_of_namespaces() -> None:
    rows = [sample(r, ns) for ns, r in [("a", 1.0), ("a", 1.4), ("a", 1.4), ("b", 1.2), ("c", 1.2)]]
    factor = learn(rows)[L4]
    assert factor.observed_ratio == 1.2 and factor.usable


def test_untrusted_records_calibrate_only_their_own_namespace_and_only_upwards() -> None:
    trusted = [sample(1.1, ns) for ns in ("a", "b", "c", "d", "e")]
    own = [sample(1.4, "tenant", f"w{i}", trusted=False) for i in range(5)]
    calibration = learn_calibration(CalibrationMode.Apply, [*trusted, *own])
    cluster = (calibration.factors or {})[L4]
    assert cluster.factor == 1.1 and cluster.records == 5  # the tenant's own are not in it
    tenant = calibration.for_namespace("tenant").for_class("vllm", "nvidia-l4")
    assert tenant[Component.Total].factor == 1.4 and tenant[Component.Total].scope == "Namespace"
    other = calibration.for_namespace("team-x").for_class("vllm", "nvidia-l4")
    assert other[Component.Total].factor == 1.1
    # A namespace's own evidence never lowers what the cluster's says for it.
    low = [sample(1.0, "careful", f"w{i}", trusted=False) for i in range(5)]
    mixed = learn_calibration(CalibrationMode.Apply, [*trusted, *low])
    assert (
        mixed.for_namespace("careful").for_class("vllm", "nvidia-l4")[Component.Total].factor == 1.1
    )


def record(scope: str | None, namespace: str = "tenant") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "engine": "vllm",
        "gpuClass": "nvidia-l4",
        "estimate": {"perGpu": {"totalBytes": 10 * GIB, "runtimeOverheadBytes": GIB}},
        "result": {
            "device": "cuda",
            "completedAt": "2026-12-01T00:00:00Z",
            "peakDeviceUsedBytes": 15 * GIB,
            "sourceNamespace": namespace,
            "sourceName": "forger",
        },
    }
    if scope is not None:
        spec["scope"] = scope
    return {"kind": "GPUMeasurement", "metadata": {"name": "gpum-x"}, "spec": spec}


def test_a_records_scope_decides_whose_evidence_it_is() -> None:
    shared, _ = sample_from_record(record("Cluster"))
    assert shared is not None and shared.trusted and shared.source == "tenant/forger"
    for scope in ("Namespace", None):  # unset: a record from before scopes, the tenant's own
        own, _ = sample_from_record(record(scope))
        assert own is not None and not own.trusted and own.namespace == "tenant"


def test_a_frozen_status_keeps_the_factors_it_was_judged_with() -> None:
    rows = [sample(1.3, ns) for ns in ("a", "b", "c", "d", "e")]
    live = Calibration(CalibrationMode.Apply, learn(rows))
    from gpu_sizer.api import EstimateStatus, PerGpuBreakdown
    from gpu_sizer.records.calibration import calibrate

    est = EstimateStatus(
        parameter_count=1, gpu_count=1, per_gpu=PerGpuBreakdown(total_bytes=10 * GIB)
    )
    judged = calibrate(est, "vllm", "nvidia-l4", live)
    assert judged.calibration is not None
    (entry,) = judged.calibration.factors
    assert entry.namespaces == 5 and entry.scope == "Cluster" and len(entry.sources) == 5
    again = calibrate(est, "vllm", "nvidia-l4", Calibration.frozen(live.mode, judged.calibration))
    assert again == judged
