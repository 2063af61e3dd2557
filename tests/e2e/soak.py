"""The soak of issue 13: workloads of every kind, API faults, SIGKILLs, then the invariants.

:func:`soak` creates ``per_kind`` GPUWorkloads of each kind in :data:`KINDS`, plays the kubelet
for their measurement Jobs, injects API faults into the operator's requests only (500 and 409 on
status writes, 500 on creates, HTTP 410 on watch requests and in watch streams, delayed watch
events; ``tests/e2e/faults.py``), changes specs A -> B -> A while it runs, and SIGKILLs the
operator ``kills`` times (restarting it at once, as a Deployment does; an operator that exits
by itself, after a 410 on a watch request, is restarted too). Then the faults stop and it waits
until everything has settled and checks:

- every workload has a status for its current generation, in the phase its kind ends in;
- at most one unfinished Job per workload, the one its status names; no Job of a workload that
  does not exist (orphans); no Job name created again after it was deleted (outside A -> B -> A);
- no fake transitions: in every stored version of every status, a condition whose status did not
  change kept its ``lastTransitionTime``;
- a restart over the settled workloads writes no status at all.

Run in a short form by ``tests/e2e/test_soak.py``; at full size by ``hack/soak.py``, which
prints the figures (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kmock
from gpu_sizer_testbed.emulator import ApiStatus, LoopbackCluster

from tests.e2e.conftest import (
    GW,
    NS,
    SCHEDULING_GRACE,
    Kubelet,
    OperatorProcess,
    spec,
    workload,
)
from tests.e2e.faults import Faults
from tests.e2e.probe_results import GIB, gpu_oom, gpu_success

__all__ = ["KINDS", "SoakReport", "soak"]

ANNOTATION = "gpusizer.dev/workload-name"
CLASS_LABEL = "gpusizer.dev/gpu-class"
L4_TOTAL = 23034 << 20


def _broken() -> dict[str, Any]:
    body = spec()
    body["model"]["dtype"] = "float7"  # stored without the webhook: never valid
    return body


#: kind -> (spec, the phase it ends in; None: any phase). The kubelet plays each kind's Jobs:
#: ``fits`` and ``changed`` succeed, ``oom`` runs out of CUDA memory on the L4 and succeeds on
#: the A100, ``nowhere`` waits for a node of a class the cluster lacks.
KINDS: dict[str, tuple[Callable[[], dict[str, Any]], str | None]] = {
    "fits": (spec, "Ready"),
    "oom": (spec, "Ready"),
    "changed": (spec, "Ready"),
    "nowhere": (lambda: spec(placement={"gpuClasses": ["nvidia-h100-80gb"]}), "Estimated"),
    "disabled": (lambda: spec(measurement={"mode": "Disabled"}), "Ready"),
    "huge": (lambda: spec(params=10**13), None),
    "broken": (_broken, None),
}


@dataclass
class SoakReport:
    workloads: int = 0
    kills: int = 0
    exits: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    faulty_seconds: float = 0.0
    settle_seconds: float = 0.0
    status_writes: int = 0
    jobs_created: int = 0
    restart_status_writes: int = -1
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        faults = ", ".join(f"{k}: {v}" for k, v in sorted(self.injected.items()))
        return [
            f"workloads:             {self.workloads} ({len(KINDS)} kinds)",
            f"SIGKILLs / self-exits: {self.kills} / {self.exits}",
            f"faults injected:       {sum(self.injected.values())} ({faults})",
            f"time under faults:     {self.faulty_seconds:.1f} s",
            f"settled after faults:  {self.settle_seconds:.1f} s",
            f"status writes landed:  {self.status_writes}",
            f"Jobs created:          {self.jobs_created}",
            f"status writes on the restart over the settled workloads: "
            f"{self.restart_status_writes}",
            f"problems:              {len(self.problems)}",
            *(f"  - {p}" for p in self.problems[:40]),
        ]


def _kind(name: str) -> str:
    return name.split("-", 1)[0]


def _finished(job: dict[str, Any]) -> bool:
    conds = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") in ("Complete", "Failed") for c in conds)


def _ago(seconds: float) -> str:
    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Kubelet:
    """Ends each new measurement Job once, as the Job's kind says (see :data:`KINDS`)."""

    def __init__(self, kubelet: Kubelet) -> None:
        self.kubelet = kubelet
        self.handled: set[str] = set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(ApiStatus):  # a Job deleted meanwhile: next round
                await self.step()
            await asyncio.sleep(0.2)

    async def step(self) -> None:
        for job in await self.kubelet.jobs():
            meta = job["metadata"]
            uid = meta.get("uid") or ""
            if uid in self.handled or _finished(job):
                continue
            kind = _kind((meta.get("annotations") or {}).get(ANNOTATION, ""))
            on_l4 = (meta.get("labels") or {}).get(CLASS_LABEL) == "nvidia-l4"
            if kind == "nowhere":
                await self.kubelet.unschedulable(job, _ago(5))
            elif kind == "oom" and on_l4:
                await self.kubelet.succeed(job, gpu_oom(), node="l4-1")
            elif on_l4:
                await self.kubelet.succeed(job, gpu_success(9 * GIB, total=L4_TOTAL), node="l4-1")
            else:
                await self.kubelet.succeed(job, gpu_success(30 * GIB), node="a100-1")
            # Handled once it ended: a refused or interrupted call (the API busy, the Job
            # recreated meanwhile) is tried again on the next round, as a kubelet retries.
            self.handled.add(uid)


