"""``gpu-sizer demo``: the whole operator on one machine, no cluster and no GPU needed.

It serves a Kubernetes API on 127.0.0.1, installs both CRDs (generated from the API models), the
namespaces the examples use and fake GPU nodes of a few classes (labelled as GPU Feature
Discovery would), applies ``examples/``, runs the real ``gpu-sizer operator`` process with the
local measurement backend, prints a ``kubectl get gpuw``-like table and exits. With ``--serve``
it keeps the API server and the operator running and prints a kubeconfig for real ``kubectl``
until Ctrl-C.

Which API server: kmock's emulator (:mod:`gpu_sizer_testbed.emulator`) by default, so the demo
needs nothing but Python; a real control plane (:mod:`gpu_sizer_testbed.controlplane`: etcd,
kube-apiserver, and the controller manager and scheduler where present) when
``KUBEBUILDER_ASSETS`` names envtest's binaries. There the API server validates every workload
against the CRD's schema and CEL rules (one it refuses is reported and makes the demo exit 1),
the ``default`` namespace already exists, and the nodes' status (``allocatable:
nvidia.com/gpu``) is written through ``nodes/status`` as a kubelet writes it; there is still no
kubelet, so nodes show status Unknown and the probes run as local processes either way.

Waiting: there is no fixed time limit. The demo waits as long as the operator makes progress
(a status changes, or the operator logs something) and gives up only when nothing has moved for
``--stall-seconds``; then it names each workload it was still waiting for, its phase and the
reason the operator gave, and shows the operator's last log lines. The operator's log is a
temporary file, removed when the demo ends well and kept (its path printed) when it does not.

Honesty rules: the probe runs on whatever device this machine has. Without an NVIDIA GPU (NVML
finds none) it runs on the CPU, told so up front (``--device cpu``), where it only builds models
under its CPU limit (2 GiB) and reports every other workload as Unsupported on this device,
before importing torch (so such a workload settles in about a second); the operator then
keeps the estimate-based recommendation and says so. CPU probes do not share a GPU, so they
run several at once (one per core). Two built-in tiny workloads (``tiny-llama-cpu-smoke``,
``tiny-sd-cpu-smoke``) show a complete measurement round trip; their figures are CPU RSS, not
GPU memory. Each probe run is
capped (``--probe-seconds``). The admission webhook is not running here, so specs with no safe
headroom are stored and then marked ``Rejected`` by the operator instead of being refused at
apply time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gpu_sizer
from gpu_sizer.api import GROUP, PLURAL, VERSION
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
from gpu_sizer.yamlio import load_all, read_text

__all__ = ["BUILT_IN", "TINY", "TINY_SD", "main"]

GW = (GROUP, VERSION, PLURAL)
NAMESPACES = ("", "v1", "namespaces")
GIB = 1 << 30
MIB = 1 << 20
FINAL = {"Ready", "Rejected", "Failed"}
DEMO_NODE_CLASSES = ("nvidia-l4", "nvidia-rtx-a6000", "nvidia-a100-80gb", "nvidia-h100-80gb")
#: Operator log lines shown when the demo gives up.
LOG_TAIL = 25

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
        # A cap, not a wait: the run takes seconds, but a loaded machine may take minutes to
        # import torch; the probe stops at this deadline with a Timeout result.
        "measurement": {"timeoutSeconds": 600},
    },
}


_TINY_VAE: dict[str, Any] = {
    "blockOutChannels": [32, 64],
    "layersPerBlock": 1,
    "normNumGroups": 8,
    "latentChannels": 4,
    "downBlockTypes": ["DownEncoderBlock2D"] * 2,
    "upBlockTypes": ["UpDecoderBlock2D"] * 2,
}
#: A tiny Stable Diffusion pipeline (random weights of these shapes): the probe runs its three
#: phases (text encode, denoise, VAE decode) on the CPU, a generation CpuSmokeRun round trip.
TINY_SD: dict[str, Any] = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "GPUWorkload",
    "metadata": {"name": "tiny-sd-cpu-smoke", "namespace": "demo"},
    "spec": {
        "model": {
            "name": "demo/tiny-sd (built-in, CLIP + UNet + VAE, 64x64)",
            "dtype": "float32",
            "pipeline": {
                "class": "StableDiffusionPipeline",
                "components": [
                    {
                        "name": "text_encoder",
                        "class": "CLIPTextModel",
                        "config": {
                            "vocabSize": 1000,
                            "hiddenSize": 32,
                            "intermediateSize": 64,
                            "numHiddenLayers": 2,
                            "numAttentionHeads": 4,
                            "maxPositionEmbeddings": 77,
                            "projectionDim": 32,
                        },
                    },
                    {
                        "name": "unet",
                        "class": "UNet2DConditionModel",
                        "config": {
                            "blockOutChannels": [32, 64],
                            "layersPerBlock": 1,
                            "crossAttentionDim": 32,
                            "attentionHeadDim": 8,
                            "normNumGroups": 8,
                            "sampleSize": 8,
                            "downBlockTypes": ["CrossAttnDownBlock2D", "DownBlock2D"],
                            "upBlockTypes": ["UpBlock2D", "CrossAttnUpBlock2D"],
                        },
                    },
                    {"name": "vae", "class": "AutoencoderKL", "config": _TINY_VAE},
                ],
            },
        },
        "generation": {"task": "TextToImage", "height": 64, "width": 64},
        "measurement": {"timeoutSeconds": 600},
    },
}
#: The workloads the demo applies besides examples/.
BUILT_IN = (TINY, TINY_SD)


def _find_examples(explicit: str | None) -> Path | None:
    """``--examples DIR`` as given (checked by :func:`_check_args`), else the ``examples/`` of
    the working directory or of the checkout this file is in, else None (only the built-in
    workloads)."""
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


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace', 'default')}/{obj['metadata']['name']}"


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _gib(n: Any) -> str:
    return f"{n / GIB:.1f}" if isinstance(n, int) else "-"


def _row(obj: dict[str, Any]) -> list[str]:
    st = obj.get("status") or {}
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
    ready = _conditions(obj).get("Ready", {})
    headroom = rec.get("headroomFraction")
    return [
        _key(obj),
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
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _settled(obj: dict[str, Any]) -> bool:
    """A final phase, or Stalled (waiting for something only a person or a new node changes)."""
    if (obj.get("status") or {}).get("phase") in FINAL:
        return True
    return _conditions(obj).get("Stalled", {}).get("status") == "True"


def _state(obj: dict[str, Any]) -> str:
    st = obj.get("status") or {}
    ready = _conditions(obj).get("Ready", {})
    phase = st.get("phase") or "Pending"
    return f"{phase} ({ready['reason']})" if ready.get("reason") else str(phase)


def _waiting_for(obj: dict[str, Any]) -> str:
    """One line: which workload, in which phase, and what the operator said about it."""
    conds = _conditions(obj)
    if not (obj.get("status") or {}).get("phase"):
        return f"{_key(obj)}: no status yet (the operator has not handled it)"
    detail = (
        conds.get("Measured", {}) if (obj.get("status") or {}).get("phase") == "Measuring" else {}
    )
    detail = detail or conds.get("Ready", {})
    why = f"{detail.get('reason', '-')}: {detail.get('message', '')}".strip()
    return f"{_key(obj)}: still {_state(obj)}; {why}"


def probe_device() -> tuple[str, str]:
    """Where the demo's probes run, and why: ``cpu`` when NVML sees no NVIDIA GPU (no driver,
    or no device), else ``auto`` (the probe picks CUDA when torch sees it)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # NVMLError and its library-not-found variants
        return "cpu", f"no NVIDIA GPU (NVML: {exc})"
    if count == 0:
        return "cpu", "no NVIDIA GPU (NVML found 0 devices)"
    return "auto", f"NVML found {count} NVIDIA GPU(s)"


