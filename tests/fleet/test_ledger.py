"""The measurement GPU-seconds ledger: a namespace's charges of the day outlive its workloads
(deleted, recreated) and operator restarts, each Job is charged once, and two writers lose no
charge."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
from typing import Any, cast

import pytest

from gpu_sizer.api.status import GPUWorkloadStatus, MeasurementUsage, Phase
from gpu_sizer.controller import kube
from gpu_sizer.controller.ledger_store import LedgerStore
from gpu_sizer.measurement import gpu_time, ledger
from gpu_sizer.measurement.ledger import Charge, Entry

NOW = dt.datetime(2026, 12, 1, 15, 0, tzinfo=dt.UTC)
TODAY = "2026-12-01"
PATH = kube.object_path("", "v1", "configmaps", "gpu-sizer", "gs-ledger")


def test_each_job_uid_is_charged_once_and_a_new_day_starts_from_zero() -> None:
    entry = ledger.apply(None, [Charge("a", TODAY, 30), Charge("b", TODAY, 45)])
    assert entry == Entry(TODAY, 75, ("a", "b"))
    assert ledger.apply(entry, [Charge("a", TODAY, 30)]) == entry  # seen again: not twice
    assert ledger.apply(entry, [Charge("c", "2026-11-30", 9)]) == entry  # that day is over
    assert ledger.apply(entry, [Charge("c", "2026-12-02", 9)]) == Entry("2026-12-02", 9, ("c",))
    assert ledger.used_today(entry, NOW) == 75
    assert ledger.used_today(entry, NOW + dt.timedelta(days=1)) == 0


def test_the_job_uids_kept_are_bounded() -> None:
    charges = [Charge(f"uid-{i}", TODAY, 1) for i in range(ledger.MAX_JOB_UIDS + 5)]
    entry = ledger.apply(None, charges)
    assert entry is not None and entry.gpu_seconds == ledger.MAX_JOB_UIDS + 5
    assert len(entry.jobs) == ledger.MAX_JOB_UIDS and entry.jobs[-1] == charges[-1].job_uid


def test_the_configmap_data_round_trips_and_unreadable_keys_are_left_out() -> None:
    entry = Entry(TODAY, 75, ("a", "b"))
    patch = ledger.data_patch("team-a", entry, "42")
    assert patch["metadata"] == {"resourceVersion": "42"}
    data = {**patch["data"], "team-b": "not json", "team-c": json.dumps({"day": TODAY})}
    assert ledger.parse(data) == {"team-a": entry}
    assert "metadata" not in ledger.data_patch("team-a", entry, None)


def test_a_deleted_workloads_charge_still_counts_against_the_budget() -> None:
    # 75 GPU-seconds charged today, the workloads that spent them deleted: no status is left,
    # and the budget of 20 is still exhausted.
    state = gpu_time.budget_state([], 20, NOW, ledger=75)
    assert state.used == 75 and state.exhausted
    assert "used 75 of its 20 measurement GPU-seconds" in state.message("team-a")
    # Upgrading from statuses-only: the larger of ledger and statuses counts, never the sum.
    charged = GPUWorkloadStatus(
        phase=Phase.Ready, measurement_usage=MeasurementUsage(day=TODAY, gpu_seconds=30)
    )
    assert gpu_time.used_today([charged], NOW, ledger=0) == 30
    assert gpu_time.used_today([charged], NOW, ledger=75) == 75


class FakeApi:
    """One ConfigMap with the API server's resourceVersion rules: create refuses an existing
    name (409), a merge patch carrying a stale resourceVersion is refused (409)."""

    def __init__(self) -> None:
        self.body: dict[str, Any] | None = None
        self.version = 0
        self.calls: list[str] = []

    def _stamp(self) -> dict[str, Any]:
        assert self.body is not None
        self.version += 1
        self.body["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.body)

    async def get(self, path: str) -> Any:
        self.calls.append("get")
        assert path == PATH
        if self.body is None:
            raise kube.NotFound(404, "configmaps not found")
        return copy.deepcopy(self.body)

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        self.calls.append("create")
        assert path + "/" + body["metadata"]["name"] == PATH
        if self.body is not None:
            raise kube.Conflict(409, "already exists")
        self.body = copy.deepcopy(body)
        return self._stamp()

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> Any:
        self.calls.append("patch")
        if self.body is None:
            raise kube.NotFound(404, "configmaps not found")
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != self.body["metadata"]["resourceVersion"]:
            raise kube.Conflict(409, "the object has been modified")
        self.body.setdefault("data", {}).update(patch["data"])
        return self._stamp()


def _store() -> LedgerStore:
    return LedgerStore("gpu-sizer", "gs-ledger")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_restarted_operator_reads_the_charges_back() -> None:
    api = FakeApi()
    client = cast(kube.Client, api)
    first = _store()
    run(first.load(client))
    first.charge("team-a", Charge("job-1", TODAY, 45))
    first.charge("team-a", Charge("job-2", TODAY, 30))
    assert run(first.flush(client, "team-a"))
    assert api.calls == ["get", "create"]  # both charges in one write
    restarted = _store()
    assert restarted.used("team-a", NOW) == 0 and not restarted.loaded
    run(restarted.load(client))
    assert restarted.used("team-a", NOW) == 75
    # The Job whose ending the restarted operator sees again is not charged twice.
    restarted.charge("team-a", Charge("job-2", TODAY, 30))
    assert run(restarted.flush(client, "team-a"))
    assert restarted.used("team-a", NOW) == 75
    assert ledger.parse(api.body["data"] if api.body else {})["team-a"].gpu_seconds == 75


def test_two_writers_lose_no_charge() -> None:
    api = FakeApi()
    client = cast(kube.Client, api)
    a, b = _store(), _store()
    run(a.load(client))
    run(b.load(client))  # both read "absent"
    a.charge("team-a", Charge("job-a", TODAY, 20))
    b.charge("team-a", Charge("job-b", TODAY, 7))
    b.charge("team-b", Charge("job-c", TODAY, 3))
    assert run(a.flush(client, "team-a"))
    assert run(b.flush(client, "team-a"))  # create refused, read again, patched
    assert run(b.flush(client, "team-b"))
    a.charge("team-a", Charge("job-d", TODAY, 1))
    assert run(a.flush(client, "team-a"))  # stale resourceVersion refused, read again
    stored = ledger.parse(api.body["data"] if api.body else {})
    assert stored["team-a"] == Entry(TODAY, 28, ("job-a", "job-b", "job-d"))
    assert stored["team-b"].gpu_seconds == 3


def test_a_write_that_fails_stays_pending_and_counts_meanwhile() -> None:
    api = FakeApi()
    client = cast(kube.Client, api)
    store = _store()
    run(store.load(client))

    async def down(path: str, body: Any) -> Any:
        raise kube.Unavailable(503, "etcd leader changed")

    api.create = down  # type: ignore[method-assign]
    store.charge("team-a", Charge("job-1", TODAY, 75))
    assert not run(store.flush(client, "team-a"))
    assert store.pending("team-a") and store.used("team-a", NOW) == 75
    del api.create  # the API server is back
    assert run(store.flush(client, "team-a"))
    assert not store.pending("team-a") and store.used("team-a", NOW) == 75


@pytest.mark.parametrize("raw", [None, {}, {"data": None}])
def test_an_absent_or_empty_ledger_charges_nothing(raw: Any) -> None:
    store = _store()
    store._take(raw)
    assert store.loaded and store.used("team-a", NOW) == 0