def _requests(cluster: LoopbackCluster, plural: str, action: Any, sub: str | None) -> int:
    return sum(
        1
        for r in cluster.emulator
        if getattr(getattr(r, "resource", None), "plural", None) == plural
        and r.action == action
        and r.subresource == sub
    )


def _versions(cluster: LoopbackCluster, plural: str) -> dict[tuple[Any, Any], list[Any]]:
    out = {}
    for (resource, ns, name), obj in list(cluster.emulator.objects.items()):
        if getattr(resource, "plural", None) == plural:
            out[(ns, name)] = list(obj.history)
    return out


def _status_writes(cluster: LoopbackCluster) -> int:
    """Stored versions of workloads whose status differs from the version before."""
    writes = 0
    for history in _versions(cluster, "gpuworkloads").values():
        before: Any = None
        for version in history:
            status = None if version is None else version.get("status")
            if status is not None and status != before:
                writes += 1
            before = status
    return writes


async def soak(
    cluster: LoopbackCluster,
    start: Callable[..., OperatorProcess],
    *,
    per_kind: int,
    kills: int,
    faults: Faults,
    seed: int = 0,
    settle_timeout: float = 300.0,
    log: Callable[[str], None] = lambda _: None,
) -> SoakReport:
    """Run the soak; the report's ``problems`` lists every invariant found broken."""
    rnd = random.Random(seed)
    report = SoakReport()
    names = [f"{kind}-{i:03d}" for kind in KINDS for i in range(per_kind)]
    rnd.shuffle(names)
    report.workloads = len(names)
    for name in names:
        await cluster.create(GW, workload(name, KINDS[_kind(name)][0]()))
    cluster.emulator.faults = faults
    player = _Kubelet(Kubelet(cluster))
    playing = asyncio.create_task(player.run())
    op = start("-v", *SCHEDULING_GRACE)
    began = time.monotonic()
    changed = [n for n in names if _kind(n) == "changed"]
    try:
        for round_ in range(kills):
            # Kill mid-way through its work: after some more status writes (each attempt
            # counts, also those the faults refuse), at a random moment.
            target = _requests(cluster, "gpuworkloads", kmock.action.UPDATE, "status") + max(
                3, len(names) // (kills + 1)
            )
            deadline = time.monotonic() + 120
            while (
                _requests(cluster, "gpuworkloads", kmock.action.UPDATE, "status") < target
                and time.monotonic() < deadline
            ):
                if op.proc.poll() is not None:
                    report.exits += 1
                    op = start("-v", *SCHEDULING_GRACE)
                await asyncio.sleep(0.2)
            await asyncio.sleep(rnd.uniform(0.0, 1.0))
            op.kill()
            report.kills += 1
            log(f"kill {report.kills}")
            # Spec changes while it is down: A -> B, then back to A (B -> A) a round later.
            seqs = 8 if round_ % 2 == 0 else 4
            for name in changed:
                await cluster.change_spec(GW, NS, name, {"inference": {"maxNumSeqs": seqs}})
            op = start("-v", *SCHEDULING_GRACE)
        report.faulty_seconds = time.monotonic() - began
        faults.enabled = False
        report.injected = Counter(faults.injected)
        log(f"faults off after {report.faulty_seconds:.1f} s: {dict(report.injected)}")
        settled_at = time.monotonic()
        deadline = settled_at + settle_timeout
        problems = await _unsettled(cluster, names)
        while problems and time.monotonic() < deadline:
            if op.proc.poll() is not None:
                report.exits += 1
                op = start("-v", *SCHEDULING_GRACE)
            await asyncio.sleep(0.5)
            problems = await _unsettled(cluster, names)
        report.settle_seconds = time.monotonic() - settled_at
        report.problems.extend(problems)
        if not problems:
            report.problems.extend(_history_problems(cluster))
            report.status_writes = _status_writes(cluster)
            report.jobs_created = sum(
                1
                for history in _versions(cluster, "jobs").values()
                for a, b in zip([None, *history], history, strict=False)
                if a is None and b is not None
            )
            report.restart_status_writes = await _restart_writes(cluster, start, op, names)
            if report.restart_status_writes:
                report.problems.append(
                    f"{report.restart_status_writes} status writes on a restart over settled "
                    "workloads"
                )
            op = None  # type: ignore[assignment]
    finally:
        playing.cancel()
        if op is not None:
            op.stop()
    return report