@dataclass
class _Progress:
    """What changed since the last look: statuses (resourceVersion) and the operator's log."""

    started: float = field(default_factory=time.monotonic)
    last_change: float = field(default_factory=time.monotonic)
    versions: dict[str, str] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    log_size: int = -1

    def seen(self, objs: list[dict[str, Any]], log_size: int, say: Callable[[str], None]) -> None:
        now = time.monotonic()
        if log_size != self.log_size:
            self.log_size, self.last_change = log_size, now
        total = len(objs)
        for gone in set(self.states) - {_key(o) for o in objs}:  # deleted with kubectl
            del self.states[gone]
        for obj in objs:
            key = _key(obj)
            version = str(obj["metadata"].get("resourceVersion"))
            if self.versions.get(key) != version:
                self.versions[key], self.last_change = version, now
            state = _state(obj) if _settled(obj) else ""
            if state and self.states.get(key) != state:
                self.states[key] = state
                done = len(self.states)
                say(f"  [{now - self.started:5.0f} s] {done:>3}/{total} settled  {key}: {state}")
            elif not state:
                self.states.pop(key, None)


async def _settle(
    cluster: Any,
    expected: int,
    proc: subprocess.Popen[bytes],
    log: Path,
    *,
    started: float,
    stall_seconds: float,
    timeout: float | None,
) -> tuple[list[dict[str, Any]], str | None]:
    """Wait until every workload has settled; returns the workloads and, when the demo gave
    up, why (the operator exited, nothing moved for ``stall_seconds``, or ``timeout``
    seconds passed since ``started``)."""
    progress = _Progress(started=started)
    objs: list[dict[str, Any]] = []
    while True:
        objs = sorted(await cluster.list(GW), key=_key)
        size = log.stat().st_size if log.exists() else 0
        progress.seen(objs, size, lambda line: print(line, flush=True))
        if len(objs) >= expected and all(_settled(o) for o in objs):
            return objs, None
        now = time.monotonic()
        if proc.poll() is not None:
            return objs, f"the operator exited with code {proc.returncode}"
        if now - progress.last_change > stall_seconds:
            return objs, (
                f"nothing changed for {stall_seconds:.0f} s (no status update, no operator log "
                "line; --stall-seconds)"
            )
        if timeout is not None and now - started > timeout:
            return objs, f"--timeout {timeout:g} s reached"
        await asyncio.sleep(0.5)


