"""Shared measurement records in decisions (issue 15, items 3 and 5; pure core): the walk over
records and Jobs in flight, the waiting plan, what makes a finished measurement stale, the
namespace opt-out, GFD driver labels on nodes and the key label on Jobs."""

from __future__ import annotations

import datetime
from typing import Any

import yaml

from gpu_sizer.api import MeasurementStatus, Phase, parse_spec, spec_hash
from gpu_sizer.api.record import KEY_LABEL, build_record, parse_record
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.inventory.nodes import GpuNode, parse_node
from gpu_sizer.lifecycle import StartJob, Workload
from gpu_sizer.measurement.job import JobRequest, job_manifest
from gpu_sizer.policy.namespace import MeasurementSharing, parse_policy
from gpu_sizer.records.sharing import (
    WAITING,
    Reuse,
    Wait,
    candidate_keys,
    find_shared,
    remeasure_previous,
    reused_measurement,
    stale,
    waiting_plan,
)
from tests.controller.test_reconcile import CONFIG, PRESENT, cond, raw, start

NOW = datetime.datetime(2026, 12, 1, 2, 0, tzinfo=datetime.UTC)
#: When a wait on a Job in flight ends (its deadline, sharing.wait_until).
UNTIL = NOW + datetime.timedelta(minutes=20)
IMAGE = "ghcr.io/gpu-sizer/gpu-sizer-probe:1"
CLASSES = {c.name: c for c in DEFAULT_CATALOG}
L4 = CLASSES["nvidia-l4"]


def _spec() -> Any:
    return parse_spec(raw())


def _no_drivers(_: str) -> frozenset[str]:
    return frozenset()


def _record(gpu_class: str, *, oom: bool = False, image: str = IMAGE, driver: str = "") -> Any:
    spec = _spec()
    key = candidate_keys(
        spec, CLASSES[gpu_class], probe_image=image, drivers={driver} if driver else ()
    )[0]
    result = MeasurementStatus(
        spec_hash="0" * 16,
        job_name="src-job",
        node_name="node-1",
        gpu_class=gpu_class,
        device="cuda",
        peak_device_used_bytes=None if oom else 9 << 30,
        out_of_memory=oom,
        reason="OutOfMemory" if oom else None,
        completed_at="2026-12-01T01:00:00Z",
    )
    obj = build_record(
        key,
        spec,
        result=result,
        source_namespace="team-a",
        source_name="src",
        estimate=None,
        now=NOW,
        ttl_seconds=86400,
    )
    parsed = parse_record(obj)
    assert parsed is not None
    return parsed


def _find(records: dict[str, Any], jobs: dict[str, str] | None = None, first: str = "nvidia-l4"):  # type: ignore[no-untyped-def]
    return find_shared(
        _spec(),
        CLASSES[first],
        CONFIG,
        PRESENT,
        probe_image=IMAGE,
        drivers=_no_drivers,
        record=lambda k: records.get(k),
        in_flight=lambda k: (j, UNTIL) if (j := (jobs or {}).get(k)) else None,
    )


def test_a_fresh_success_record_is_reused() -> None:
    rec = _record("nvidia-l4")
    found = _find({rec.spec.key: rec})
    assert found == Reuse(rec, ())


def test_a_job_in_flight_is_waited_for() -> None:
    key = candidate_keys(_spec(), L4, probe_image=IMAGE, drivers=())[0].digest()
    found = _find({}, {key: "team-a/job-1"})
    assert found == Wait(key, "team-a/job-1", "nvidia-l4", UNTIL)


def test_nothing_shared_means_measuring() -> None:
    assert _find({}) is None
    other_image = _record("nvidia-l4", image="other:2")
    assert _find({other_image.spec.key: other_image}) is None


def test_an_oom_record_walks_to_the_next_class_like_the_probe_would() -> None:
    oom = _record("nvidia-l4", oom=True)
    nxt = next(c for c in DEFAULT_CATALOG if c.name == "nvidia-a100-80gb")
    ok = _record(nxt.name)
    found = _find({oom.spec.key: oom, ok.spec.key: ok})
    assert isinstance(found, Reuse) and found.record is ok
    assert found.out_of_memory_classes == ("nvidia-l4",)
    m = reused_measurement(_spec(), "h" * 16, found)
    assert m.reused_from == ok.name and m.out_of_memory_classes == ["nvidia-l4"]
    assert m.job_name is None and m.spec_hash == "h" * 16
    assert m.record_expires_at == ok.spec.expires_at
    # The next class measured by someone right now: wait for it.
    key = candidate_keys(_spec(), nxt, probe_image=IMAGE, drivers=())[0].digest()
    assert _find({oom.spec.key: oom}, {key: "team-a/job-2"}) == Wait(
        key, "team-a/job-2", nxt.name, UNTIL
    )
    # Nobody on the next class: measure (from the first class, as without records).
    assert _find({oom.spec.key: oom}) is None


