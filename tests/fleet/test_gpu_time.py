"""GPU-seconds per day per namespace (issue 15, item 1): the charge of each measurement Job, the
UTC-day window and the budget state a Queued message shows (gpu_sizer.measurement.gpu_time)."""

from __future__ import annotations

import datetime as dt

import yaml

from gpu_sizer.api.status import (
    EstimateStatus,
    GPUWorkloadStatus,
    MeasurementStatus,
    MeasurementUsage,
    PerGpuBreakdown,
    Phase,
)
from gpu_sizer.measurement import gpu_time
from gpu_sizer.policy.namespace import parse_policy


def _at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _m(job: str, started: str, completed: str | None = None) -> MeasurementStatus:
    return MeasurementStatus(
        spec_hash="h", job_name=job, started_at=started, completed_at=completed
    )


def test_a_job_is_charged_gpus_times_whole_seconds_once() -> None:
    now = _at("2026-12-01T10:01:30Z")
    usage = gpu_time.charge(None, _m("j1", "2026-12-01T10:00:00Z"), 2, now)
    assert usage == MeasurementUsage(day="2026-12-01", gpu_seconds=180, last_job_name="j1")
    # The same Job seen ending again (a rewrite, a restart) is not charged twice.
    assert gpu_time.charge(usage, _m("j1", "2026-12-01T10:00:00Z"), 2, now) == usage
    # The next Job of the workload (a CUDA OOM moved it to a larger class) adds to the day.
    later = _at("2026-12-01T10:02:00.2Z")
    usage2 = gpu_time.charge(usage, _m("j2", "2026-12-01T10:01:30Z"), 1, later)
    assert usage2 is not None and usage2.gpu_seconds == 180 + 31  # 30.2 s rounds up
    assert usage2.last_job_name == "j2"


def test_at_least_one_gpu_second_per_job_and_nothing_without_a_start() -> None:
    now = _at("2026-12-01T10:00:00Z")
    usage = gpu_time.charge(None, _m("j", "2026-12-01T10:00:00Z"), 1, now)
    assert usage is not None and usage.gpu_seconds == 1
    assert gpu_time.charge(None, MeasurementStatus(spec_hash="h", job_name="j"), 1, now) is None
    assert gpu_time.charge(None, None, 1, now) is None


def test_a_new_utc_day_starts_from_zero() -> None:
    usage = MeasurementUsage(day="2026-11-30", gpu_seconds=5000, last_job_name="old")
    now = _at("2026-12-01T00:00:10Z")
    new = gpu_time.charge(usage, _m("j", "2026-11-30T23:59:50Z"), 1, now)
    # Charged to the day its ending was observed, in full (20 s), the old day's sum dropped.
    assert new == MeasurementUsage(day="2026-12-01", gpu_seconds=20, last_job_name="j")


def _status(
    phase: Phase,
    usage: MeasurementUsage | None,
    m: MeasurementStatus | None = None,
    gpus: int = 1,
) -> GPUWorkloadStatus:
    est = EstimateStatus(
        parameter_count=1, gpu_count=gpus, kv_cache_bytes_per_token=0, per_gpu=PerGpuBreakdown()
    )
    return GPUWorkloadStatus(phase=phase, estimate=est, measurement=m, measurement_usage=usage)


def test_used_today_counts_todays_charges_and_running_seconds() -> None:
    now = _at("2026-12-01T12:00:00Z")
    statuses = [
        _status(Phase.Ready, MeasurementUsage(day="2026-12-01", gpu_seconds=100)),
        _status(Phase.Ready, MeasurementUsage(day="2026-11-30", gpu_seconds=9999)),
        # Running for 60 s on 4 GPUs.
        _status(Phase.Measuring, None, _m("run", "2026-12-01T11:59:00Z"), gpus=4),
        # Ended and charged; its ending is being written: not counted twice.
        _status(
            Phase.Measuring,
            MeasurementUsage(day="2026-12-01", gpu_seconds=7, last_job_name="done"),
            _m("done", "2026-12-01T11:00:00Z"),
        ),
    ]
    assert gpu_time.used_today(statuses, now) == 100 + 240 + 7


def test_budget_state_names_the_field_the_figures_and_when_it_frees() -> None:
    now = _at("2026-12-01T12:00:00Z")
    state = gpu_time.budget_state(
        [_status(Phase.Ready, MeasurementUsage(day="2026-12-01", gpu_seconds=3600))], 3600, now
    )
    assert state.exhausted
    text = state.message("ml-team")
    assert "used 3600 of its 3600 measurement GPU-seconds of UTC day 2026-12-01" in text
    assert "measurementGpuSecondsPerDay" in text
    assert "frees at 2026-12-02T00:00:00Z" in text
    assert not gpu_time.budget_state([], 3600, now).exhausted
    assert gpu_time.next_day_start(_at("2026-12-31T23:59:59Z")) == _at("2027-01-01T00:00:00Z")


def test_policy_budget_per_rule_replaces_the_top_level_one() -> None:
    policy = parse_policy(
        yaml.safe_load(
            "measurementGpuSecondsPerDay: 36000\n"
            "namespaceRules:\n"
            "  - namespaceSelector: {matchLabels: {team: research}}\n"
            "    measurementGpuSecondsPerDay: 3600\n"
        )
    )
    assert policy.for_namespace({"team": "research"}).measurement_gpu_seconds_per_day == 3600
    assert policy.for_namespace({}).measurement_gpu_seconds_per_day == 36000
    assert parse_policy({}).for_namespace({}).measurement_gpu_seconds_per_day is None


def test_the_charge_view_of_a_stored_status_counts_the_same() -> None:
    now = _at("2026-12-01T12:00:00Z")
    statuses = [
        _status(Phase.Ready, MeasurementUsage(day="2026-12-01", gpu_seconds=100)),
        _status(Phase.Measuring, None, _m("run", "2026-12-01T11:59:00Z"), gpus=4),
    ]
    stored = [s.model_dump(by_alias=True, mode="json", exclude_none=True) for s in statuses]
    views = [gpu_time.charge_view(raw) for raw in stored]
    assert gpu_time.used_today([v for v in views if v is not None], now) == 340
    assert gpu_time.charge_view({"phase": "Nonsense"}) is None
    assert gpu_time.charge_view("not a status") is None