def _report_gave_up(objs: list[dict[str, Any]], why: str, log: Path) -> None:
    waiting = [o for o in objs if not _settled(o)]
    print(f"\nGave up: {why}. Still waiting for {len(waiting)} workload(s):", file=sys.stderr)
    for obj in waiting:
        print(f"  {_waiting_for(obj)}", file=sys.stderr)
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    print(
        f"\nThe operator's last {min(LOG_TAIL, len(lines))} log lines (full log kept: {log}):",
        file=sys.stderr,
    )
    for line in lines[-LOG_TAIL:]:
        print(f"  {line}", file=sys.stderr)


def _print_results(objs: list[dict[str, Any]], device: str) -> None:
    print()
    print(_table(objs))
    print()
    for obj in objs:
        print(f"{_key(obj)}: {_conditions(obj).get('Ready', {}).get('message')}")
    print()
    where = (
        "no GPU here, so the probe ran on the CPU: 'cpu-smoke' figures are CPU RSS, not GPU "
        "memory, and models over the probe's CPU limit are 'Unsupported' on this device"
        if device == "cpu"
        else "the probe ran on this machine's GPU where one was visible"
    )
    print(
        f"Notes: {where}; recommendations with basis Estimate rest on the memory model. No "
        "admission webhook runs in the demo, so specs without safe headroom were stored and "
        "then Rejected by the operator (a cluster refuses them at kubectl apply)."
    )


