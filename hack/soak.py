#!/usr/bin/env python3
"""Soak (issue 13): the real operator under API faults and SIGKILLs, then every invariant checked.

Serves the Kubernetes API on loopback (kmock's emulator), creates ``--per-kind`` GPUWorkloads of
each of 7 kinds (measured, CUDA OOM then a larger class, spec changed A -> B -> A, waiting for a
missing GPU class, measurement disabled, no safe headroom, invalid), plays the kubelet for their
Jobs, injects faults into the operator's requests (409/500 on status writes, 500 on creates,
HTTP 410 on watch requests and in streams, watch events 1 s late), SIGKILLs the operator
``--kills`` times, then stops the faults and checks what ``tests/e2e/soak.py`` lists. Prints the
figures; exits 1 when an invariant is broken. ``tests/e2e/test_soak.py`` runs a short form in CI.

Usage: python hack/soak.py [--per-kind 40] [--kills 6] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))
sys.path.insert(0, str(ROOT))

from gpu_sizer_testbed.emulator import LoopbackCluster, crd_document  # noqa: E402
from tests.e2e.conftest import CRDS, NODES, OperatorProcess, gpu_node  # noqa: E402
from tests.e2e.soak import soak  # noqa: E402
from tests.e2e.test_soak import soak_faults  # noqa: E402


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=int, default=40, help="workloads of each kind (7 kinds)")
    ap.add_argument("--kills", type=int, default=6, help="SIGKILLs of the operator")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--settle-timeout", type=float, default=600)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpu-sizer-soak-"))
    log = tmp / "operator.log"
    procs: list[OperatorProcess] = []
    async with LoopbackCluster() as cluster:
        await cluster.create(CRDS, crd_document())
        await cluster.create(NODES, gpu_node("l4-1", "NVIDIA-L4", 23034))
        await cluster.create(NODES, gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", 81920))

        def start(*flags: str) -> OperatorProcess:
            proc = OperatorProcess(cluster, log, list(flags))
            procs.append(proc)
            return proc

        began = time.monotonic()
        try:
            report = await soak(
                cluster,
                start,
                per_kind=args.per_kind,
                kills=args.kills,
                faults=soak_faults(args.seed),
                seed=args.seed,
                settle_timeout=args.settle_timeout,
                log=lambda line: print(f"[{time.monotonic() - began:6.1f} s] {line}", flush=True),
            )
        finally:
            for proc in procs:
                proc.stop()
    print("\n".join(report.lines()))
    print(f"wall time:             {time.monotonic() - began:.1f} s; operator log: {log}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
