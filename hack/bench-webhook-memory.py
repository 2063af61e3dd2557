#!/usr/bin/env python3
"""Memory of the admission webhook under a burst of large reviews, on loopback.

The chart gives the operator pod (kopf, its watches and the webhook in one process) a 512 MiB
memory limit, and the API server accepts objects of up to about 3 MiB (etcd's default request
limit is 1.5 MiB; the webhook takes bodies up to ``MAX_BODY_BYTES``, 8 MiB). A review body is
decoded into Python objects several times its size, so what bounds the webhook's memory is how
many body bytes it holds and decodes at once, not how many requests it serves.

This starts the webhook of ``hack/bench-webhook.py`` (kopf + gpu-sizer's handlers and server
against kmock's emulator) in a child process, then sends ``--burst`` reviews of about
``--body-mib`` MiB each at the same instant, for each body shape:

* ``flat``: one long annotation value (little to decode: the raw bytes dominate);
* ``many``: tens of thousands of small annotations (the decoded dict is many times the bytes).

It prints, per shape and burst, the child's RSS before the burst, its peak (``VmHWM`` from
``/proc/PID/status``: Linux only) and RSS after, the proportional set size of the processes
below it after the burst (the verdicts' fork server and workers, ``hack/proc_tree.py``: shared
pages counted in shares, so the two add up to what the pod's memory limit sees, give or take the
main process's own shared pages), and how the reviews were answered (HTTP status
counts: 200 answered; 429/503 shed with ``Retry-After``, which the API server retries within its
timeout). Everything stays on 127.0.0.1; every request has a timeout and the run a deadline.

    PYTHONPATH=operator python hack/bench-webhook-memory.py
    PYTHONPATH=operator python hack/bench-webhook-memory.py --burst 8 24 64 --body-mib 8
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime as dt
import json
import os
import ssl
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import aiohttp

HACK = Path(__file__).resolve().parent
sys.path.insert(0, str(HACK))
from proc_tree import pss_kib, tree  # noqa: E402

REQUEST_TIMEOUT_S = 30.0
SHAPES = ("flat", "many")


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak(pid: int) -> None:
    """Reset ``VmHWM`` to the current RSS (``/proc/PID/clear_refs`` value 5, Linux 4.0+)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def body(shape: str, size: int) -> bytes:
    """An AdmissionReview of a GPUWorkload CREATE of about ``size`` bytes."""
    annotations: dict[str, str]
    if shape == "flat":
        annotations = {"bench.gpusizer.dev/pad": "x" * size}
    else:
        # Each entry is some 40 bytes of JSON: a key, a short value.
        annotations = {f"bench.gpusizer.dev/k{i:07d}": "v" for i in range(size // 40)}
    obj = {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": "big", "namespace": "bench", "annotations": annotations},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.2-1B", "parameterCount": 1_235_814_400},
            "inference": {"engine": "vllm", "maxModelLen": 2048},
        },
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "gpusizer.dev", "version": "v1alpha1", "kind": "GPUWorkload"},
            "resource": {
                "group": "gpusizer.dev",
                "version": "v1alpha1",
                "resource": "gpuworkloads",
            },
            "operation": "CREATE",
            "namespace": "bench",
            "name": "big",
            "userInfo": {"username": "bench"},
            "object": obj,
        },
    }
    return json.dumps(review).encode()


async def burst(
    port: int, payload: bytes, count: int, context: ssl.SSLContext
) -> dict[int | str, int]:
    url = f"https://127.0.0.1:{port}/validate-gpuworkload?timeout=10s"
    outcomes: collections.Counter[int | str] = collections.Counter()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    async with session.post(
                        url,
                        data=payload,
                        ssl=context,
                        server_hostname="localhost",
                        headers={"Content-Type": "application/json"},
                    ) as resp:
                        await resp.read()
                        outcomes[resp.status] += 1
            except (TimeoutError, aiohttp.ClientError) as exc:
                outcomes[type(exc).__name__] += 1

        await asyncio.gather(*(one() for _ in range(count)))
    return dict(outcomes)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, nargs="+", default=[8, 24, 64])
    parser.add_argument("--body-mib", type=float, default=8.0)
    args = parser.parse_args()
    size = int(args.body_mib * (1 << 20)) - 4096  # the envelope around the padding
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(HACK.parent / "operator"), os.environ.get("PYTHONPATH", "")]
            ),
        }
        child = subprocess.Popen(
            [sys.executable, str(HACK / "bench-webhook.py"), "--serve", str(workdir)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert child.stdout is not None
            async with asyncio.timeout(120):
                line = await asyncio.to_thread(child.stdout.readline)
            if not line.startswith("READY"):
                raise SystemExit(f"the webhook did not start: {line!r}")
            port = int(line.split()[1])
            context = ssl.create_default_context(cafile=str(workdir / "ca.crt"))
            # Warm up: the first review imports and builds what later ones reuse.
            await burst(port, body("flat", 1 << 10), 4, context)
            print(
                f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}, "
                f"bodies of {args.body_mib:g} MiB"
            )
            print(
                "| shape | burst | RSS before MiB | peak MiB | RSS after MiB "
                "| workers PSS MiB | answers |"
            )
            print("|---|---:|---:|---:|---:|---:|---|")
            for shape in SHAPES:
                payload = body(shape, size)
                for count in args.burst:
                    before = _status_kib(child.pid, "VmRSS")
                    _reset_peak(child.pid)
                    outcomes = await burst(port, payload, count, context)
                    peak = _status_kib(child.pid, "VmHWM")
                    after = _status_kib(child.pid, "VmRSS")
                    workers = sum(pss_kib(p) for p in tree(child.pid)[1:])
                    answers = ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items(), key=str))
                    print(
                        f"| {shape} | {count} | {before / 1024:.0f} | {peak / 1024:.0f} | "
                        f"{after / 1024:.0f} | {workers / 1024:.0f} | {answers} |",
                        flush=True,
                    )
        finally:
            child.terminate()
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()


if __name__ == "__main__":
    asyncio.run(main())