def test_a_driver_on_the_nodes_selects_the_record_of_that_driver() -> None:
    rec = _record("nvidia-l4", driver="550")
    found = find_shared(
        _spec(),
        L4,
        CONFIG,
        PRESENT,
        probe_image=IMAGE,
        drivers=lambda c: frozenset({"550", "560"}) if c == "nvidia-l4" else frozenset(),
        record=lambda k: rec if k == rec.spec.key else None,
        in_flight=lambda k: None,
    )
    assert found == Reuse(rec, ())


def test_waiting_plan_holds_the_start_back_with_its_reason_and_one_event() -> None:
    plan = start(raw())
    spec = _spec()
    wl = Workload("w", "ns", 1, spec, spec_hash(spec), None)
    held = waiting_plan(plan, wl, CONFIG, wait=Wait("k" * 64, "team-a/job-1", "nvidia-l4"), now="T")
    assert held.status.phase is Phase.Estimated
    assert not any(isinstance(a, StartJob) for a in held.actions)
    measured = cond(held.status, "Measured")
    assert (measured.status, measured.reason) == ("False", WAITING)
    assert "team-a/job-1" in measured.message
    assert [a.reason for a in held.actions] == [WAITING]  # type: ignore[union-attr]
    again = waiting_plan(
        plan, Workload("w", "ns", 1, spec, spec_hash(spec), held.status), CONFIG,
        wait=Wait("k" * 64, "team-a/job-1", "nvidia-l4"), now="T2",
    )  # fmt: skip
    assert again.actions == () and again.status == held.status


# --- stale measurements -------------------------------------------------------------------------


def _measured(**key: Any) -> MeasurementStatus:
    fields = candidate_keys(_spec(), L4, probe_image=IMAGE, drivers={"550"})[0]
    return MeasurementStatus(
        spec_hash="h" * 16,
        job_name="w-job",
        gpu_class="nvidia-l4",
        device="cuda",
        peak_device_used_bytes=9 << 30,
        completed_at="2026-11-30T00:00:00Z",
        retry=0,
        key_fields=fields.model_copy(update=key),
        measurement_key=fields.digest(),
    )


def _stale(m: MeasurementStatus, *, image: str = IMAGE, drivers: Any = None, **kw: Any) -> Any:
    return stale(
        m,
        _spec(),
        CONFIG,
        probe_image=image,
        drivers=drivers or (lambda c: frozenset({"550"})),
        record_gone=kw.get("gone", False),
        now=NOW,
        revalidate_after_seconds=kw.get("revalidate"),
    )


def test_an_unchanged_world_is_not_stale() -> None:
    assert _stale(_measured()) is None
    assert _stale(_measured(), drivers=_no_drivers) is None  # no node says: not a change
    legacy = _measured().model_copy(update={"key_fields": None})
    assert _stale(legacy, image="new:2") is None  # measured before keys existed


def test_each_change_names_its_reason() -> None:
    why = _stale(_measured(), image="new:2")
    assert why.reason == "ProbeImageChanged" and f"{IMAGE} -> new:2" in why.message
    assert _stale(_measured(engine_version="0.6.0")).reason == "EngineVersionChanged"
    assert _stale(_measured(catalog_digest="0" * 16)).reason == "CatalogChanged"
    assert _stale(_measured(gpu_class="no-such-class")).reason == "CatalogChanged"
    driver = _stale(_measured(), drivers=lambda c: frozenset({"560"}))
    assert driver.reason == "DriverChanged" and "560" in driver.message
    assert _stale(_measured(), gone=True).reason == "RecordDeleted"
    assert _stale(_measured(), revalidate=86400.0).reason == "Revalidation"
    assert _stale(_measured(), revalidate=7 * 86400.0) is None


def test_remeasure_placeholder_gets_a_new_job_name() -> None:
    done = start(raw())
    prev = done.status.model_copy(update={"phase": Phase.Ready, "measurement": _measured()})
    placeholder = remeasure_previous(prev)
    assert placeholder.phase is Phase.Estimated
    assert placeholder.measurement is not None and not placeholder.measurement.completed_at
    again = start(raw(), prev=placeholder.model_copy(update={"spec_hash": done.status.spec_hash}))
    starts = [a for a in again.actions if isinstance(a, StartJob)]
    assert starts and again.status.measurement is not None
    assert again.status.measurement.retry == 1