async def _unsettled(cluster: LoopbackCluster, names: list[str]) -> list[str]:
    """What is not (yet) as it must end: one line per workload or Job."""
    problems: list[str] = []
    objs = {o["metadata"]["name"]: o for o in await cluster.list(GW, NS)}
    jobs = await Kubelet(cluster).jobs()
    for name in names:
        obj = objs.get(name)
        st = (obj or {}).get("status") or {}
        if not st.get("phase"):
            problems.append(f"{name}: no status")
            continue
        if st.get("observedGeneration") != obj["metadata"]["generation"]:  # type: ignore[index]
            problems.append(f"{name}: status of generation {st.get('observedGeneration')}")
            continue
        wanted = KINDS[_kind(name)][1]
        if wanted is not None and st["phase"] != wanted:
            problems.append(f"{name}: {st['phase']}, not {wanted}")
        named = (st.get("measurement") or {}).get("jobName")
        live = [
            j["metadata"]["name"]
            for j in jobs
            if (j["metadata"].get("annotations") or {}).get(ANNOTATION) == name and not _finished(j)
        ]
        if len(live) > 1 or (live and live != [named]):
            problems.append(f"{name}: unfinished Jobs {live}, status names {named}")
    for job in jobs:
        meta = job["metadata"]
        owner = (meta.get("annotations") or {}).get(ANNOTATION)
        uids = {r.get("uid") for r in meta.get("ownerReferences") or []}
        obj = objs.get(owner or "")
        if obj is None or obj["metadata"]["uid"] not in uids:
            problems.append(f"Job {meta['name']}: orphaned (owner {owner} is gone)")
    return problems


def _history_problems(cluster: LoopbackCluster) -> list[str]:
    """Fake transitions in any stored status; Job names created again after a deletion."""
    problems = []
    for (_, name), history in _versions(cluster, "gpuworkloads").items():
        before: dict[str, Any] = {}
        for version in history:
            if version is None:
                before = {}
                continue
            conds = {c["type"]: c for c in (version.get("status") or {}).get("conditions") or []}
            for type_, c in conds.items():
                old = before.get(type_)
                if (
                    old is not None
                    and old.get("status") == c.get("status")
                    and old.get("lastTransitionTime") != c.get("lastTransitionTime")
                ):
                    problems.append(
                        f"{name}: {type_} moved its lastTransitionTime without changing "
                        f"({old.get('lastTransitionTime')} -> {c.get('lastTransitionTime')})"
                    )
            before = conds or before
    for (_, job), history in _versions(cluster, "jobs").items():
        created = sum(1 for a, b in zip([None, *history], history, strict=False) if a is None and b)
        first = next((v for v in history if v is not None), None) or {}
        owner = ((first.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION, "")
        if created > 1 and _kind(owner) != "changed":
            problems.append(f"Job {job} of {owner} created {created} times")
    return problems


async def _restart_writes(
    cluster: LoopbackCluster,
    start: Callable[..., OperatorProcess],
    op: OperatorProcess,
    names: list[str],
) -> int:
    """Stop the operator, start it again over the settled workloads, wait until it has decided
    every one of them; the status writes it made meanwhile."""
    op.stop()
    offset = op.log.stat().st_size
    before = _requests(cluster, "gpuworkloads", kmock.action.UPDATE, "status")
    again = start("-v", *SCHEDULING_GRACE)

    def decided() -> set[str]:
        text = again.log.read_bytes()[offset:].decode(errors="replace")
        return {
            line.split(f"{NS}/", 1)[1].split(":", 1)[0]
            for line in text.splitlines()
            if ": decided:" in line and f"{NS}/" in line
        }

    deadline = time.monotonic() + 300
    while set(names) - decided() and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    missing = set(names) - decided()
    writes = _requests(cluster, "gpuworkloads", kmock.action.UPDATE, "status") - before
    again.stop()
    if missing:
        raise AssertionError(f"not decided after the restart: {sorted(missing)[:10]}")
    return writes
