"""End-to-end harness: the real operator process against a Kubernetes API on loopback.

The API is kmock's KubernetesEmulator (``gpu_sizer.controller.emulator.LoopbackCluster``); the
operator is ``gpu-sizer operator -A --standalone`` in a subprocess with a kubeconfig pointing at
it. There is no kubelet, scheduler or Job controller: :class:`Kubelet` plays them, writing the pod
and Job status a real cluster would. Every status the operator wrote is collected (from kmock's
object histories) for the schema test in ``test_zz_status_schema.py``.

With ``GPU_SIZER_E2E_KUBECONFIG`` set, the same fixtures run against a real cluster instead
(``real_cluster.py``; hack/e2e-real-cluster.md says what runs and what is skipped there).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from gpu_sizer_testbed.emulator import (
    ApiStatus,
    LoopbackCluster,
    crd_document,
    record_crd_document,
)

from tests.architectures import LLAMA_3_2_1B
from tests.e2e import real_cluster, status_schema

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

T = TypeVar("T")


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


#: How long a test waits for the operator to reach a state. Generous on purpose: the machines
#: that run this suite are shared and loaded (2 cores, several test runs at once), and a wait
#: returns as soon as its condition holds, so a long deadline costs nothing when all is well.
PATIENCE = 120.0


async def eventually(
    fn: Callable[[], Awaitable[T | None]], timeout: float = PATIENCE, what: str = "condition"
) -> T:
    """Poll ``fn`` every 0.1 s until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await fn()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


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

    def __init__(self, cluster: LoopbackCluster, log: Path, args: list[str]) -> None:
        env = dict(os.environ)
        env["KUBECONFIG"] = cluster.kubeconfig
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
            *getattr(cluster, "operator_scope", ["-A"]),  # real cluster: the test's namespace
            "--standalone",
            "--metrics-port",
            "0",
            "--health-port",
            "0",
            "--no-webhook",
            "--unschedulable-timeout",
            "1.5",
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


@pytest.fixture
async def cluster() -> AsyncIterator[LoopbackCluster]:
    kubeconfig = real_cluster.kubeconfig_from_env()
    if kubeconfig is not None:  # GPU_SIZER_E2E_KUBECONFIG: a real cluster (real_cluster.py)
        mode = real_cluster.operator_mode_from_env()
        async with real_cluster.RealCluster(kubeconfig, NS, mode) as real:
            yield real
            _check_statuses(real.written_statuses)
        return
    async with LoopbackCluster() as c:
        await c.create(CRDS, crd_document())
        await c.create(CRDS, record_crd_document())
        await c.create(NODES, gpu_node("l4-1", "NVIDIA-L4", 23034))
        await c.create(NODES, gpu_node("a100-1", "NVIDIA-A100-SXM4-80GB", 81920))
        yield c
        written = [
            _plain(version.get("status"))
            for (resource, _ns, _name), obj in list(c.emulator.objects.items())
            if getattr(resource, "plural", None) == "gpuworkloads"
            for version in obj.history
            if version is not None and version.get("status")
        ]
        _check_statuses(written)


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


class Kubelet:
    """Plays the scheduler, kubelet and Job controller for measurement Jobs."""

    def __init__(self, cluster: LoopbackCluster) -> None:
        self.c = cluster

    async def jobs(self, namespace: str = NS) -> list[dict[str, Any]]:
        return await self.c.list(JOBS, namespace, {"app.kubernetes.io/managed-by": "gpu-sizer"})

    async def wait_job(
        self, namespace: str = NS, *, not_named: set[str] | None = None, timeout: float = PATIENCE
    ) -> dict[str, Any]:
        async def find() -> dict[str, Any] | None:
            for job in await self.jobs(namespace):
                if not not_named or job["metadata"]["name"] not in not_named:
                    return job
            return None

        return await eventually(find, timeout, "a measurement Job")

    async def _pod(
        self, job: dict[str, Any], status: dict[str, Any], node: str | None
    ) -> dict[str, Any]:
        meta = job["metadata"]
        tmpl = job["spec"]["template"]
        name = f"{meta['name']}-x{int(time.monotonic() * 1000) % 100000}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {
                    **tmpl["metadata"]["labels"],
                    "batch.kubernetes.io/job-name": meta["name"],
                    "batch.kubernetes.io/controller-uid": meta.get("uid", ""),
                },
                "annotations": dict(tmpl["metadata"].get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta.get("uid", ""),
                        "controller": True,
                    }
                ],
            },
            "spec": {**tmpl["spec"], **({"nodeName": node} if node else {})},
            "status": status,
        }
        return await self.c.create(PODS, pod)

    async def succeed(
        self,
        job: dict[str, Any],
        message: str,
        node: str = "a100-1",
        exit_code: int = 0,
        job_status: bool = True,
    ) -> None:
        """The pod ran and terminated with ``message`` in its termination message."""
        term = {
            "exitCode": exit_code,
            "reason": "Completed" if exit_code == 0 else "Error",
            "message": message,
        }
        await self._pod(
            job,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": [{"name": "probe", "state": {"terminated": term}}],
            },
            node,
        )
        if not job_status:  # the Job is gone; only its pod reports late
            return
        cond = "Complete" if exit_code == 0 else "Failed"
        await self.job_condition(
            job, cond, "Completed" if exit_code == 0 else "BackoffLimitExceeded"
        )

    async def job_condition(
        self, job: dict[str, Any], type_: str, reason: str, message: str = ""
    ) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        condition = {
            "type": type_,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        try:
            await self.c.patch(
                JOBS,
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                {"status": {"conditions": [condition]}},
                subresource="status",
            )
        except ApiStatus as exc:
            # The operator may act on the pod's final state before the Job controller writes
            # the Job's condition, and delete the Job (an OOM moved to a larger class, an
            # evicted pod retried): the Job controller then finds it gone, as here.
            if exc.status != 404:
                raise

    async def running(self, job: dict[str, Any], node: str = "a100-1") -> None:
        await self._pod(
            job,
            {
                "phase": "Running",
                "containerStatuses": [{"name": "probe", "state": {"running": {}}}],
            },
            node,
        )

    async def unschedulable(self, job: dict[str, Any], since: str) -> None:
        await self._pod(
            job,
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 node(s) didn't match "
                        "Pod's node affinity/selector.",
                        "lastTransitionTime": since,
                    }
                ],
            },
            None,
        )

    async def image_pull_failure(self, job: dict[str, Any]) -> None:
        await self._pod(
            job,
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "probe",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": 'Back-off pulling image "nope:1"',
                            }
                        },
                    }
                ],
            },
            "a100-1",
        )

    async def oom_killed(self, job: dict[str, Any]) -> None:
        term = {"exitCode": 137, "reason": "OOMKilled"}
        await self._pod(
            job,
            {
                "phase": "Failed",
                "containerStatuses": [{"name": "probe", "state": {"terminated": term}}],
            },
            "a100-1",
        )
        await self.job_condition(job, "Failed", "BackoffLimitExceeded")

    async def evicted(self, job: dict[str, Any]) -> None:
        await self._pod(
            job,
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory.",
            },
            "a100-1",
        )
        await self.job_condition(job, "Failed", "BackoffLimitExceeded")


@pytest.fixture
def kubelet(cluster: LoopbackCluster) -> Kubelet:
    return Kubelet(cluster)


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
