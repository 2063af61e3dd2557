"""Peering priority: replicas must not share one, or kopf pauses all of them."""

from __future__ import annotations

from gpu_sizer.controller.options import DEFAULT_PROBE_IMAGE, peering_priority


def test_explicit_priority_wins() -> None:
    assert peering_priority("7", "gpu-sizer-abc") == 7
    assert peering_priority(7, None) == 7


def test_replicas_of_a_deployment_get_different_stable_priorities() -> None:
    names = [f"gpu-sizer-6d4b9c7f5-{suffix}" for suffix in ("x2k4p", "q9z7m", "b8w3n")]
    priorities = [peering_priority(None, name) for name in names]
    assert len(set(priorities)) == len(names)
    assert priorities == [peering_priority(None, name) for name in names]  # stable per pod
    assert all(1 <= p <= 1 << 20 for p in priorities)


def test_without_a_pod_name_the_priority_is_still_positive() -> None:
    assert 1 <= peering_priority(None, None) <= 1 << 20


def test_default_probe_image_is_the_probe_not_the_operator() -> None:
    assert DEFAULT_PROBE_IMAGE.rsplit(":", 1)[0].endswith("gpu-sizer-probe")