# --- policy, nodes, Jobs ------------------------------------------------------------------------


def test_measurement_sharing_by_namespace_rule() -> None:
    policy = parse_policy(
        yaml.safe_load(
            "namespaceRules:\n"
            "  - namespaceSelector: {matchLabels: {data: confidential}}\n"
            "    measurementSharing: Disabled\n"
        )
    )
    assert policy.for_namespace({"data": "confidential"}).measurement_sharing is (
        MeasurementSharing.Disabled
    )
    assert policy.for_namespace({}).measurement_sharing is MeasurementSharing.Enabled
    off = parse_policy({"measurementSharing": "Disabled"})
    assert off.for_namespace({}).measurement_sharing is MeasurementSharing.Disabled


def _node(labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "n1",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-L4",
                "nvidia.com/gpu.count": "1",
                **labels,
            },
        },
        "status": {"allocatable": {"nvidia.com/gpu": "1"}},
    }


def test_nodes_carry_the_gfd_driver_major() -> None:
    new = parse_node(_node({"nvidia.com/cuda.driver-version.major": "560"}), DEFAULT_CATALOG)
    old = parse_node(_node({"nvidia.com/cuda.driver.major": "535"}), DEFAULT_CATALOG)
    none = parse_node(_node({}), DEFAULT_CATALOG)
    assert isinstance(new, GpuNode) and new.driver_major == "560"
    assert isinstance(old, GpuNode) and old.driver_major == "535"
    assert isinstance(none, GpuNode) and none.driver_major == ""


def test_jobs_carry_the_key_label_only_when_shared() -> None:
    req = JobRequest(
        namespace="ns",
        workload="w",
        workload_uid="uid",
        spec_hash="h" * 16,
        gpu_class=L4,
        gpus=1,
        memory_bytes=8 << 30,
        image=IMAGE,
        name="w-job",
    )
    plain = job_manifest(_spec(), req)
    assert KEY_LABEL not in plain["metadata"]["labels"]
    key = "a" * 64
    keyed = job_manifest(_spec(), JobRequest(**{**req.__dict__, "measurement_key": key}))
    assert keyed["metadata"]["labels"][KEY_LABEL] == "a" * 40
    assert keyed["spec"]["template"]["metadata"]["labels"][KEY_LABEL] == "a" * 40


def test_only_a_run_no_tenant_could_touch_is_trusted() -> None:
    from gpu_sizer.records.sharing import trusted_run

    def trusted(doc: dict[str, Any], **kw: Any) -> bool:
        args: dict[str, Any] = {
            "effective_image": IMAGE,
            "probe_image": IMAGE,
            "job_namespace": "gpu-sizer",
            "operator_namespace": "gpu-sizer",
            "local": False,
        }
        args.update(kw)
        return trusted_run(parse_spec(doc), **args)

    assert trusted(raw())
    assert not trusted(raw(), job_namespace="team-a")  # a tenant may create pods there
    assert not trusted(raw(), operator_namespace=None, job_namespace=None)
    assert not trusted(raw(), effective_image="team/own-probe:1")  # prints what it likes
    command = raw(measurement={"mode": "Command", "command": ["python", "serve.py"]})
    assert not trusted(command) and not trusted(command, local=True)
    assert trusted(raw(), local=True, job_namespace=None, operator_namespace=None)


def test_a_wait_ends_at_the_jobs_deadline_plus_the_result_grace() -> None:
    from gpu_sizer.records.sharing import WAIT_MARGIN_SECONDS, wait_until

    until = wait_until("2026-12-01T01:00:00Z", 930, 15.0)
    assert until == datetime.datetime(2026, 12, 1, 1, 0, tzinfo=datetime.UTC) + (
        datetime.timedelta(seconds=930 + 15 + WAIT_MARGIN_SECONDS)
    )
    assert wait_until(None, 930, 15.0) is None and wait_until("x", None, 15.0) is None


def test_a_reused_measurement_expires_with_the_ttl_not_the_records_claim() -> None:
    rec = _record("nvidia-l4")
    rec.spec.expires_at = "9991-01-01T00:00:00Z"
    m = reused_measurement(_spec(), "h" * 16, Reuse(rec, ()), ttl_seconds=3600)
    assert m.record_expires_at == "2026-12-01T03:00:00Z"
