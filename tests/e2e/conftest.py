"""End-to-end harness: the real operator process against a Kubernetes API on loopback.

The operator is ``gpu-sizer operator --standalone`` in a subprocess with a kubeconfig pointing at
the API. Which API, per test (the ``cluster`` fixture):

- **The real control plane** (:mod:`tests.e2e.envtest`): with ``KUBEBUILDER_ASSETS`` set (as
  ``.ci/run`` sets it), every test not marked ``emulated_api`` runs on the session's
  kube-apiserver, Job controller, garbage collector and scheduler, in namespaces of its own, with
  its GPU Nodes registered as objects; :class:`~tests.e2e.kubelets.RealKubelet` plays only the
  kubelet (pod status through ``pods/status``).
- **kmock's emulator** (``gpu_sizer_testbed.emulator.LoopbackCluster``): tests marked
  ``emulated_api`` (they inject API faults, or store what a real server refuses), and every test
  when no control plane is there. :class:`~tests.e2e.kubelets.Kubelet` plays the kubelet,
  scheduler and Job controller there.
- **A real cluster** with ``GPU_SIZER_E2E_KUBECONFIG`` (``real_cluster.py``;
  hack/e2e-real-cluster.md says what runs and what is skipped there).

Every status the operator wrote is collected (from kmock's object histories, or a watch) for the
schema test in ``test_zz_status_schema.py``. The terminal summary counts the tests that ran on
each backend.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gpu_sizer_testbed.controlplane import ControlPlane
from gpu_sizer_testbed.emulator import (
    LoopbackCluster,
    crd_document,
    record_crd_document,
)

from gpu_sizer.api.crd import CRD_NAME, RECORD_CRD_NAME
from tests.architectures import LLAMA_3_2_1B
from tests.conftest import Kubectl
from tests.e2e import envtest, real_cluster, status_schema
from tests.e2e.kubelets import Kubelet, RealKubelet
from tests.e2e.waiting import PATIENCE, eventually

__all__ = ["PATIENCE", "Kubelet", "RealKubelet", "eventually"]

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
GW = ("gpusizer.dev", "v1alpha1", "gpuworkloads")
JOBS = ("batch", "v1", "jobs")
PODS = ("", "v1", "pods")
NODES = ("", "v1", "nodes")
CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
RECORDS = ("gpusizer.dev", "v1alpha1", "gpumeasurements")
EVENTS = ("", "v1", "events")
NS = "ml-team"
MIB = 1 << 20

#: Every status object written during the suite (appended per test by the cluster fixture).
WRITTEN_STATUSES: list[dict[str, Any]] = []
#: The operator's unschedulable timeout in tests that want a Job to stay unscheduled and end
#: there (a class no node has, a full node), and have no other Job that must be scheduled.
QUICK_UNSCHEDULABLE = ("--unschedulable-timeout", "1.5")
#: The same in tests that also have Jobs that must run: long enough for the scheduler (or, on
#: the emulator, the test playing it) to bind their pods on a loaded machine, since a pod left
#: unbound that long counts as unschedulable too.
SCHEDULING_GRACE = ("--unschedulable-timeout", "10")


def spec(params: int | None = None, **extra: Any) -> dict[str, Any]:
    """A small inference spec (Llama-3.2-1B, bf16) that fits the smallest class.

    ``params`` replaces the architecture with a bare ``parameterCount``: the estimate then
    cannot count the KV cache, so its verdict is Incomplete (or NoSafeHeadroom when even the
    weights fit no class).
    """
    model: dict[str, Any] = {"name": "test/model", "architecture": LLAMA_3_2_1B}
    if params is not None:
        model = {"name": "test/model", "parameterCount": params}
    doc: dict[str, Any] = {
        "model": {**model, "dtype": "bfloat16"},
        "inference": {"engine": "vllm", "maxModelLen": 2048, "maxNumSeqs": 4},
        "measurement": {"timeoutSeconds": 60},
    }
    for key, value in extra.items():
        doc[key] = {**doc.get(key, {}), **value}
    return doc


#: The fields :func:`invalid_spec` gets wrong, as the operator's messages name them.
INVALID_FIELDS = ("spec.measurement.concurrencyLevels[0]", "spec.measurement.concurrencyLevels[1]")


def invalid_spec() -> dict[str, Any]:
    """A spec the CRD's schema and CEL rules accept but the operator's validation refuses (as
    the admission webhook would at apply): two concurrency levels above ``maxNumSeqs`` (4). A
    real API server stores it when no webhook runs, so the operator must mark it Stalled."""
    return spec(measurement={"concurrencyLevels": [64, 128]})


def workload(name: str, body: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def gpu_node(name: str, product: str, memory_mib: int, count: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(memory_mib),
                "nvidia.com/gpu.count": str(count),
            },
        },
        "status": {"allocatable": {"nvidia.com/gpu": str(count)}},
    }


def busy_pod(node: str, gpus: int, name: str = "busy", namespace: str = "other-team") -> dict:
    """Another team's pod holding ``gpus`` GPUs of ``node`` (bound there, not scheduled): the
    node's class is present, but a measurement pod finds no room on it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "server",
                    "image": "vllm/vllm-openai:v0.11.0",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }


