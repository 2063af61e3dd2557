"""Verdicts computed in the webhook's worker processes: the same answers, off the operator's
process, and a worker that dies costs a retry, never the webhook."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

from gpu_sizer.admission import verdict, workers
from gpu_sizer.admission.capacity import AdmissionCapacity, Overloaded
from gpu_sizer.admission.workers import Shipped
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.policy.namespace import Policy
from tests.example_files import WORKLOAD_FILES

from . import slow_verdict

OPEN = Policy().for_namespace({})
CATALOG = Shipped.of(tuple(DEFAULT_CATALOG))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def capacity() -> AsyncIterator[AdmissionCapacity]:
    pool = AdmissionCapacity(budget=3600.0)  # about answers, not shedding
    await asyncio.to_thread(pool.start)
    try:
        yield pool
    finally:
        pool.close()


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("path", WORKLOAD_FILES, ids=lambda p: p.stem)
async def test_a_worker_gives_the_answer_this_process_gives(
    capacity: AdmissionCapacity, path: Path
) -> None:
    spec = yaml.safe_load(path.read_text())["spec"]
    here = verdict.review(spec, namespace="team", policy=OPEN, catalog=DEFAULT_CATALOG)
    there = await capacity.run(workers.review, spec, namespace="team", policy=OPEN, catalog=CATALOG)
    assert there == here


@pytest.mark.asyncio(loop_scope="module")
async def test_verdicts_run_in_other_processes(capacity: AdmissionCapacity) -> None:
    pids = {await capacity.run(workers.ready) for _ in range(8)}
    assert os.getpid() not in pids and 1 <= len(pids) <= capacity.processes


@pytest.mark.asyncio(loop_scope="module")
async def test_reviews_beyond_the_workers_wait_their_turn_and_are_all_answered(
    capacity: AdmissionCapacity,
) -> None:
    spec = yaml.safe_load(WORKLOAD_FILES[0].read_text())["spec"]
    here = verdict.review(spec, namespace="team", policy=OPEN, catalog=DEFAULT_CATALOG)
    answers = await asyncio.gather(
        *(
            capacity.run(workers.review, spec, namespace="team", policy=OPEN, catalog=CATALOG)
            for _ in range(5 * capacity.processes)
        )
    )
    assert answers == [here] * (5 * capacity.processes)
    assert capacity.pending == 0


@pytest.mark.asyncio(loop_scope="module")
async def test_a_worker_that_dies_fails_its_review_with_a_retry_and_is_replaced(
    capacity: AdmissionCapacity, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    held = asyncio.create_task(capacity.run(slow_verdict.hold, str(started)))
    while not started.exists() or not started.read_text():
        await asyncio.sleep(0.01)
    dead = int(started.read_text())
    os.kill(dead, signal.SIGKILL)  # as the kernel's OOM killer does
    with pytest.raises(Overloaded) as err:
        await held
    assert (err.value.status, err.value.reason) == (503, "WorkerLost")
    assert str(err.value) == "webhook worker process ended during the review; retry shortly"
    # The next verdict starts a new pool and is answered.
    assert await capacity.run(workers.ready) not in (dead, os.getpid())
    assert capacity.pending == 0


@pytest.mark.asyncio(loop_scope="module")
async def test_a_verdict_not_ready_in_the_reviews_time_is_a_503_and_a_queued_one_never_runs(
    capacity: AdmissionCapacity, tmp_path: Path
) -> None:
    """The backlog rule sheds by the workers' recent pace, which says nothing of a spec that
    takes seconds; an answer after the API server's timeout reaches no one. Within a review's
    slot, a verdict not ready by half its timeout is answered 503, and one that no worker took
    yet is dropped, not computed for nobody."""
    spec = yaml.safe_load(WORKLOAD_FILES[0].read_text())["spec"]
    gate = tmp_path / "gate"
    args = {"namespace": "team", "policy": OPEN, "catalog": CATALOG}
    held = [
        asyncio.create_task(
            capacity.run(slow_verdict.review_when, str(gate), str(tmp_path / f"s{i}"), spec, **args)
        )
        for i in range(capacity.processes)
    ]
    try:
        while not all((tmp_path / f"s{i}").exists() for i in range(capacity.processes)):
            await asyncio.sleep(0.01)  # every worker holds a verdict until the gate opens
        dropped = tmp_path / "dropped"
        async with capacity.slot(timeout=0.2):
            with pytest.raises(Overloaded) as err:
                await capacity.run(slow_verdict.review_when, str(gate), str(dropped), spec, **args)
        assert (err.value.status, err.value.reason) == (503, "QueueTimeout")
        assert "not ready within 0.1 s of the request's 0.2 s timeout" in str(err.value)
    finally:
        gate.touch()
    answers = await asyncio.gather(*held)  # the held verdicts are answered once released
    assert all(a == answers[0] for a in answers)
    # Work queued behind the dropped task is answered, and the dropped one never ran.
    await asyncio.gather(*(capacity.run(workers.ready) for _ in range(2 * capacity.processes)))
    assert not dropped.exists()
    assert capacity.pending == 0


@pytest.mark.asyncio(loop_scope="module")
async def test_a_workers_log_records_reach_the_operators_loggers(
    capacity: AdmissionCapacity, caplog: pytest.LogCaptureFixture
) -> None:
    name = "gpu_sizer.admission.verdict"
    with caplog.at_level(logging.INFO, logger=name):
        await capacity.run(logging.getLogger(name).error, "from pid %s", "a worker")

        async def relayed() -> None:
            while not any(r.getMessage() == "from pid a worker" for r in caplog.records):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(relayed(), 60)
    record = next(r for r in caplog.records if r.getMessage() == "from pid a worker")
    assert (record.name, record.levelno) == (name, logging.ERROR)
    assert record.process != os.getpid()


def test_a_shipped_value_is_unpickled_once_per_process() -> None:
    first = Shipped.of(tuple(DEFAULT_CATALOG))
    again = Shipped.of(tuple(DEFAULT_CATALOG))
    assert first.digest == again.digest
    assert first.value() is again.value()
    assert list(first.value()) == list(DEFAULT_CATALOG)
    assert Shipped.of(tuple(DEFAULT_CATALOG[:3])).digest != first.digest


def test_a_capacity_without_processes_needs_none() -> None:
    with pytest.raises(ValueError):
        AdmissionCapacity(processes=-1)
    with pytest.raises(ValueError):
        workers.WorkerPool(0)


@pytest.mark.asyncio(loop_scope="module")
async def test_an_exception_that_cannot_come_back_is_reported_and_the_pool_stays(
    capacity: AdmissionCapacity,
) -> None:
    """An exception whose class cannot be unpickled would otherwise break the pool: every review
    in it failed as "terminated abruptly" and the real error was logged nowhere."""
    before = capacity._pool
    with pytest.raises(workers.WorkerError) as err:
        await capacity.run(slow_verdict.fail_unpicklably)
    assert str(err.value) == "TwoArguments: verdict: a bug"
    assert "raise TwoArguments" in str(err.value.__cause__)  # the worker's traceback
    assert capacity._pool is before
    assert await capacity.run(workers.ready) != os.getpid()


def test_closing_a_pool_never_waits_for_its_log_relay() -> None:
    """A worker killed while it wrote a log record leaves the queue's write lock taken for good:
    closing its pool (on the event loop, when the pool is replaced) must not wait on it."""
    pool = workers.WorkerPool(1)
    pool.start()
    lock = pool._records._wlock  # the lock a worker would have held when it was killed
    lock.acquire()
    try:
        closing = threading.Thread(target=pool.close)
        closing.start()
        closing.join(60)
        assert not closing.is_alive(), "close() waited on the log relay"
    finally:
        lock.release()


def test_overloaded_survives_the_way_back() -> None:
    shed = Overloaded(503, "WorkerLost", "gone; retry shortly")
    back = pickle.loads(pickle.dumps(shed))
    assert (back.status, back.reason, str(back)) == (503, "WorkerLost", "gone; retry shortly")
