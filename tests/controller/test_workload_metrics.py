"""The per-workload gauges as one collector (issue 17): the series the labelled Gauges gave."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from gpu_sizer.metrics import ESTIMATE_COMPONENTS, WorkloadGauges


def _samples(registry: CollectorRegistry) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in registry.collect()
        for s in family.samples
    }


def test_same_series_as_labelled_gauges() -> None:
    ours = CollectorRegistry()
    gauges = WorkloadGauges()
    ours.register(gauges)
    theirs = CollectorRegistry()
    est = Gauge(
        "gpusizer_estimated_bytes", "h", ["namespace", "name", "component"], registry=theirs
    )
    peak = Gauge(
        "gpusizer_measured_peak_bytes", "h", ["namespace", "name", "kind"], registry=theirs
    )
    room = Gauge(
        "gpusizer_recommendation_headroom_fraction",
        "h",
        ["namespace", "name", "gpu_class", "basis"],
        registry=theirs,
    )
    components = {c: 1000 + i for i, c in enumerate(ESTIMATE_COMPONENTS)}
    for name in ("a", "b"):
        gauges.estimated("ns", name, components)
        for component, value in components.items():
            est.labels("ns", name, component).set(value)
    # Later figures replace the ones given; the others keep theirs.
    gauges.estimated("ns", "a", {"kvCache": 7})
    est.labels("ns", "a", "kvCache").set(7)
    gauges.measured("ns", "a", {"allocated": 5, "device": 9})
    peak.labels("ns", "a", "allocated").set(5)
    peak.labels("ns", "a", "device").set(9)
    gauges.headroom("ns", "a", ("nvidia-l4", "Estimate", 0.25))
    gauges.headroom("ns", "a", ("nvidia-a100-80gb", "Measurement", 0.5))  # replaces it
    room.labels("ns", "a", "nvidia-a100-80gb", "Measurement").set(0.5)
    gauges.headroom("ns", "b", ("nvidia-l4", "Estimate", 0.1))
    gauges.headroom("ns", "b", None)  # no recommendation: no series
    assert _samples(ours) == _samples(theirs)
    assert b"# TYPE gpusizer_estimated_bytes gauge" in generate_latest(ours)


def test_forgetting_a_workload_drops_every_series_that_names_it() -> None:
    gauges = WorkloadGauges()
    gauges.estimated("ns", "a", {"total": 1})
    gauges.measured("ns", "a", {"reserved": 2})
    gauges.headroom("ns", "a", ("nvidia-l4", "Estimate", 0.2))
    gauges.estimated("ns", "b", {"total": 3})
    gauges.forget("ns", "a")
    registry = CollectorRegistry()
    registry.register(gauges)
    assert {labels for _, labels, _ in _samples(registry)} == {
        (("component", "total"), ("name", "b"), ("namespace", "ns"))
    }
    assert gauges.series() == 1