async def logged(proc: OperatorProcess, text: str, lines: int = 2000) -> bool:
    """Whether the operator's log has ``text`` (its last ``lines`` lines)."""
    return text in proc.tail(lines)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return {}


class OperatorProcess:
    """``gpu-sizer operator`` as a subprocess; its log goes to a file shown on failure."""

    def __init__(self, cluster: Any, log: Path, args: list[str]) -> None:
        env = dict(os.environ)
        # One injectable point: a backend may run the operator under other credentials than
        # its own (a ServiceAccount token), as an installed operator runs.
        env["KUBECONFIG"] = getattr(cluster, "operator_kubeconfig", cluster.kubeconfig)
        env["PYTHONPATH"] = str(ROOT / "operator") + os.pathsep + env.get("PYTHONPATH", "")
        for key in list(env):
            if key.startswith("GPU_SIZER_"):
                del env[key]
        self.log = log
        argv = [
            sys.executable,
            "-m",
            "gpu_sizer.cli",
            "operator",
            *getattr(cluster, "operator_scope", ["-A"]),  # real API: the test's namespaces
            "--standalone",
            "--metrics-port",
            "0",
            "--health-port",
            "0",
            "--no-webhook",
            # The chart's default: a pod waits this long for a node (tests that want the timer
            # pass QUICK_UNSCHEDULABLE or SCHEDULING_GRACE), since a pod not yet bound, or a
            # Job without one yet, is on that timer too.
            "--unschedulable-timeout",
            "600",
            # Most tests apply one spec many times and count its Jobs: they run without shared
            # measurement records; the tests of sharing (test_shared_records.py) turn them on.
            *([] if "--measurement-sharing" in args else ["--measurement-sharing", "Disabled"]),
            *args,
        ]
        self._fh = log.open("ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._fh, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._fh.close()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def default_nodes() -> list[dict[str, Any]]:
    """The GPU nodes every test's cluster starts with: one L4, one A100 80 GB."""
    return [
        gpu_node("l4-1", "NVIDIA-L4", 23034),
        gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", 81920),
    ]


@pytest.fixture(scope="session")
def e2e_plane(control_plane: ControlPlane, kubectl: Kubectl) -> ControlPlane:
    """The session's control plane with the CRDs applied (server-side, as users apply them)."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kubectl.wait_established(CRD_NAME, RECORD_CRD_NAME, timeout=PATIENCE)
    return control_plane


@contextlib.asynccontextmanager
async def open_cluster(
    request: pytest.FixtureRequest,
    *,
    extra: dict[Any, Any] | None = None,
    nodes: list[dict[str, Any]] | None = None,
    controllers: tuple[str, ...] = (),
) -> AsyncIterator[Any]:
    """The test's cluster on the backend its markers and the environment choose (module
    docstring), with ``nodes`` (default :func:`default_nodes`). ``extra``: resources for the
    emulator (``kueue_resources()``, ...), which a real API server serves itself or from CRDs
    the test applies; ``controllers``: kube-controller-manager controllers the test needs
    besides the Job controller (the emulator is used when the control plane runs without
    them)."""
    nodes = default_nodes() if nodes is None else nodes
    kubeconfig = real_cluster.kubeconfig_from_env()
    if kubeconfig is not None:  # GPU_SIZER_E2E_KUBECONFIG: a real cluster (real_cluster.py)
        mode = real_cluster.operator_mode_from_env()
        request.node.user_properties.append(("e2e_backend", "cluster"))
        async with real_cluster.RealCluster(kubeconfig, NS, mode) as real:
            yield real
            _check_statuses(real.written_statuses)
        return
    markers = {m.name for m in request.node.iter_markers()}
    if envtest.emulator_reason(markers, controllers=controllers) is None:
        plane = request.getfixturevalue("e2e_plane")
        request.node.user_properties.append(("e2e_backend", "envtest"))
        async with envtest.EnvtestCluster(plane, NS, nodes) as real:
            yield real
            _check_statuses(real.written_statuses)
        return
    request.node.user_properties.append(("e2e_backend", "emulator"))
    async with LoopbackCluster(extra=extra) as c:
        await c.create(CRDS, crd_document())
        await c.create(CRDS, record_crd_document())
        for node in nodes:
            await c.create(NODES, node)
        yield c
        written = [
            _plain(version.get("status"))
            for (resource, _ns, _name), obj in list(c.emulator.objects.items())
            if getattr(resource, "plural", None) == "gpuworkloads"
            for version in obj.history
            if version is not None and version.get("status")
        ]
        _check_statuses(written)


@pytest.fixture
async def cluster(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    async with open_cluster(request) as c:
        yield c


def on_control_plane(cluster: Any) -> bool:
    """Whether ``cluster`` is the envtest control plane (real API server, Job controller and
    scheduler; the harness plays the kubelet)."""
    return isinstance(cluster, envtest.EnvtestCluster)


def real_namespace(cluster: Any, namespace: str = NS) -> str:
    """The namespace the API server holds a test's objects of ``namespace`` in (metric labels
    and operator messages name it; the emulator keeps the test's own names)."""
    if isinstance(cluster, real_cluster.RealCluster):
        return cluster.real_namespace(namespace)
    return namespace


