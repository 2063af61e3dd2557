#!/usr/bin/env python3
"""Load benchmark of the admission webhook over HTTPS on loopback.

Starts the real thing in a child process — a kopf operator with gpu-sizer's admission handlers
and webhook server, talking to kmock's Kubernetes emulator for discovery and Namespace reads —
then drives ``/validate-gpuworkload`` from this process with an aiohttp client at fixed request
rates, open loop: request *i* is sent at ``t0 + i / rate`` whether or not earlier ones have
answered, and its latency counts from that scheduled instant (so a stalled server shows up as
latency instead of silently lowering the rate: no coordinated omission).

The request mix is 80 % workloads that fit (Llama 3 8B on vLLM) and 20 % that have no safe
headroom (the denial computes fixes, the expensive path). Each request carries ``?timeout=10s``
as the API server sends it. Prints per rate: p50, p99 and max latency in milliseconds of the
answered reviews, how many were shed (HTTP 429/503, which the API server retries within its
timeout) and how many failed otherwise (timeouts, errors, wrong verdicts), and the server's CPU
time per answered review (user + system, from ``/proc/PID/stat``: Linux only), with the load
average of the machine. ``--load N`` runs N busy processes beside the benchmark for the whole
run, to measure on a loaded machine reproducibly. Everything stays on 127.0.0.1; every loop is
bounded in count (rate x duration requests) and time (per-request timeout, overall deadline).

    PYTHONPATH=operator python hack/bench-webhook.py                 # 50, 200, 500 rps x 20 s
    PYTHONPATH=operator python hack/bench-webhook.py --rates 200 --duration 5
    PYTHONPATH=operator python hack/bench-webhook.py --rates 20 200 --load 2
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.architectures: the shared config.json figures

from tests.architectures import LLAMA_3_8B  # noqa: E402

REQUEST_TIMEOUT_S = 10.0


# --- the server side (child process) -------------------------------------------------------------


async def serve(workdir: Path) -> None:
    """Run kmock + the kopf operator with the webhook; print ``READY <port>`` when listening."""
    import kmock
    import kopf
    import kubernetes.config
    import yaml

    import gpu_sizer.admission.handlers  # noqa: F401  (registers the handlers)
    from gpu_sizer.admission import certs
    from gpu_sizer.admission.server import AdmissionServer, configure

    certs.write_files(certs.generate_bundle(["localhost"], dt.datetime.now(dt.UTC)), workdir)
    async with kmock.KubernetesEmulator() as k, kmock.Server(k) as srv:
        k.resources["gpusizer.dev/v1alpha1/gpuworkloads"] = kmock.ResourceInfo(
            kind="GPUWorkload",
            namespaced=True,
            verbs={"get", "list", "watch", "patch"},
            subresources={"status"},
        )
        for name, kind in (
            ("v1/namespaces", "Namespace"),
            ("apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinition"),
        ):
            k.resources[name] = kmock.ResourceInfo(
                kind=kind, namespaced=False, verbs={"get", "list", "watch"}
            )
        # kmock 0.8 reads GET /api/v1/namespaces/NAME as a list: serve the object explicitly.
        k["get /api/v1/namespaces/bench"] << {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "bench", "labels": {"team": "bench"}},
        }
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "k",
                    "clusters": [{"name": "k", "cluster": {"server": str(srv.url).rstrip("/")}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}],
                }
            )
        )
        os.environ["KUBECONFIG"] = str(kubeconfig)
        kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(kubeconfig)
        policy = workdir / "policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "namespaceRules": [
                        {
                            "namespaceSelector": {"matchLabels": {"team": "bench"}},
                            "defaultMinHeadroomFraction": 0.1,
                        },
                    ]
                }
            )
        )
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False
        options = SimpleNamespace(
            webhook_port=0,
            webhook_listen="127.0.0.1",
            webhook_cert_dir=str(workdir),
            policy=str(policy),
        )
        server = configure(settings, options)
        assert isinstance(server, AdmissionServer)
        task = asyncio.create_task(
            kopf.operator(
                settings=settings,
                clusterwide=True,
                standalone=True,
            )
        )
        async with asyncio.timeout(60):
            while server.bound is None:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        print(f"READY {server.bound[1]}", flush=True)
        await task


# --- the load side (this process) ---------------------------------------------------------------


def review(fits: bool) -> bytes:
    seqs = 16 if fits else 2048
    obj = {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": f"w-{uuid.uuid4().hex[:8]}", "namespace": "bench"},
        "spec": {
            "model": {"revision": "62bd457", "architecture": LLAMA_3_8B},
            "inference": {"maxModelLen": 8192, "maxNumSeqs": seqs},
        },
    }
    resource = {"group": "gpusizer.dev", "version": "v1alpha1", "resource": "gpuworkloads"}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "gpusizer.dev", "version": "v1alpha1", "kind": "GPUWorkload"},
                "resource": resource,
                "name": obj["metadata"]["name"],
                "namespace": "bench",
                "operation": "CREATE",
                "userInfo": {"username": "bench", "uid": "1", "groups": []},
                "object": obj,
                "dryRun": False,
            },
        }
    ).encode()


#: Outcome of one request: answered, shed (429/503: the API server retries), or an error.
SHED = "shed"


async def one(
    session: aiohttp.ClientSession,
    url: str,
    context: ssl.SSLContext,
    body: bytes,
    expect_allowed: bool,
    scheduled: float,
) -> tuple[float, str | None]:
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            async with session.post(
                url,
                data=body,
                ssl=context,
                server_hostname="localhost",
                headers={"Content-Type": "application/json"},
            ) as resp:
                data = await resp.json() if resp.status == 200 else None
                status = resp.status
    except (TimeoutError, aiohttp.ClientError) as exc:
        return time.perf_counter() - scheduled, f"{type(exc).__name__}: {exc}"
    if status in (429, 503):
        return time.perf_counter() - scheduled, SHED
    if data is None:
        return time.perf_counter() - scheduled, f"HTTP {status}"
    if data["response"]["allowed"] is not expect_allowed:
        return time.perf_counter() - scheduled, f"unexpected verdict {data['response']}"
    return time.perf_counter() - scheduled, None


#: Seconds the idle server's own CPU use is measured before the run (kopf's and the emulator's
#: background work), to subtract it from the CPU per review.
IDLE_PROBE_S = 5.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def burn(stop_at: float) -> None:
    """Keep one core busy until ``stop_at`` (``time.monotonic``): background load."""
    while time.monotonic() < stop_at:
        sum(range(10_000))


async def drive(
    port: int, cafile: Path, rate: float, duration: float, server_pid: int, idle_cpu: float
) -> dict[str, Any]:
    """Send ``rate x duration`` reviews, open loop; ``idle_cpu`` is the idle server's CPU
    seconds per second, subtracted from its CPU over the run."""
    url = f"https://127.0.0.1:{port}/validate-gpuworkload?timeout=10s"
    context = ssl.create_default_context(cafile=str(cafile))
    count = int(rate * duration)
    bodies = [(review(i % 5 != 4), i % 5 != 4) for i in range(min(count, 1000))]
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm the connection pool, the namespace cache and both code paths; not measured.
        # Until every warm-up review gets its verdict (the emulator shares the server's process
        # and may answer the first Namespace read late on a loaded machine), at most 60 s.
        warm = [bodies[i % 5] for i in range(10)]
        deadline = time.monotonic() + 60
        while True:
            outcomes = await asyncio.gather(
                *(one(session, url, context, b, ok, time.perf_counter()) for b, ok in warm)
            )
            if all(error is None for _, error in outcomes) or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        tasks: list[asyncio.Task[tuple[float, str | None]]] = []
        cpu0 = cpu_seconds(server_pid)
        t0 = time.perf_counter() + 0.05
        for i in range(count):
            scheduled = t0 + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body, allowed = bodies[i % len(bodies)]
            tasks.append(asyncio.create_task(one(session, url, context, body, allowed, scheduled)))
        results = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - t0
        achieved = count / elapsed
        cpu = cpu_seconds(server_pid) - cpu0 - idle_cpu * elapsed
    answered = sorted(r[0] * 1000 for r in results if r[1] is None)
    shed = sum(1 for r in results if r[1] == SHED)
    errors = [r[1] for r in results if r[1] not in (None, SHED)]
    return {
        "rate": rate,
        "requests": count,
        "achieved_rps": achieved,
        "answered": len(answered),
        "p50_ms": statistics.median(answered) if answered else float("nan"),
        "p99_ms": answered[min(len(answered) - 1, int(0.99 * len(answered)))]
        if answered
        else float("nan"),
        "max_ms": answered[-1] if answered else float("nan"),
        "shed": shed,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "cpu_ms_per_review": 1000 * cpu / max(1, len(answered)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[50, 200, 500])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per rate")
    parser.add_argument(
        "--load", type=int, default=0, help="busy processes to run beside the benchmark"
    )
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(Path(args.serve)))
        return 0
    if not 0 < args.duration <= 120 or not all(0 < r <= 5000 for r in args.rates):
        parser.error("keep --duration within (0, 120] s and rates within (0, 5000] rps")
    if not 0 <= args.load <= 64:
        parser.error("keep --load within [0, 64] processes")

    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        child = subprocess.Popen(
            [sys.executable, __file__, "--serve", tmp],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert child.stdout is not None
            deadline = time.monotonic() + 90
            port = None
            while port is None and time.monotonic() < deadline:
                line = child.stdout.readline()
                if not line:
                    break
                if line.startswith("READY "):
                    port = int(line.split()[1])
            if port is None:
                print("webhook server did not start", file=sys.stderr)
                return 1
            # Background load: busy processes for the whole run (bounded: they stop by themselves).
            stop_at = time.monotonic() + len(args.rates) * (args.duration + 30) + 30
            burners = [
                multiprocessing.Process(target=burn, args=(stop_at,), daemon=True)
                for _ in range(args.load)
            ]
            for burner in burners:
                burner.start()
            cpu0 = cpu_seconds(child.pid)
            time.sleep(IDLE_PROBE_S)
            idle_cpu = (cpu_seconds(child.pid) - cpu0) / IDLE_PROBE_S
            print(
                f"{os.cpu_count()} CPUs, {args.load} busy processes beside the benchmark, "
                f"load average {os.getloadavg()[0]:.1f} at start; idle server: "
                f"{1000 * idle_cpu:.1f} ms CPU per second (subtracted below)"
            )
            print(
                f"{'rate':>6} {'sent':>6} {'achieved':>9} {'answered':>8} {'p50 ms':>8} "
                f"{'p99 ms':>8} {'max ms':>8} {'shed':>5} {'errors':>6} {'CPU ms/review':>13} "
                f"{'load':>5}"
            )
            failed = False
            try:
                for rate in args.rates:
                    r = asyncio.run(
                        drive(port, Path(tmp) / "ca.crt", rate, args.duration, child.pid, idle_cpu)
                    )
                    print(
                        f"{r['rate']:>6.0f} {r['requests']:>6} {r['achieved_rps']:>9.1f} "
                        f"{r['answered']:>8} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                        f"{r['max_ms']:>8.2f} {r['shed']:>5} {r['errors']:>6} "
                        f"{r['cpu_ms_per_review']:>13.2f} {os.getloadavg()[0]:>5.1f}",
                        flush=True,
                    )
                    if r["first_error"]:
                        print(f"       first error: {r['first_error']}", flush=True)
                    failed |= r["errors"] > 0
            finally:
                for burner in burners:
                    burner.terminate()
                    burner.join(timeout=10)
            return 1 if failed else 0
        finally:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


if __name__ == "__main__":
    sys.exit(main())
