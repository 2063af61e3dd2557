"""A remembered answer never outlives what decided it: the namespace and its policy, the
namespace's labels, the catalog, the operator's options; and a shed review leaves nothing
behind that a later review of the same spec would be answered with.

The handler is called as the webhook server calls it (:mod:`gpu_sizer.admission.direct` hands
it read-only views), with namespace labels from a table the test edits, so that each change is
made between two reviews of the very same spec.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
from collections.abc import Iterator
from types import MappingProxyType, SimpleNamespace
from typing import Any

import kopf
import pytest
import yaml

from gpu_sizer.admission import handlers, server
from gpu_sizer.admission.capacity import AdmissionCapacity, Overloaded
from gpu_sizer.admission.namespaces import NamespaceLabels
from gpu_sizer.admission.verdict import review
from gpu_sizer.catalog import DEFAULT_CATALOG, catalog_to_data
from gpu_sizer.policy.namespace import EffectivePolicy, parse_policy

from .conftest import workload
from .test_webhook import inference

#: A platform rule as a policy file sets it: namespaces labelled team=research may use only
#: the L4 and the A100 40 GB, with a 15 % default headroom.
POLICY = {
    "namespaceRules": [
        {
            "namespaceSelector": {"matchLabels": {"team": "research"}},
            "allowedGpuClasses": ["nvidia-l4", "nvidia-a100-40gb"],
            "defaultMinHeadroomFraction": 0.15,
        }
    ]
}


def h200_spec() -> dict[str, Any]:
    """Llama 3 8B pinned to the H200: fits, and is outside the research rule's classes."""
    spec = inference()
    spec["placement"] = {"gpuClasses": ["nvidia-h200"]}
    return spec


@pytest.fixture
def labels() -> Iterator[dict[str, dict[str, str]]]:
    """Namespace labels the handler reads (edited by the tests), read afresh on every review
    (ttl 0), under :data:`POLICY`; the handlers' configuration is restored afterwards."""
    table: dict[str, dict[str, str]] = {"open": {}, "lab": {"team": "research"}}
    saved = handlers._config
    config = handlers.AdmissionConfig(
        policy=parse_policy(POLICY),
        namespaces=NamespaceLabels(lambda name: dict(table[name]), ttl=0.0),
        capacity=AdmissionCapacity(),
    )
    handlers.configure_admission(config)
    try:
        yield table
    finally:
        handlers.configure_admission(saved)
        config.capacity.close()


async def verdict(spec: dict[str, Any], namespace: str) -> tuple[bool, str, list[str]]:
    """(allowed, denial message, warnings) of a CREATE review, as the direct dispatch calls it."""
    body = MappingProxyType(workload(spec, namespace=namespace))
    warnings: list[str] = []
    try:
        await handlers.validate_gpuworkload(
            body=body, subresource=None, warnings=warnings, operation="CREATE", new=body
        )
    except kopf.AdmissionError as exc:
        return False, str(exc), warnings
    return True, "", warnings


async def test_an_answer_for_one_namespace_is_never_served_to_another(
    labels: dict[str, dict[str, str]],
) -> None:
    spec = h200_spec()
    assert (await verdict(spec, "open"))[0] is True
    assert len(handlers._config.answers) == 1  # remembered ...
    allowed, message, _ = await verdict(spec, "lab")  # ... and not served here
    assert allowed is False
    assert message.startswith("spec.placement.gpuClasses: namespace 'lab' allows only")
    # The other way round: the denial stays the lab's.
    assert (await verdict(spec, "open"))[0] is True
    assert (await verdict(spec, "lab"))[0] is False


async def test_namespaces_with_one_policy_each_get_their_own_message(
    labels: dict[str, dict[str, str]],
) -> None:
    """Same spec, same effective policy, another namespace: the message names its own."""
    labels["lab2"] = {"team": "research"}
    spec = h200_spec()
    first, second = await verdict(spec, "lab"), await verdict(spec, "lab2")
    assert "namespace 'lab' " in first[1] and "namespace 'lab2' " in second[1]
    assert "'lab'" not in second[1]


async def test_relabelling_a_namespace_changes_the_next_answer(
    labels: dict[str, dict[str, str]],
) -> None:
    spec = h200_spec()
    assert (await verdict(spec, "open"))[0] is True
    labels["open"] = {"team": "research"}  # the platform moves the namespace under the rule
    allowed, message, _ = await verdict(spec, "open")
    assert allowed is False and "namespace 'open' allows only" in message
    labels["open"] = {}  # and back out
    assert (await verdict(spec, "open"))[0] is True