def _walkthrough(kubeconfig: str, examples: Path | None) -> str:
    example = (
        str(examples / "llama-3-8b-vllm-bf16.yaml")
        if examples and (examples / "llama-3-8b-vllm-bf16.yaml").exists()
        else "examples/llama-3-8b-vllm-bf16.yaml"
    )
    return "\n".join(
        [
            "",
            "Serving until Ctrl-C. In another shell:",
            "",
            f"  export KUBECONFIG={kubeconfig}",
            "  kubectl get gpuw -A",
            "  kubectl get nodes -L nvidia.com/gpu.product,nvidia.com/gpu.memory",
            "  kubectl create namespace my-team",
            f"  sed 's/namespace: inference/namespace: my-team/' {example} | kubectl apply -f -",
            "  kubectl wait -n my-team --for=condition=Ready gpuworkload/llama-3-8b-chat "
            "--timeout=5m",
            "  kubectl get gpuw -n my-team -o wide",
            "  kubectl describe gpuw -n my-team llama-3-8b-chat",
            "  kubectl get events -n my-team",
            "  kubectl explain gpuworkload.spec.inference",
            "",
        ]
    )


async def _serve_until_stopped(
    cluster: Any, proc: subprocess.Popen[bytes], log: Path, started: float
) -> str:
    """Keep serving; print each workload that settles (kubectl applies more); return why it
    stopped."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    progress = _Progress(started=started)
    progress.states = {_key(o): _state(o) for o in await cluster.list(GW) if _settled(o)}
    try:
        while not stop.is_set():
            if proc.poll() is not None:
                return f"the operator exited with code {proc.returncode}"
            objs = sorted(await cluster.list(GW), key=_key)
            size = log.stat().st_size if log.exists() else 0
            progress.seen(objs, size, lambda line: print(line, flush=True))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    return "stopped"


def _write_kubeconfig(source: str, target: str | None) -> str:
    if not target:
        return source
    Path(target).write_text(Path(source).read_text())
    os.chmod(target, 0o600)
    return target


def _check_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the flags, said before anything starts (None: nothing): an
    ``--examples`` directory that does not exist or holds no YAML, a ``--kubeconfig`` that cannot
    be written. Each names the flag and the path as given."""
    if args.examples:
        path = Path(args.examples)
        if not path.is_dir():
            why = "no such directory" if not path.exists() else "not a directory"
            return f"--examples {args.examples}: {why}"
        if not list(path.glob("*.yaml")):
            return f"--examples {args.examples}: no *.yaml files in this directory"
    if args.kubeconfig:
        target = Path(args.kubeconfig)
        parent = target.parent
        if target.is_dir():
            return f"--kubeconfig {args.kubeconfig}: is a directory; name a file to write"
        if not parent.is_dir():
            return f"--kubeconfig {args.kubeconfig}: directory {parent} does not exist"
        if not os.access(parent, os.W_OK):
            return f"--kubeconfig {args.kubeconfig}: directory {parent} is not writable"
    return None


def _choose_api(args: argparse.Namespace) -> tuple[Any, str] | int:
    """The cluster to run against and how to name it: a real control plane when
    ``KUBEBUILDER_ASSETS`` names the binaries, else kmock's emulator; an exit status (2) when
    the settings contradict each other."""
    from gpu_sizer_testbed import controlplane
    from gpu_sizer_testbed.controlplane_api import ControlPlaneCluster
    from gpu_sizer_testbed.emulator import LoopbackCluster

    try:
        assets = controlplane.assets_from_env()
    except controlplane.ControlPlaneError as exc:
        print(f"gpu-sizer demo: {exc}", file=sys.stderr)
        return 2
    if assets is None:
        return LoopbackCluster(port=args.port), "kmock emulator"
    if args.port is not None:
        print(
            f"gpu-sizer demo: --port sets the emulator's port; the control plane from "
            f"{controlplane.ASSETS_ENV}={assets} listens on a port the kernel picks (unset "
            f"{controlplane.ASSETS_ENV} to use the emulator on --port {args.port})",
            file=sys.stderr,
        )
        return 2
    print(f"starting a real control plane from {controlplane.ASSETS_ENV}={assets}", flush=True)
    return ControlPlaneCluster(assets), f"real control plane from {controlplane.ASSETS_ENV}"


