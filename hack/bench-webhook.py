#!/usr/bin/env python3
"""Load benchmark of the admission webhook over HTTPS on loopback, beside its floor.

Starts two servers in child processes: the real thing — a kopf operator with gpu-sizer's
admission handlers and webhook server, talking to kmock's Kubernetes emulator for discovery and
Namespace reads — and the floor (``hack/webhook_floor.py``: a bare aiohttp HTTPS server with the
same TLS set-up that decodes each review and answers it allowed, with its uid). It drives
``/validate-gpuworkload`` of each from this process with an aiohttp client at fixed request
rates, open loop: request *i* is sent at ``t0 + i / rate`` whether or not earlier ones have
answered, and its latency counts from that scheduled instant (so a stalled server shows up as
latency instead of silently lowering the rate: no coordinated omission). For every rate the two
servers are driven in turn, ``--runs`` times each, alternating, and the summary gives the median
of the runs and gpu-sizer's ratios to the floor: absolute times on a shared machine move by the
minute, the ratios of alternating runs much less.

The request mix (``hack/webhook_mix.py``) is 20 example workloads: LLM serving, training and
diffusion, 4 of them (20 %) denied with computed fixes. Before anything is sent, each body's
verdict is checked against ``gpu-sizer estimate``: the benchmark stops if a body is not admitted
or denied as it is meant to be; during the run every answer of gpu-sizer is checked the same way
(allowed, and a denial's message word for word). ``--distinct-specs`` gives every request a
spec no earlier one had (a unique ``spec.model.name``, which changes no verdict), so that nothing
keyed on the spec can answer it from memory; ``--kinds`` sends only some kinds of workload of
the mix. Each request carries ``?timeout=10s`` as the API server sends it.

Prints per rate, server and run: p50, p99 and max latency in milliseconds of the answered
reviews; how many were shed (HTTP 429/503, which the API server retries within its timeout) and
the p50, p99 and max latency of those answers; how many failed otherwise (timeouts, errors, wrong
verdicts); and the server's CPU time per answered review (user + system of its process and of
the processes below it, from ``/proc/PID/stat``: Linux only), with the load average of the
machine. ``--load N`` runs N busy processes beside the benchmark for the whole run. Everything
stays on 127.0.0.1; every loop is bounded in count (rate x duration requests) and time
(per-request timeout, overall deadline).

    PYTHONPATH=operator python hack/bench-webhook.py                 # 200, 600 rps x 15 s x 3
    PYTHONPATH=operator python hack/bench-webhook.py --rates 200 --duration 5 --runs 1
    PYTHONPATH=operator python hack/bench-webhook.py --distinct-specs --load 2
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import itertools
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

HACK = Path(__file__).resolve().parent
sys.path.insert(0, str(HACK))  # the mix and the floor, beside this file

from proc_tree import cpu_seconds  # noqa: E402
from webhook_mix import MIX, Body, Expected, MixError, distinct, expected, review  # noqa: E402

REQUEST_TIMEOUT_S = 10.0
#: Most requests one rate sends (each body is built before the run: some 3 KiB apiece).
MAX_REQUESTS = 60_000
#: The servers driven, in the order each run alternates between them.
SERVERS = ("floor", "gpu-sizer")


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


# --- the load side (this process) ---


#: Outcome of one request: answered, shed (429/503: the API server retries), or an error.
SHED = "shed"


async def one(
    session: aiohttp.ClientSession,
    url: str,
    context: ssl.SSLContext,
    body: bytes,
    want: Expected | None,
    scheduled: float,
) -> tuple[float, str | None]:
    """POST one review; its latency from ``scheduled`` and ``None``, :data:`SHED` or an error.
    ``want`` is the answer it must get (``None``: any allowed answer, the floor's)."""
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            async with session.post(
                url,
                data=body,
                ssl=context,
                server_hostname="localhost",
                headers={"Content-Type": "application/json"},
            ) as resp:
                # Read every answer whole, as the API server's client does: an unread body
                # closes the connection, and the next request would pay a TLS handshake.
                raw = await resp.read()
                status = resp.status
                data = json.loads(raw) if status == 200 else None
    except (TimeoutError, aiohttp.ClientError) as exc:
        return time.perf_counter() - scheduled, f"{type(exc).__name__}: {exc}"
    latency = time.perf_counter() - scheduled
    if status in (429, 503):
        return latency, SHED
    if data is None:
        return latency, f"HTTP {status}"
    answer = data["response"]
    allowed, message = answer["allowed"], (answer.get("status") or {}).get("message")
    if want is None:
        want = Expected(True, None)
    if allowed is not want.allowed or (not allowed and message != want.message):
        return latency, f"unexpected verdict {answer}; expected {want}"
    return latency, None


#: Seconds the idle server's own CPU use is measured before the run (kopf's and the emulator's
#: background work), to subtract it from the CPU per review.
IDLE_PROBE_S = 5.0


def burn(stop_at: float) -> None:
    """Keep one core busy until ``stop_at`` (``time.monotonic``): background load."""
    while time.monotonic() < stop_at:
        sum(range(10_000))


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ascending ``sorted_values``; NaN when empty."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


#: Numbers the fresh specs of the whole benchmark: a spec sent in one run (or its warm-up) must
#: not come back in a later one, where the server's answer cache would still hold it.
_FRESH = itertools.count()


def bodies(count: int, fresh: bool, checked: bool) -> list[tuple[bytes, Expected | None]]:
    """``count`` reviews cycling over the mix, each with its own uid and name; ``fresh``: each
    with a spec no earlier call of this function made either. ``checked``: with the answer each
    must get (gpu-sizer), else None."""
    docs = [b.document() for b in BODIES]
    answers = EXPECTED if checked else [None] * len(docs)
    out = []
    for i in range(count):
        k = i % len(docs)
        doc = distinct(docs[k], next(_FRESH)) if fresh else docs[k]
        out.append((review(doc, str(uuid.uuid4()), f"w-{i}"), answers[k]))
    return out


#: The bodies sent (the mix, or the kinds of it ``--kinds`` names) and each one's answer per
#: ``gpu-sizer estimate``, both set by :func:`main` before any run.
BODIES: list[Body] = list(MIX)
EXPECTED: list[Expected] = []


async def drive(
    port: int,
    cafile: Path,
    rate: float,
    duration: float,
    server_pid: int,
    idle_cpu: float,
    *,
    checked: bool,
    fresh: bool,
) -> dict[str, Any]:
    """Send ``rate x duration`` reviews, open loop; ``idle_cpu`` is the idle server's CPU
    seconds per second, subtracted from its CPU over the run."""
    url = f"https://127.0.0.1:{port}/validate-gpuworkload?timeout=10s"
    context = ssl.create_default_context(cafile=str(cafile))
    count = int(rate * duration)
    warm = bodies(2 * len(BODIES), fresh, checked)
    reviews = bodies(count, fresh, checked)
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm the connection pool, the namespace cache and every body's code path; not
        # measured. Until every warm-up review gets its verdict (the emulator shares the
        # server's process and may answer the first Namespace read late on a loaded machine),
        # at most 60 s.
        deadline = time.monotonic() + 60
        while True:
            outcomes = await asyncio.gather(
                *(one(session, url, context, b, w, time.perf_counter()) for b, w in warm)
            )
            if all(error is None for _, error in outcomes) or time.monotonic() > deadline:
                break
            await asyncio.sleep(1)
        tasks: list[asyncio.Task[tuple[float, str | None]]] = []
        # The client's own garbage collector off while it measures: a full collection over
        # thousands of request tasks pauses it for 100 ms and more on a loaded machine, which
        # would show as the server's latency.
        gc.collect()
        gc.disable()
        try:
            cpu0 = cpu_seconds(server_pid)
            t0 = time.perf_counter() + 0.05
            for i, (body, want) in enumerate(reviews):
                scheduled = t0 + i / rate
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(session, url, context, body, want, scheduled)))
            results = await asyncio.gather(*tasks)
            elapsed = time.perf_counter() - t0
            cpu = cpu_seconds(server_pid) - cpu0 - idle_cpu * elapsed
        finally:
            gc.enable()
    answered = sorted(r[0] * 1000 for r in results if r[1] is None)
    shed = sorted(r[0] * 1000 for r in results if r[1] == SHED)
    errors = [r[1] for r in results if r[1] not in (None, SHED)]
    return {
        "rate": rate,
        "requests": count,
        "achieved_rps": count / elapsed,
        "answered": len(answered),
        "p50_ms": percentile(answered, 0.5),
        "p99_ms": percentile(answered, 0.99),
        "max_ms": answered[-1] if answered else float("nan"),
        "shed": len(shed),
        "shed_p50_ms": percentile(shed, 0.5),
        "shed_p99_ms": percentile(shed, 0.99),
        "shed_max_ms": shed[-1] if shed else float("nan"),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "cpu_ms_per_review": 1000 * cpu / max(1, len(answered)),
        "load": os.getloadavg()[0],
    }


