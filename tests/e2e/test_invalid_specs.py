"""Objects the API server stored without the schema or webhook: Stalled, once, and quietly."""

from __future__ import annotations

from typing import Any

import pytest
from gpu_sizer_testbed.emulator import LoopbackCluster

from tests.e2e.conftest import EVENTS, GW, NS, condition, eventually, invalid_spec, spec, workload


async def _stalled(cluster: LoopbackCluster, name: str) -> Any:
    obj = await cluster.get(GW, NS, name)
    return obj if condition(obj, "Stalled").get("status") == "True" else None


async def _invalid_events(cluster: LoopbackCluster) -> list[dict[str, Any]]:
    return [e for e in await cluster.list(EVENTS, NS) if e.get("reason") == "InvalidSpec"]


@pytest.mark.emulated_api  # a real API server refuses a non-object spec at create (CRD schema)
@pytest.mark.parametrize("body", ["hello", None, [1, 2]], ids=["string", "null", "list"])
async def test_a_spec_that_is_not_an_object_is_stalled_not_retried(
    cluster: LoopbackCluster, start_operator, body: Any
) -> None:
    await cluster.create(GW, workload("odd", body))
    await cluster.create(GW, workload("fine", spec(measurement={"mode": "Disabled"})))
    proc = start_operator()
    stalled = await eventually(lambda: _stalled(cluster, "odd"), what="Stalled=True")
    assert stalled["status"]["phase"] == "Failed"
    stall = condition(stalled, "Stalled")
    assert stall["reason"] == "InvalidSpec" and "spec: must be an object" in stall["message"]
    (event,) = await eventually(lambda: _invalid_events(cluster), what="an InvalidSpec Event")
    assert event["type"] == "Warning"
    await eventually(lambda: _stalled_or_ready(cluster, "fine"), what="the other one served")
    log = proc.tail(400)
    assert "Traceback" not in log and "TypeError" not in log


async def _stalled_or_ready(cluster: LoopbackCluster, name: str) -> Any:
    obj = await cluster.get(GW, NS, name)
    return obj if condition(obj, "Ready").get("status") == "True" else None


@pytest.mark.local_operator  # restarts the operator process the suite starts
async def test_restarts_post_no_new_events_for_an_unchanged_verdict(
    cluster: LoopbackCluster, start_operator
) -> None:
    await cluster.create(GW, workload("broken", invalid_spec()))
    huge = spec(params=10**13)  # no GPU class fits: rejected with NoSafeHeadroom
    await cluster.create(GW, workload("huge", huge))
    for restart in range(3):
        proc = start_operator("-v")  # -v: the operator logs each decision
        await eventually(lambda: _stalled(cluster, "broken"), what="Stalled=True")

        async def handled(n: int = restart, p: Any = proc) -> bool:
            # Both objects were decided by this operator run (the log file is appended to).
            log = p.tail(10_000)
            return all(log.count(f"{NS}/{name}: decided:") > n for name in ("broken", "huge"))

        await eventually(handled, what="both objects handled by this operator run")
        if restart == 0:
            # Events are posted after the status write: the first run must have posted both
            # before it is stopped, or no later run (same verdict) would post them at all.
            async def warned() -> bool:
                events = await cluster.list(EVENTS, NS)
                named = {e["involvedObject"]["name"] for e in events if e.get("type") == "Warning"}
                return {"broken", "huge"} <= named

            await eventually(warned, what="both Warning events posted by the first run")
        proc.stop()
    events = await cluster.list(EVENTS, NS)
    by_obj: dict[str, list[str]] = {}
    for e in events:
        if e.get("type") == "Warning":
            by_obj.setdefault(e["involvedObject"]["name"], []).append(e["reason"])
    assert by_obj.get("broken") == ["InvalidSpec"], by_obj
    assert len(by_obj.get("huge", [])) == 1, by_obj