async def _install(
    cluster: Any, docs: list[dict[str, Any]]
) -> tuple[list[str], list[GPUClass], list[str]]:
    """Install both CRDs, the namespaces ``docs`` use, the fake GPU nodes and ``docs``; return
    the namespaces, the GPU classes of the nodes and, on a real API server, one line per
    workload it refused (``NAMESPACE/NAME: message``; the emulator validates nothing here).

    On a real control plane the CRDs must be Established before workloads are created, the
    ``default`` namespace already exists, and Node status goes through ``nodes/status`` as a
    kubelet writes it; the emulator takes all of it as created."""
    from gpu_sizer_testbed.controlplane_api import ControlPlaneCluster
    from gpu_sizer_testbed.emulator import ApiStatus, crd_document, record_crd_document

    real = isinstance(cluster, ControlPlaneCluster)
    crds = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    for crd in (crd_document(), record_crd_document()):
        await (cluster.install_crd(crd) if real else cluster.create(crds, crd))
    namespaces = sorted({"default", *(d["metadata"].get("namespace") or "default" for d in docs)})
    for ns in namespaces:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        try:
            await cluster.create(NAMESPACES, namespace)
        except ApiStatus as exc:
            if not (real and exc.status == 409):  # a cluster has "default" from the start
                raise
    by_name = {c.name: c for c in DEFAULT_CATALOG}
    classes = [by_name[n] for n in DEMO_NODE_CLASSES if n in by_name]
    nodes = [_node(cls, i) for i, cls in enumerate(classes)]
    nodes.append(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-new-node-no-gfd-labels"},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}},
        }
    )
    for node in nodes:
        if real:
            allocatable = node["status"]["allocatable"]
            node["status"] = {"capacity": dict(allocatable), "allocatable": allocatable}
            await cluster.add_node(node)
        else:
            await cluster.create(("", "v1", "nodes"), node)
    refused: list[str] = []
    for doc in docs:
        try:
            await cluster.create(GW, doc)
        except ApiStatus as exc:
            if not real or exc.status not in {400, 422}:
                raise
            refused.append(f"{_key(doc)}: HTTP {exc.status} {_api_message(exc.text)}")
    return namespaces, classes, refused


def _api_message(text: str) -> str:
    """The ``message`` of the Status an API server answered with, else the body itself."""
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    return str(doc.get("message") or text) if isinstance(doc, dict) else text


async def _run(args: argparse.Namespace) -> int:
    from gpu_sizer_testbed.controlplane import ControlPlaneError

    started = time.monotonic()
    chosen = _choose_api(args)
    if isinstance(chosen, int):
        return chosen
    api, api_name = chosen
    try:
        async with api as cluster:
            return await _demo_on(cluster, api_name, args, started)
    except ControlPlaneError as exc:
        print(f"gpu-sizer demo: the control plane did not start: {exc}", file=sys.stderr)
        return 1


