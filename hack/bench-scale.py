#!/usr/bin/env python3
"""Scale benchmark: gpu-sizer's operator beside a floor operator, on the loopback API.

For each count, on a fresh loopback API each (kmock's emulator with the CRD and two GPU nodes):

1. **floor**: bare kopf with one ``on.create`` handler patching a constant status
   (``hack/floor_operator.py``); done when every workload has that status;
2. **gpu-sizer**: ``gpu-sizer operator -A --standalone`` (Kubernetes Job backend, no webhook);
   done when every workload has ``Estimated=True``;
3. **restart** (gpu-sizer, unless ``--no-restart``): SIGTERM, start again over the settled
   workloads, done when the operator logs that every workload known at its start was decided;
   counts the status writes and Jobs it made meanwhile (target: none).

Workloads are Llama-3-8B-shaped inference specs (varying ``maxModelLen``/``maxNumSeqs``, 10
namespaces), created with ``--concurrency`` POSTs in flight. Each phase prints: wall time from the
first create until done, objects/s, the operator's CPU seconds per object (utime + stime from
/proc/PID/stat, from the first create until done), its peak RSS (VmHWM), and gpu-sizer's ratios
to the floor. Stopping: SIGTERM, 30 s grace, then SIGKILL (reported, figures still printed).
The floor and gpu-sizer alternate per count, so machine load affects both alike.

Environment (read at start):

- ``BENCH_MEASUREMENT_MODE``: ``spec.measurement.mode`` of every workload, ``Synthetic``
  (default: each workload also gets its measurement Job) or ``Disabled`` (no Jobs);
- ``BENCH_MAX_CONCURRENT_MEASUREMENTS``: gpu-sizer's ``--max-concurrent-measurements`` (the cap
  on measurement Jobs running at once; default: the operator's own default, 4), so that with
  ``Synthetic`` the other workloads wait in its queue;
- ``BENCH_MEASUREMENT_SHARING``: gpu-sizer's ``--measurement-sharing`` (default ``Disabled``:
  every workload measures in its own Job, as before shared records; ``Enabled`` lets the
  workloads of one measurement key share one Job and one GPUMeasurement);
- ``BENCH_COUNTS``: the counts, comma-separated (default ``1000``; ``--counts`` wins);
- ``BENCH_OPERATOR_LOG``: directory for the operators' logs (default: a temporary directory);
- ``BENCH_PROFILE``: a directory; gpu-sizer then runs under cProfile and writes
  ``gpu-sizer-COUNT.prof`` and ``restart-COUNT.prof`` there (slower: compare shares, not times).

``--settle`` (issue 15) also plays the kubelet and Job controller in the gpu-sizer phase: every
measurement Job the operator starts gets a pod that succeeds with a GPU result and the Job's
Complete condition, until every workload is Ready; it reports the time until all are Ready, the
Jobs created (one per workload) and the most unfinished at once (never above the cap).

Usage: PYTHONPATH=operator python hack/bench-scale.py [--counts 1000,10000] [--concurrency 20]
       [--no-floor] [--no-restart] [--timeout 1800] [--settle]
       [--max-concurrent-measurements N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))  # tests.architectures: the shared config.json figures

import kmock  # noqa: E402
from gpu_sizer_testbed.emulator import LoopbackCluster, crd_document  # noqa: E402
from tests.architectures import LLAMA_3_8B  # noqa: E402
from tests.e2e.conftest import Kubelet  # noqa: E402
from tests.e2e.probe_results import GIB, gpu_success  # noqa: E402

GW = ("gpusizer.dev", "v1alpha1", "gpuworkloads")
MODES = ("Synthetic", "Disabled")
TICK = os.sysconf("SC_CLK_TCK")
STOP_GRACE = 30.0
#: Node name and NVML total bytes per GPU class label of a measurement Job (--settle).
NODES = {"nvidia-l4": ("l4", 23034 << 20), "nvidia-a100-80gb": ("a100", 81920 << 20)}


def spec(i: int, mode: str) -> dict[str, Any]:
    return {
        "model": {"name": f"bench/model-{i}", "dtype": "bfloat16", "architecture": LLAMA_3_8B},
        "inference": {
            "engine": "vllm",
            "maxModelLen": 1024 + (i % 7) * 512,
            "maxNumSeqs": 1 + i % 16,
        },
        "measurement": {"mode": mode},
    }


def rss_peak(pid: int) -> int:
    """Peak resident set of ``pid`` in bytes (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def count_done(cluster: LoopbackCluster, done: Callable[[dict[str, Any]], bool]) -> int:
    n = 0
    for (resource, _ns, _name), obj in list(cluster.emulator.objects.items()):
        if getattr(resource, "plural", None) == "gpuworkloads" and not obj.deleted:
            n += done(obj.get("status") or {})
    return n


def estimated(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Estimated" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def floor_done(status: dict[str, Any]) -> bool:
    return status.get("phase") == "Floor"


def writes(cluster: LoopbackCluster) -> tuple[int, int]:
    """Status PATCHes of workloads, and Job POSTs, served so far."""
    status = jobs = 0
    for r in cluster.emulator:
        plural = getattr(getattr(r, "resource", None), "plural", None)
        if plural == "gpuworkloads" and r.action == kmock.action.UPDATE and r.subresource:
            status += 1
        elif plural == "jobs" and r.action == kmock.action.CREATE:
            jobs += 1
    return status, jobs


def _stored(cluster: LoopbackCluster, plural: str) -> list[Any]:
    return [
        obj
        for (resource, _ns, _name), obj in list(cluster.emulator.objects.items())
        if getattr(resource, "plural", None) == plural and not obj.deleted
    ]


def _finished(job: Any) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def ready(status: dict[str, Any]) -> bool:
    return status.get("phase") == "Ready"


class Settler:
    """The kubelet and Job controller for measurement Jobs: each unfinished Job succeeds."""

    def __init__(self, cluster: LoopbackCluster) -> None:
        self.kubelet = Kubelet(cluster)
        self.cluster = cluster
        self.done: set[str] = set()
        self.created: set[str] = set()
        self.peak_live = 0

    async def step(self) -> None:
        jobs = [_plain(j) for j in _stored(self.cluster, "jobs")]
        live = [j for j in jobs if not _finished(j)]
        self.created |= {j["metadata"]["uid"] for j in jobs}
        self.peak_live = max(self.peak_live, len(live))
        for job in live:
            uid = job["metadata"]["uid"]
            if uid in self.done:
                continue
            self.done.add(uid)
            cls = job["metadata"]["labels"].get("gpusizer.dev/gpu-class", "nvidia-a100-80gb")
            node, total = NODES.get(cls, NODES["nvidia-a100-80gb"])
            await self.kubelet.succeed(
                job, gpu_success(min(18, total // GIB // 2) * GIB, total=total), node=node
            )


@dataclass
class Run:
    what: str
    count: int
    seconds: float = 0.0
    done: int = 0
    cpu: float = 0.0
    rss: int = 0
    note: str = ""

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / self.count if self.count else 0.0


class Operator:
    """An operator process with its log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, argv: list[str], cluster: LoopbackCluster, log: Path) -> None:
        env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, PYTHONPATH=str(ROOT / "operator"))
        self.log = log
        self._fh = log.open("ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._fh, stderr=subprocess.STDOUT)

    def stop(self) -> str:
        """Stop it; a note when it needed SIGKILL."""
        note = ""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                note = f"did not stop within {STOP_GRACE:.0f} s of SIGTERM (killed)"
        self._fh.close()
        return note


def gpu_sizer_argv(phase: str, count: int) -> list[str]:
    profile = os.environ.get("BENCH_PROFILE")
    prefix: list[str] = []
    if profile:
        Path(profile).mkdir(parents=True, exist_ok=True)
        prefix = ["-m", "cProfile", "-o", str(Path(profile) / f"{phase}-{count}.prof")]
    limit = os.environ.get("BENCH_MAX_CONCURRENT_MEASUREMENTS")
    cap = ["--max-concurrent-measurements", limit] if limit else []
    # Shared measurement records would let workloads of the same key reuse one measurement;
    # off by default here so that figures stay comparable with runs from before records.
    sharing = ["--measurement-sharing", os.environ.get("BENCH_MEASUREMENT_SHARING", "Disabled")]
    return [
        sys.executable,
        *prefix,
        "-m",
        "gpu_sizer.cli",
        "operator",
        "-A",
        "--standalone",
        "--no-webhook",
        "--metrics-port",
        "0",
        "--health-port",
        "0",
        *cap,
        *sharing,
    ]


def floor_argv() -> list[str]:
    floor = str(ROOT / "hack" / "floor_operator.py")
    return [sys.executable, "-m", "kopf", "run", "-A", "--standalone", floor]


async def new_cluster() -> LoopbackCluster:
    cluster = LoopbackCluster()
    await cluster.__aenter__()
    await cluster.create(
        ("apiextensions.k8s.io", "v1", "customresourcedefinitions"), crd_document()
    )
    for name, product, mib in (
        ("l4", "NVIDIA-L4", 23034),
        ("a100", "NVIDIA-A100-SXM4-80GB", 81920),
    ):
        await cluster.create(
            ("", "v1", "nodes"),
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        "nvidia.com/gpu.product": product,
                        "nvidia.com/gpu.memory": str(mib),
                        "nvidia.com/gpu.count": "8",
                    },
                },
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            },
        )
    return cluster


def watching(cluster: LoopbackCluster) -> bool:
    return any(
        r.action == kmock.action.WATCH
        and getattr(getattr(r, "resource", None), "plural", None) == "gpuworkloads"
        for r in cluster.emulator
    )


async def wait_started(op: Operator, cluster: LoopbackCluster, timeout: float = 120) -> None:
    """Until the operator watches GPUWorkloads."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watching(cluster):
            return
        if op.proc.poll() is not None:
            raise RuntimeError(f"operator exited ({op.proc.returncode}); see {op.log}")
        await asyncio.sleep(0.25)
    raise RuntimeError(f"operator not up after {timeout:.0f} s; see {op.log}")


async def create_all(cluster: LoopbackCluster, count: int, mode: str, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def create(i: int) -> None:
        async with sem:
            await cluster.create(
                GW,
                {
                    "apiVersion": "gpusizer.dev/v1alpha1",
                    "kind": "GPUWorkload",
                    "metadata": {"name": f"w{i:05d}", "namespace": f"ns{i % 10}"},
                    "spec": spec(i, mode),
                },
            )

    await asyncio.gather(*(create(i) for i in range(count)))


async def until(cluster: LoopbackCluster, count: int, done: Callable[..., bool], t: float) -> int:
    deadline = time.monotonic() + t
    n = 0
    while time.monotonic() < deadline:
        n = count_done(cluster, done)
        if n >= count:
            break
        await asyncio.sleep(0.5)
    return n


async def measure(
    what: str, count: int, args: argparse.Namespace, mode: str, logs: Path
) -> list[Run]:
    """One operator over ``count`` new workloads (and, for gpu-sizer, the restart)."""
    cluster = await new_cluster()
    runs: list[Run] = []
    op: Operator | None = None
    creating: asyncio.Task[None] | None = None
    try:
        floor = what == "floor"
        log = logs / f"{what}-{count}.log"
        argv = floor_argv() if floor else gpu_sizer_argv(what, count)
        op = Operator(argv, cluster, log)
        await wait_started(op, cluster)
        await asyncio.sleep(1.0)  # the watches are open
        run = Run(what, count)
        cpu0 = cpu_seconds(op.proc.pid)
        t0 = time.monotonic()
        creating = asyncio.create_task(create_all(cluster, count, mode, args.concurrency))
        run.done = await until(cluster, count, floor_done if floor else estimated, args.timeout)
        await creating
        run.seconds = time.monotonic() - t0
        if args.settle and not floor:
            settler = Settler(cluster)
            settled = 0
            while time.monotonic() - t0 < args.timeout and settled < count:
                await settler.step()
                settled = count_done(cluster, ready)
                await asyncio.sleep(0.25)
            run.note = (
                f"Ready {settled}/{count} after {time.monotonic() - t0:.1f} s; "
                f"{len(settler.created)} Jobs created, at most {settler.peak_live} unfinished"
            )
        run.cpu = cpu_seconds(op.proc.pid) - cpu0
        run.rss = rss_peak(op.proc.pid)
        stopped = op.stop()
        run.note = "; ".join(n for n in (run.note, stopped) if n)
        runs.append(run)
        if floor or args.no_restart:
            return runs
        await asyncio.sleep(2.0)  # the last writes' events are back; the population is settled
        status0, jobs0 = writes(cluster)
        op = Operator(gpu_sizer_argv("restart", count), cluster, log)
        offset = log.stat().st_size
        restart = Run("restart", count)
        t0 = time.monotonic()
        deadline = t0 + args.timeout
        resumed = None
        while time.monotonic() < deadline and op.proc.poll() is None:
            tail = log.read_bytes()[offset:].decode(errors="replace")
            resumed = re.search(r"resumed: .*, (\d+) status writes", tail)
            if resumed:
                break
            restart.cpu = cpu_seconds(op.proc.pid)
            await asyncio.sleep(0.25)
        restart.seconds = time.monotonic() - t0
        restart.done = count if resumed else 0
        restart.cpu = cpu_seconds(op.proc.pid) if op.proc.poll() is None else restart.cpu
        restart.rss = rss_peak(op.proc.pid) if op.proc.poll() is None else 0
        await asyncio.sleep(1.0)  # anything it still writes would show now
        status1, jobs1 = writes(cluster)
        restart.note = f"{status1 - status0} status writes, {jobs1 - jobs0} Jobs created" + (
            "" if resumed else "; never logged its resume"
        )
        stop_note = op.stop()
        if stop_note:
            restart.note += "; " + stop_note
        op = None
        runs.append(restart)
        return runs
    finally:
        if creating is not None and not creating.done():
            creating.cancel()  # interrupted: no POSTs left in flight on a closing session
            with contextlib.suppress(BaseException):
                await creating
        if op is not None:
            op.stop()
        await cluster.__aexit__(None, None, None)


def print_table(runs: list[Run], mode: str) -> None:
    floors = {r.count: r for r in runs if r.what == "floor"}
    print(f"\nmeasurement mode {mode}; CPU per object from the first create until done")
    print(
        f"{'operator':<10} {'workloads':>9} {'done':>6} {'time s':>8} {'obj/s':>7} "
        f"{'CPU ms/obj':>10} {'peak RSS MiB':>12} {'obj/s vs floor':>14} {'CPU vs floor':>12}  note"
    )
    for r in runs:
        floor = floors.get(r.count)
        ratio_rate = ratio_cpu = ""
        if floor is not None and r.what == "gpu-sizer" and floor.rate and floor.cpu_ms:
            ratio_rate = f"{r.rate / floor.rate:.2f}"
            ratio_cpu = f"{r.cpu_ms / floor.cpu_ms:.2f}"
        print(
            f"{r.what:<10} {r.count:>9} {r.done:>6} {r.seconds:>8.1f} {r.rate:>7.1f} "
            f"{r.cpu_ms:>10.2f} {r.rss / 2**20:>12.0f} {ratio_rate:>14} {ratio_cpu:>12}  {r.note}",
            flush=True,
        )


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default=os.environ.get("BENCH_COUNTS", "1000"))
    ap.add_argument("--concurrency", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per phase")
    ap.add_argument("--no-floor", action="store_true", help="gpu-sizer only")
    ap.add_argument("--no-restart", action="store_true", help="skip the restart phase")
    ap.add_argument("--settle", action="store_true", help="play the kubelet until all are Ready")
    ap.add_argument(
        "--max-concurrent-measurements",
        type=int,
        default=None,
        help="gpu-sizer's cap (default: BENCH_MAX_CONCURRENT_MEASUREMENTS, else its own, 4)",
    )
    args = ap.parse_args()
    if args.max_concurrent_measurements is not None:
        os.environ["BENCH_MAX_CONCURRENT_MEASUREMENTS"] = str(args.max_concurrent_measurements)
    mode = os.environ.get("BENCH_MEASUREMENT_MODE", "Synthetic")
    if mode not in MODES:
        ap.error(f"BENCH_MEASUREMENT_MODE={mode!r}: use one of {', '.join(MODES)}")
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    limit = os.environ.get("BENCH_MAX_CONCURRENT_MEASUREMENTS")
    label = f"{mode}, measurement cap {limit or 'the default'}" if mode == "Synthetic" else mode
    logs = Path(os.environ.get("BENCH_OPERATOR_LOG") or tempfile.mkdtemp(prefix="bench-scale-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(f"operator logs in {logs}", flush=True)
    runs: list[Run] = []
    ok = True
    try:
        for count in counts:
            for what in ("floor", "gpu-sizer"):
                if what == "floor" and args.no_floor:
                    continue
                new = await measure(what, count, args, mode, logs)
                runs.extend(new)
                ok &= all(r.done >= r.count for r in new)
                print_table(new, label)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted; figures so far:", flush=True)
        ok = False
    if runs:
        print("\nall runs:")
        print_table(runs, label)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
