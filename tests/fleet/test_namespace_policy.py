"""Namespace policy for measurements (issue 15): per-namespace concurrent Jobs and Kueue queues,
chosen by namespace labels as the admission rules are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpu_sizer.controller import kube
from gpu_sizer.controller.options import Options
from gpu_sizer.controller.reconciler import Reconciler
from gpu_sizer.measurement.backends import KubernetesJobBackend
from gpu_sizer.policy.namespace import PolicyError, parse_policy

POLICY = """
maxConcurrentMeasurements: 3
namespaceRules:
  - namespaceSelector: {matchLabels: {team: research}}
    maxConcurrentMeasurements: 1
    localQueue: research-gpus
  - namespaceSelector: {matchLabels: {team: serving}}
"""


def test_rules_set_limits_and_queues_and_inherit_the_top_level_limit() -> None:
    import yaml

    policy = parse_policy(yaml.safe_load(POLICY))
    research = policy.for_namespace({"team": "research"})
    assert (research.max_concurrent_measurements, research.local_queue) == (1, "research-gpus")
    serving = policy.for_namespace({"team": "serving"})
    assert (serving.max_concurrent_measurements, serving.local_queue) == (3, None)
    other = policy.for_namespace({})
    assert (other.max_concurrent_measurements, other.local_queue) == (3, None)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"maxConcurrentMeasurements": 0}, "maxConcurrentMeasurements"),
        ({"namespaceRules": [{"localQueue": "Not_A_Name"}]}, "localQueue"),
    ],
)
def test_invalid_settings_name_the_field(doc: dict[str, Any], path: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(doc)
    assert path in str(err.value)


class _Client:
    def __init__(self, labels: dict[str, dict[str, str]]) -> None:
        self.labels = labels
        self.reads: list[str] = []

    async def get(self, path: str) -> Any:
        self.reads.append(path)
        name = path.rsplit("/", 1)[-1]
        if name not in self.labels:
            raise kube.Unavailable(503, "injected")
        return {"metadata": {"name": name, "labels": self.labels[name]}}


async def test_the_operator_reads_namespace_labels_once_per_ttl(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    reconciler = Reconciler(Options(policy_file=str(path)), KubernetesJobBackend())
    client = _Client({"lab": {"team": "research"}, "web": {"team": "serving"}})
    reconciler._client = client  # type: ignore[assignment]
    lab = await reconciler._namespace_policy("lab")
    assert lab is not None and lab.local_queue == "research-gpus"
    assert reconciler._kueue_queue("lab") == "research-gpus"
    assert reconciler._limit_of("lab") == 1
    await reconciler._namespace_policy("lab")
    assert client.reads == ["/api/v1/namespaces/lab"], "cached for NAMESPACE_LABELS_TTL"
    assert reconciler._limit_of("web") is None  # not read yet: no limit of its own
    await reconciler._namespace_policy("web")
    assert reconciler._limit_of("web") == 3
    # Labels unreadable and never read: the settings of a namespace without labels.
    gone = await reconciler._namespace_policy("gone")
    assert gone is not None and gone.local_queue is None and gone.max_concurrent_measurements == 3


async def test_without_a_policy_file_nothing_is_read() -> None:
    reconciler = Reconciler(Options(), KubernetesJobBackend())
    assert await reconciler._namespace_policy("any") is None
    assert reconciler._limit_of("any") is None and reconciler._kueue_queue("any") is None