def start(mode: str, workdir: Path) -> tuple[subprocess.Popen[str], int]:
    """Start a server child (``--serve`` or ``--serve-floor``); its process and port."""
    child = subprocess.Popen(
        [sys.executable, __file__, f"--{mode}", str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        if line.startswith("READY "):
            return child, int(line.split()[1])
    child.kill()
    raise RuntimeError(f"{mode} server did not start")


def stop(child: subprocess.Popen[str]) -> None:
    child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()


COLUMNS = (
    ("rate", 5, "rate", ".0f"),
    ("server", 9, "server", ""),
    ("run", 3, "run", ""),
    ("achieved", 8, "achieved_rps", ".1f"),
    ("answered", 8, "answered", ""),
    ("p50 ms", 7, "p50_ms", ".2f"),
    ("p99 ms", 7, "p99_ms", ".2f"),
    ("max ms", 7, "max_ms", ".1f"),
    ("shed", 5, "shed", ""),
    ("shed p50", 8, "shed_p50_ms", ".2f"),
    ("shed p99", 8, "shed_p99_ms", ".2f"),
    ("shed max", 8, "shed_max_ms", ".1f"),
    ("errors", 6, "errors", ""),
    ("CPU ms/rev", 10, "cpu_ms_per_review", ".3f"),
    ("load", 5, "load", ".1f"),
)


def row(values: dict[str, Any]) -> str:
    """One line of the table: ``values`` by column key, numbers formatted, text as it is."""
    cells = []
    for _, width, key, fmt in COLUMNS:
        value = values.get(key, "")
        cells.append(f"{value if isinstance(value, str) else format(value, fmt):>{width}}")
    return " ".join(cells)


def summary(rate: float, results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Medians per server over the runs, and gpu-sizer's ratios to the floor."""
    med = {
        server: {
            key: statistics.median(r[key] for r in runs)
            for key in ("p50_ms", "p99_ms", "max_ms", "cpu_ms_per_review", "shed")
        }
        for server, runs in results.items()
    }
    lines = []
    for server, m in med.items():
        lines.append(row({"rate": rate, "server": server, "run": "med", **m}))
    if set(med) != set(SERVERS):
        return lines
    g, f = med["gpu-sizer"], med["floor"]
    shedding = [r for r in results["gpu-sizer"] if r["shed"]]
    if shedding:
        shed_text = (
            f"; shed {int(g['shed'])} per run (median) answered 429/503 in "
            f"{statistics.median(r['shed_p50_ms'] for r in shedding):.2f} ms (p50), "
            f"{statistics.median(r['shed_p99_ms'] for r in shedding):.2f} ms (p99), "
            f"{max(r['shed_max_ms'] for r in shedding):.1f} ms at most"
        )
    else:
        shed_text = "; nothing shed"
    lines.append(
        f"  {rate:.0f}/s, gpu-sizer / floor (medians of {len(results['floor'])} runs): "
        f"CPU per review {g['cpu_ms_per_review'] / f['cpu_ms_per_review']:.2f}x, "
        f"answered p50 {g['p50_ms'] / f['p50_ms']:.2f}x, p99 {g['p99_ms'] / f['p99_ms']:.2f}x"
        + shed_text
    )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[200, 600])
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per rate and run")
    parser.add_argument("--runs", type=int, default=3, help="runs per rate and server")
    parser.add_argument(
        "--servers", nargs="+", choices=SERVERS, default=list(SERVERS), help="servers driven"
    )
    parser.add_argument(
        "--distinct-specs",
        action="store_true",
        help="every request a spec never sent before (nothing answered from memory)",
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=sorted({b.kind for b in MIX}),
        help="send only these kinds of workload of the mix (default: all)",
    )
    parser.add_argument(
        "--load", type=int, default=0, help="busy processes to run beside the benchmark"
    )
    parser.add_argument("--serve", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--serve-floor", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(Path(args.serve)))
        return 0
    if args.serve_floor:
        from webhook_floor import serve_floor

        asyncio.run(serve_floor(Path(args.serve_floor)))
        return 0
    if not 0 < args.duration <= 120 or not all(0 < r <= 5000 for r in args.rates):
        parser.error("keep --duration within (0, 120] s and rates within (0, 5000] rps")
    if not 1 <= args.runs <= 9 or not 0 <= args.load <= 64:
        parser.error("keep --runs within [1, 9] and --load within [0, 64] processes")
    if max(args.rates) * args.duration > MAX_REQUESTS:
        parser.error(f"keep rate x duration within {MAX_REQUESTS} requests (bodies built first)")
    BODIES[:] = [b for b in MIX if not args.kinds or b.kind in args.kinds]
    try:
        EXPECTED[:] = expected(tuple(BODIES))
    except MixError as exc:
        print(f"the request mix does not measure what it should: {exc}", file=sys.stderr)
        return 1
    denied = sum(not e.allowed for e in EXPECTED)
    kinds = sorted({b.kind for b in BODIES})
    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; mix: {len(BODIES)} bodies "
        f"({', '.join(kinds)}), {denied} denied ({denied / len(BODIES):.0%}), verdicts checked "
        "against gpu-sizer estimate"
        + ("; every request a distinct spec" if args.distinct_specs else "")
    )

    with tempfile.TemporaryDirectory(prefix="bench-webhook-") as tmp:
        children: dict[str, tuple[subprocess.Popen[str], int, Path]] = {}
        burners: list[multiprocessing.Process] = []
        try:
            for server in args.servers:
                workdir = Path(tmp) / server
                workdir.mkdir()
                child, port = start("serve" if server == "gpu-sizer" else "serve-floor", workdir)
                children[server] = (child, port, workdir)
                print(f"{server}: process {child.pid}, https://127.0.0.1:{port}/", flush=True)
            # Background load: busy processes for the whole run (bounded: they stop by themselves).
            total = len(args.rates) * args.runs * len(args.servers) * (args.duration + 30)
            stop_at = time.monotonic() + total + 30
            burners = [
                multiprocessing.Process(target=burn, args=(stop_at,), daemon=True)
                for _ in range(args.load)
            ]
            for burner in burners:
                burner.start()
            cpu0 = {s: cpu_seconds(c.pid) for s, (c, _, _) in children.items()}
            time.sleep(IDLE_PROBE_S)
            idle = {
                s: (cpu_seconds(c.pid) - cpu0[s]) / IDLE_PROBE_S
                for s, (c, _, _) in children.items()
            }
            print(
                f"{os.cpu_count()} CPUs, {args.load} busy processes beside the benchmark, "
                f"load average {os.getloadavg()[0]:.1f} at start; idle servers' CPU (subtracted): "
                + ", ".join(f"{s} {1000 * v:.1f} ms/s" for s, v in idle.items())
            )
            print(row({key: title for title, _, key, _ in COLUMNS}))
            failed = False
            lines: list[str] = []
            for rate in args.rates:
                results: dict[str, list[dict[str, Any]]] = {s: [] for s in args.servers}
                for run in range(1, args.runs + 1):
                    for server in args.servers:
                        child, port, workdir = children[server]
                        r = asyncio.run(
                            drive(
                                port,
                                workdir / "ca.crt",
                                rate,
                                args.duration,
                                child.pid,
                                idle[server],
                                checked=server == "gpu-sizer",
                                fresh=args.distinct_specs,
                            )
                        )
                        results[server].append(r)
                        print(row({**r, "server": server, "run": run}), flush=True)
                        if r["first_error"]:
                            print(f"      first error: {r['first_error']}", flush=True)
                        failed |= r["errors"] > 0
                lines += summary(rate, results)
            print("\n".join(lines))
            return 1 if failed else 0
        finally:
            for burner in burners:
                burner.terminate()
                burner.join(timeout=10)
            for child, _, _ in children.values():
                stop(child)


if __name__ == "__main__":
    sys.exit(main())
