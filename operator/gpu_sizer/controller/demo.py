"""``gpu-sizer demo``: the whole operator on one machine, no cluster and no GPU needed.

It serves a Kubernetes API on 127.0.0.1 (kmock's emulator, :mod:`gpu_sizer.controller.emulator`),
installs the GPUWorkload CRD and fake GPU nodes of a few classes (labelled as GPU Feature
Discovery would), applies ``examples/``, runs the real ``gpu-sizer operator`` process with the
local measurement backend, prints a ``kubectl get gpuw``-like table and exits.

Honesty rules: the probe runs on whatever device this machine has. Without a GPU it runs on the
CPU, where it only builds models under its CPU limit (2 GiB) and reports every other workload as
Unsupported on this device; the operator then keeps the estimate-based recommendation and says
so. A built-in tiny workload (``tiny-llama-cpu-smoke``) shows a complete measurement round trip;
its figures are CPU RSS, not GPU memory. Each probe run is capped (``--probe-seconds``).
The admission webhook is not running here, so specs with no safe headroom are stored and then
marked ``Rejected`` by the operator instead of being refused at apply time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpu_sizer.api import GROUP, PLURAL, VERSION
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
from gpu_sizer.yamlio import load_all, read_text

__all__ = ["main"]

GW = (GROUP, VERSION, PLURAL)
GIB = 1 << 30
MIB = 1 << 20
FINAL = {"Ready", "Rejected", "Failed"}
DEMO_NODE_CLASSES = ("nvidia-l4", "nvidia-rtx-a6000", "nvidia-a100-80gb", "nvidia-h100-80gb")

TINY: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "GPUWorkload",
    "metadata": {"name": "tiny-llama-cpu-smoke", "namespace": "demo"},
    "spec": {
        "model": {
            "name": "demo/tiny-llama (built-in, 2 layers, 2 M parameters)",
            "dtype": "float32",
            "architecture": {
                "modelType": "llama",
                "numHiddenLayers": 2,
                "hiddenSize": 256,
                "intermediateSize": 688,
                "numAttentionHeads": 4,
                "numKeyValueHeads": 2,
                "vocabSize": 1024,
                "maxPositionEmbeddings": 2048,
                "tieWordEmbeddings": False,
            },
        },
        "inference": {"engine": "transformers", "maxModelLen": 512, "maxNumSeqs": 2},
        "measurement": {"timeoutSeconds": 60},
    },
}


def _find_examples(explicit: str | None) -> Path | None:
    if explicit:
        return Path(explicit)
    for base in (Path.cwd(), *Path(__file__).resolve().parents):
        if (base / "examples").is_dir() and list((base / "examples").glob("*.yaml")):
            return base / "examples"
    return None


def _load(directory: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for doc in load_all(read_text(path)):
            if isinstance(doc, dict) and doc.get("kind") == "GPUWorkload":
                docs.append(doc)
    return docs


def _node(cls: GPUClass, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"gpu-{cls.name.removeprefix('nvidia-')}-{index}",
            "labels": {
                cls.product_label: cls.products[0],
                "nvidia.com/gpu.memory": str(cls.memory_bytes // MIB),
                "nvidia.com/gpu.count": "8",
            },
        },
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def _gib(n: Any) -> str:
    return f"{n / GIB:.1f}" if isinstance(n, int) else "-"


def _row(obj: dict[str, Any]) -> list[str]:
    meta, st = obj["metadata"], obj.get("status") or {}
    rec = st.get("recommendation") or {}
    est = ((st.get("estimate") or {}).get("perGpu") or {}).get("totalBytes")
    m = st.get("measurement") or {}
    if m.get("device") == "cuda":
        measured = _gib(m.get("peakDeviceUsedBytes") or m.get("peakReservedBytes"))
    elif m.get("reason"):
        measured = m["reason"]
    elif m.get("device") == "cpu":
        measured = "cpu-smoke"
    else:
        measured = "-"
    conds = {c["type"]: c for c in st.get("conditions") or []}
    ready = conds.get("Ready", {})
    headroom = rec.get("headroomFraction")
    return [
        f"{meta['namespace']}/{meta['name']}",
        str(st.get("phase", "Pending")),
        f"{rec['gpuClass']} x{rec['gpuCount']}" if rec else "-",
        str(rec.get("basis", "-")),
        _gib(est),
        measured,
        f"{headroom:.0%}" if isinstance(headroom, float) else "-",
        f"{ready.get('status', '?')} ({ready.get('reason', '-')})",
    ]


def _table(objs: list[dict[str, Any]]) -> str:
    head = ["NAMESPACE/NAME", "PHASE", "CLASS", "BASIS", "EST GiB/GPU", "MEASURED", "HEADROOM"]
    rows = [[*head, "READY"], *(_row(o) for o in objs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) + 1)]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


async def _run(args: argparse.Namespace) -> int:
    from gpu_sizer.controller.emulator import LoopbackCluster, crd_document

    started = time.monotonic()
    examples = _find_examples(args.examples)
    docs = _load(examples) if examples else []
    if not docs:
        print("examples/ not found: applying only the built-in tiny workload")
    docs.append(TINY)
    async with LoopbackCluster() as cluster:
        await cluster.create(
            ("apiextensions.k8s.io", "v1", "customresourcedefinitions"), crd_document()
        )
        by_name = {c.name: c for c in DEFAULT_CATALOG}
        classes = [by_name[n] for n in DEMO_NODE_CLASSES if n in by_name]
        for i, cls in enumerate(classes):
            await cluster.create(("", "v1", "nodes"), _node(cls, i))
        await cluster.create(
            ("", "v1", "nodes"),
            {
                "metadata": {"name": "gpu-new-node-no-gfd-labels"},
                "status": {"allocatable": {"nvidia.com/gpu": "8"}},
            },
        )
        for doc in docs:
            await cluster.create(GW, doc)
        where = f"{len(docs) - 1} from {examples} + " if examples else ""
        print(
            f"Kubernetes API (kmock emulator) on {cluster.url}: CRD, {len(classes)} GPU nodes "
            f"({', '.join(c.name for c in classes)}) and 1 unlabelled node; "
            f"GPUWorkloads: {where}the built-in tiny-llama-cpu-smoke"
        )
        log = Path(tempfile.mkstemp(prefix="gpu-sizer-demo-", suffix=".log")[1])
        # The demo's operator gets its settings from the flags below only: a stray GPU_SIZER_*
        # variable in the user's shell (say GPU_SIZER_NAMESPACE) must not reconfigure it.
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SIZER_")}
        env["KUBECONFIG"] = cluster.kubeconfig
        src = Path(__file__).resolve().parents[2]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH")) if p)
        argv = [
            sys.executable, "-m", "gpu_sizer.cli", "operator", "-A", "--standalone",
            "--measurement-backend", "local", "--local-deadline-cap", str(args.probe_seconds),
            "--no-webhook", "--metrics-port", "0", "--health-port", "0",
        ]  # fmt: skip
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                argv, env=env, stdout=None if args.verbose else fh, stderr=subprocess.STDOUT
            )
            print(f"operator started (pid {proc.pid}, log {log}); measuring with the local probe")
            try:
                objs = await _wait(cluster, len(docs), args.timeout, proc)
            finally:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)
                if proc.poll() is None:
                    proc.kill()
    print()
    print(_table(objs))
    print()
    for obj in objs:
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        ready = conds.get("Ready", {})
        print(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}: {ready.get('message')}")
    print()
    print(
        "Notes: no GPU here, so the probe ran on the CPU: 'cpu-smoke' figures are CPU RSS, not "
        "GPU memory, and models over the probe's CPU limit are 'Unsupported' on this device; "
        "recommendations with basis Estimate rest on the memory model. No admission webhook "
        "runs in the demo, so specs without safe headroom were stored and then Rejected by the "
        "operator (a cluster refuses them at kubectl apply)."
    )
    done = sum(1 for o in objs if (o.get("status") or {}).get("phase") in FINAL)
    print(f"{done}/{len(objs)} workloads settled in {time.monotonic() - started:.0f} s")
    return 0 if done == len(objs) else 1


async def _wait(
    cluster: Any, expected: int, timeout: float, proc: subprocess.Popen[bytes]
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    objs: list[dict[str, Any]] = []
    while time.monotonic() < deadline and proc.poll() is None:
        objs = await cluster.list(GW)
        phases = [(o.get("status") or {}).get("phase") for o in objs]
        if len(objs) >= expected and all(
            p in FINAL or _stalled(o) for p, o in zip(phases, objs, strict=True)
        ):
            break
        await asyncio.sleep(0.5)
    return sorted(objs, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))


def _stalled(obj: dict[str, Any]) -> bool:
    conds = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Stalled" and c.get("status") == "True" for c in conds)


def main(args: argparse.Namespace) -> int:
    """Run the demo; exit status 0 when every workload reached a final phase."""
    return asyncio.run(_run(args))
