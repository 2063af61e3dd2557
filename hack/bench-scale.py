#!/usr/bin/env python3
"""Scale benchmark: 1,000 GPUWorkloads against the loopback API, the real operator process.

Starts kmock's emulator on 127.0.0.1 with the CRD and GPU nodes, starts ``gpu-sizer operator``
(Kubernetes Job backend, so each workload also gets its measurement Job), creates N GPUWorkloads
as fast as the API takes them, and prints: time until every one has the Estimated=True condition
(from the first create), objects per second, and the operator's peak RSS (VmHWM from
/proc/PID/status, bytes shown in MiB). Targets (issue 3): 1,000 within 60 s, RSS under 250 MiB.

``--settle`` (issue 15) also plays the kubelet and Job controller: every measurement Job the
operator starts gets a pod that succeeds with a GPU result and the Job's Complete condition, until
every workload is Ready; the operator runs with ``--max-concurrent-measurements`` (default 4).
It prints the time until all are Ready, the most measurement Jobs seen unfinished at once (must
not exceed the cap), the Jobs created (one per workload) and the peak RSS (target 250 MiB).

Usage: PYTHONPATH=operator python hack/bench-scale.py [--count 1000] [--concurrency 20]
       [--settle [--max-concurrent-measurements 4]]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))  # tests.architectures: the shared config.json figures

from tests.architectures import LLAMA_3_8B  # noqa: E402
from tests.e2e.conftest import Kubelet  # noqa: E402
from tests.e2e.probe_results import GIB, gpu_success  # noqa: E402

from gpu_sizer.controller.emulator import LoopbackCluster, crd_document  # noqa: E402

GW = ("gpusizer.dev", "v1alpha1", "gpuworkloads")
#: Node name and NVML total bytes per GPU class label of a measurement Job.
NODES = {"nvidia-l4": ("l4", 23034 << 20), "nvidia-a100-80gb": ("a100", 81920 << 20)}


def spec(i: int) -> dict:
    return {
        "model": {
            "name": f"bench/model-{i}",
            "dtype": "bfloat16",
            "architecture": LLAMA_3_8B,
        },
        "inference": {
            "engine": "vllm",
            "maxModelLen": 1024 + (i % 7) * 512,
            "maxNumSeqs": 1 + i % 16,
        },
    }


def rss_peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _stored(cluster: LoopbackCluster, plural: str) -> list:
    return [
        obj
        for (resource, _ns, _name), obj in list(cluster.emulator.objects.items())
        if getattr(resource, "plural", None) == plural and not obj.deleted
    ]


def _finished(job) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def ready(cluster: LoopbackCluster) -> int:
    return sum(
        (obj.get("status") or {}).get("phase") == "Ready"
        for obj in _stored(cluster, "gpuworkloads")
    )


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


def _plain(value):
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def estimated(cluster: LoopbackCluster) -> int:
    done = 0
    for (resource, _ns, _name), obj in list(cluster.emulator.objects.items()):
        if getattr(resource, "plural", None) != "gpuworkloads" or obj.deleted:
            continue
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") == "Estimated" and c.get("status") == "True":
                done += 1
                break
    return done


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--settle", action="store_true", help="play the kubelet until all are Ready")
    ap.add_argument("--max-concurrent-measurements", type=int, default=4)
    args = ap.parse_args()
    async with LoopbackCluster() as cluster:
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
        env = dict(os.environ, KUBECONFIG=cluster.kubeconfig, PYTHONPATH=str(ROOT / "operator"))
        argv = [
            sys.executable,
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
            "--max-concurrent-measurements",
            str(args.max_concurrent_measurements),
        ]
        log = Path("/tmp/bench-scale-operator.log").open("wb")  # noqa: SIM115 (lives with proc)
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        await asyncio.sleep(3)  # operator up and watching
        idle_rss = rss_peak(proc.pid)
        sem = asyncio.Semaphore(args.concurrency)

        async def create(i: int) -> None:
            async with sem:
                await cluster.create(
                    GW,
                    {
                        "apiVersion": "gpusizer.dev/v1alpha1",
                        "kind": "GPUWorkload",
                        "metadata": {"name": f"w{i:05d}", "namespace": f"ns{i % 10}"},
                        "spec": spec(i),
                    },
                )

        t0 = time.monotonic()
        creating = asyncio.gather(*(create(i) for i in range(args.count)))
        done = 0
        while time.monotonic() - t0 < args.timeout:
            await asyncio.sleep(0.25)
            done = estimated(cluster)
            if done >= args.count:
                break
        await creating
        elapsed = time.monotonic() - t0
        settler = Settler(cluster)
        settled = 0
        if args.settle:
            while time.monotonic() - t0 < args.timeout:
                await settler.step()
                settled = ready(cluster)
                if settled >= args.count:
                    break
                await asyncio.sleep(0.25)
            settle_time = time.monotonic() - t0
        peak = rss_peak(proc.pid)
        proc.send_signal(2)  # SIGINT: kopf stops gracefully (and a profile is written)
        proc.wait(30)
    print(f"workloads:          {args.count} (created with concurrency {args.concurrency})")
    print(f"estimated:          {done}/{args.count}")
    print(f"time to all:        {elapsed:.1f} s (target 60 s)")
    print(f"throughput:         {done / elapsed:.1f} objects/s")
    if args.settle:
        print(f"ready:              {settled}/{args.count} in {settle_time:.1f} s")
        print(
            f"measurement Jobs:   {len(settler.created)} created, at most {settler.peak_live} "
            f"unfinished at once (cap {args.max_concurrent_measurements})"
        )
    print(
        f"operator RSS:       idle {idle_rss / 2**20:.0f} MiB, "
        f"peak {peak / 2**20:.0f} MiB (target 250 MiB)"
    )
    if args.settle:
        ok = settled >= args.count and settler.peak_live <= args.max_concurrent_measurements
        return 0 if ok and len(settler.created) == args.count else 1
    return 0 if done >= args.count else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