def _check_statuses(written: list[dict[str, Any]]) -> None:
    """Every status this test's operator wrote is declared in the CRD (a real API server would
    prune what is not): checked per test, so that it holds however the suite is split."""
    WRITTEN_STATUSES.extend(written)
    wrong = status_schema.problems(written)
    assert not wrong, f"statuses a real API server would prune or refuse: {wrong}"


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.fixture
def start_operator(
    cluster: LoopbackCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., OperatorProcess]]:
    procs: list[OperatorProcess] = []
    if real_cluster.uses_installed_operator(cluster):  # one already serves the cluster
        yield lambda *args: real_cluster.InstalledOperator()
        return

    def start(*args: str) -> OperatorProcess:
        proc = OperatorProcess(cluster, tmp_path / "operator.log", list(args))
        procs.append(proc)
        return proc

    yield start
    for p in procs:
        p.stop()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed and procs:
        print("---- operator log (tail) ----\n" + procs[-1].tail())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]
    return rep


@pytest.fixture
def kubelet(cluster: Any) -> Kubelet:
    """The emulator's kubelet, scheduler and Job controller; on a real API server (the control
    plane, or a cluster) the kubelet's part only, waiting for the cluster's own Job controller
    and scheduler (on a real cluster the tests that report pod status are skipped)."""
    real = isinstance(cluster, real_cluster.RealCluster) and not cluster.kmock
    return RealKubelet(cluster) if real else Kubelet(cluster)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many e2e tests ran on each backend (the count the CI log and the docs quote)."""
    ran: dict[str, set[str]] = {}
    for key in ("passed", "failed"):
        for report in terminalreporter.stats.get(key, []):
            if getattr(report, "when", "") != "call":
                continue
            for name, value in getattr(report, "user_properties", []):
                if name == "e2e_backend":
                    ran.setdefault(str(value), set()).add(report.nodeid)
    if ran:
        counts = ", ".join(f"{len(ids)} on {backend}" for backend, ids in sorted(ran.items()))
        terminalreporter.write_line(f"e2e backends: {counts}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, with the reason, the tests that cannot run against a real cluster (markers)."""
    real_cluster.apply_mode_skips(items)


@pytest.fixture(autouse=True)
def _gpu_classes_required(request: pytest.FixtureRequest) -> Iterator[None]:
    """``@pytest.mark.gpu_classes(name, ...)``: on a real cluster, the ``cluster`` fixture skips
    the test unless a node of each class is present. The loopback fixture's nodes (L4, A100
    80GB) are always there."""
    marker = request.node.get_closest_marker("gpu_classes")
    real_cluster.REQUIRED_CLASSES = tuple(marker.args) if marker else ()
    yield
    real_cluster.REQUIRED_CLASSES = ()