async def _demo_on(cluster: Any, api_name: str, args: argparse.Namespace, started: float) -> int:
    """Install, start the operator, wait, report; the exit status of :func:`main`."""
    from gpu_sizer_testbed.controlplane_api import ControlPlaneCluster

    if isinstance(cluster, ControlPlaneCluster):
        api_name += f", kube-apiserver {await cluster.version()}"
    examples = _find_examples(args.examples)
    docs = _load(examples) if examples else []
    if not docs:
        where = f"{examples} has no GPUWorkloads" if examples else "examples/ not found"
        print(f"{where}: applying only the built-in tiny workloads")
    docs.extend(BUILT_IN)
    device, why_device = (
        (args.probe_device, "--probe-device") if args.probe_device else probe_device()
    )
    cpus = os.cpu_count() or 1
    concurrency = args.probe_concurrency or (cpus if device == "cpu" else 1)
    try:
        kubeconfig = _write_kubeconfig(cluster.kubeconfig, args.kubeconfig)
    except OSError as exc:
        print(
            f"gpu-sizer demo: --kubeconfig {args.kubeconfig}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    namespaces, classes, refused = await _install(cluster, docs)
    for line in refused:
        print(f"refused by the API server: {line}", file=sys.stderr)
    where = f"{len(docs) - len(BUILT_IN)} from {examples} + " if examples else ""
    print(
        f"Kubernetes API ({api_name}) on {cluster.url}: CRD, namespaces "
        f"{', '.join(namespaces)}, {len(classes)} GPU nodes "
        f"({', '.join(c.name for c in classes)}) and 1 unlabelled node; "
        f"GPUWorkloads: {where}the built-in tiny-llama-cpu-smoke and tiny-sd-cpu-smoke"
    )
    if args.serve:
        print(f"kubeconfig: {kubeconfig}", flush=True)
    fd, name = tempfile.mkstemp(prefix="gpu-sizer-demo-", suffix=".log")
    os.close(fd)
    log = Path(name)
    # The demo's operator gets its settings from the flags below only: a stray GPU_SIZER_*
    # variable in the user's shell (say GPU_SIZER_NAMESPACE) must not reconfigure it.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SIZER_")}
    env["KUBECONFIG"] = cluster.kubeconfig
    # The gpu_sizer the demo imported, for the operator's and the probes' processes too.
    src = Path(gpu_sizer.__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH")) if p)
    probe = [sys.executable, "-m", "gpu_sizer.probe", "--device", device]
    argv = [
        sys.executable, "-m", "gpu_sizer.cli", "operator", "-A", "--standalone",
        "--measurement-backend", "local", "--local-deadline-cap", str(args.probe_seconds),
        "--local-probe-command", shlex.join(probe),
        "--local-max-concurrency", str(concurrency),
        "--no-webhook", "--metrics-port", "0", "--health-port", "0",
    ]  # fmt: skip
    ok = False
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            argv, env=env, stdout=None if args.verbose else fh, stderr=subprocess.STDOUT
        )
        print(
            f"operator started (pid {proc.pid}); probes on {device} ({why_device}), "
            f"{concurrency} at a time; waiting for {len(docs)} workloads to settle "
            f"(giving up only if nothing moves for {args.stall_seconds:g} s)",
            flush=True,
        )
        try:
            objs, gave_up = await _settle(
                cluster,
                len(docs) - len(refused),
                proc,
                log,
                started=started,
                stall_seconds=args.stall_seconds,
                timeout=args.timeout,
            )
            _print_results(objs, device)
            elapsed = time.monotonic() - started
            done = sum(1 for o in objs if _settled(o))
            print(f"{done}/{len(objs)} workloads settled in {elapsed:.0f} s")
            if gave_up is not None:
                _report_gave_up(objs, gave_up, log)
            elif args.serve:
                print(_walkthrough(kubeconfig, examples), flush=True)
                stopped = await _serve_until_stopped(cluster, proc, log, started)
                if stopped != "stopped":
                    _report_gave_up(await cluster.list(GW), stopped, log)
                    gave_up = stopped
                else:
                    print("Stopping the operator and the API server.", flush=True)
            if refused:
                print(
                    f"{len(refused)} workload(s) refused by the API server (listed above)",
                    file=sys.stderr,
                )
            ok = gave_up is None and not refused
        finally:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if args.kubeconfig and kubeconfig != cluster.kubeconfig:
                with contextlib.suppress(OSError):
                    Path(kubeconfig).unlink()
            if ok:
                log.unlink(missing_ok=True)
    return 0 if ok else 1


def main(args: argparse.Namespace) -> int:
    """Run the demo; exit status 0 when every workload settled (and, with ``--serve``, the demo
    was stopped with Ctrl-C or SIGTERM), 1 when it gave up, 2 for flags it cannot use."""
    problem = _check_args(args)
    if problem is not None:
        print(f"gpu-sizer demo: {problem}", file=sys.stderr)
        return 2
    return asyncio.run(_run(args))