async def test_the_operators_options_decide_anew_after_a_restart(
    labels: dict[str, dict[str, str]], tmp_path: Any
) -> None:
    """``--policy``, ``--default-headroom`` and ``--catalog`` are read by :func:`configure` at
    start-up, which installs a new configuration, and with it an empty set of answers."""
    spec = h200_spec()
    assert (await verdict(spec, "open"))[0] is True
    before = handlers._config

    def start(**options: Any) -> None:
        settings = kopf.OperatorSettings()
        args = SimpleNamespace(webhook_cert_dir=str(tmp_path), **options)
        previous = handlers._config
        assert server.configure(settings, args) is not None
        if previous is not before:
            previous.capacity.close()
        # The test's namespace labels, on the very configuration (and answers) configure made.
        handlers._config.namespaces = NamespaceLabels(lambda name: dict(labels[name]), ttl=0.0)

    everything_research = {
        "namespaceRules": [{"namespaceSelector": {}, "allowedGpuClasses": ["nvidia-l4"]}]
    }
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(yaml.safe_dump(everything_research))
    start(policy=str(policy_file))
    assert handlers._config is not before and len(handlers._config.answers) == 0
    allowed, message, _ = await verdict(spec, "open")
    assert allowed is False and "namespace 'open' allows only nvidia-l4" in message

    # A headroom default the spec cannot meet on its class (the L4 leaves it 13 % free):
    # admitted under --default-headroom 0.1, denied under 0.3, the same spec again.
    roomy = inference()
    roomy["placement"] = {"gpuClasses": ["nvidia-l4"]}
    start()
    assert (await verdict(roomy, "open"))[0] is True
    start(default_headroom=0.3)
    allowed, message, _ = await verdict(roomy, "open")
    assert allowed is False and "30% headroom required" in message, message
    # A catalog without the H200: the pinned class is unknown now.
    catalog_file = tmp_path / "catalog.yaml"
    without = [c for c in DEFAULT_CATALOG if c.name != "nvidia-h200"]
    assert len(without) < len(DEFAULT_CATALOG)
    catalog_file.write_text(yaml.safe_dump(catalog_to_data(without)))
    start()
    assert (await verdict(spec, "open"))[0] is True
    start(catalog=str(catalog_file))
    allowed, message, _ = await verdict(spec, "open")
    assert allowed is False and "nvidia-h200" in message
    handlers._config.capacity.close()


def test_the_verdict_reads_nothing_the_key_does_not_hold() -> None:
    """The webhook's verdict is :func:`review` of the spec, the namespace, its effective policy
    and the configuration's catalog, nothing more (no calibration: the webhook sizes from the
    memory model alone; calibration factors show in the status the controller writes). A new
    input to it must enter the key: this fails until it is looked at."""
    assert list(inspect.signature(review).parameters) == [
        "spec_doc", "namespace", "policy", "catalog"
    ]  # fmt: skip
    source = inspect.getsource(handlers.validate_gpuworkload)
    assert 'review, spec, namespace=namespace or "", policy=policy, catalog=config.shipped' in (
        source
    )
    assert 'key = None if text is None else (text, namespace or "", policy)' in source
    # Every field of the effective policy is compared and hashed: none can be left out of it.
    fields = dataclasses.fields(EffectivePolicy)
    assert fields and all(f.compare and f.hash is not False for f in fields)
    assert EffectivePolicy.__dataclass_params__.frozen  # type: ignore[attr-defined]


async def test_a_shed_review_leaves_no_answer_behind(labels: dict[str, dict[str, str]]) -> None:
    """Shed with 429 while the pool is backlogged, the same spec reviewed later is judged:
    denied where it must be, with the denial's own message."""
    now = [0.0]
    capacity = AdmissionCapacity(budget=0.025, processes=0, clock=lambda: now[0])
    handlers.configure_admission(dataclasses.replace(handlers._config, capacity=capacity))
    spec = h200_spec()
    gate = threading.Event()
    try:
        first = asyncio.create_task(capacity.run(gate.wait, 120))
        while capacity.pending < 1:
            await asyncio.sleep(0.01)
        now[0] += 0.010  # one piece took 10 ms: the pool's pace
        gate.set()
        await first
        gate.clear()
        ahead = [asyncio.create_task(capacity.run(gate.wait, 120)) for _ in range(3)]
        async with asyncio.timeout(60):
            while capacity.pending < 3:
                await asyncio.sleep(0.01)
        with pytest.raises(Overloaded) as err:  # 30 ms ahead: over the 25 ms budget
            await verdict(spec, "lab")
        assert err.value.status == 429
        assert len(handlers._config.answers) == 0 and not handlers._config.answers._computing
        gate.set()
        await asyncio.gather(*ahead)
        allowed, message, _ = await verdict(spec, "lab")
        assert allowed is False and "namespace 'lab' allows only" in message
    finally:
        gate.set()
        capacity.close()
