"""gpu-sizer installed as a platform team installs it, on a real control plane.

* The chart is installed by Helm's own Go SDK (helm-python-sdk's ``Config.install``: CRDs from
  ``crds/`` first, then the templates in Helm's kind order, into a release namespace it creates),
  with the values of an operator run outside the cluster: ``replicaCount: 0`` (no kubelet would
  run the pod anyway) and ``webhook.url: https://127.0.0.1:PORT``, so that both webhook
  configurations are registered as rendered (rules, selectors, matchConditions, failurePolicy,
  timeouts) with a ``url`` client config, and the operator's self-signed mode writes their
  caBundle itself.
* The operator is ``gpu-sizer operator`` from this tree, started with the rendered Deployment's
  own command line and environment (:func:`operator_command`), under a token of the chart's
  ServiceAccount from the TokenRequest API (``kubectl create token``): RBAC is the API server's,
  never the admin's.
* A test plays only what this control plane lacks: GPU Feature Discovery's node labels (Nodes are
  objects the admin creates) and the kubelet (:func:`kubelet_finishes`: pod status written through
  the ``status`` subresource once the real scheduler bound the pod; the real Job controller owns
  the Job's status).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from gpu_sizer_testbed.controlplane import ControlPlane

from gpu_sizer.measurement.result import NvmlInfo, ProbeResult
from tests.conftest import Kubectl

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-sizer"
#: ``helm install gpu-sizer ./charts/gpu-sizer --namespace gpu-sizer --create-namespace``, as the
#: chart README says; the object-name prefix is then ``gpu-sizer``.
RELEASE = "gpu-sizer"
NAMESPACE = "gpu-sizer"
GIB = 1 << 30
#: Seconds a wait may take. Generous: the machines are shared and loaded; a wait returns as soon
#: as its condition holds.
PATIENCE = 180.0

T = TypeVar("T")
Manifest = dict[str, Any]


def eventually(fn: Callable[[], T | None], timeout: float = PATIENCE, what: str = "it") -> T:
    """Poll ``fn`` every 0.2 s until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------- Helm


def values_out_of_cluster(webhook_port: int, **extra: Any) -> dict[str, Any]:
    """The chart values for an operator run outside the cluster on this machine."""
    values: dict[str, Any] = {
        "replicaCount": 0,
        "webhook": {"url": f"https://127.0.0.1:{webhook_port}", "port": webhook_port},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values


def helm_install(
    kubeconfig: Path,
    values: Mapping[str, Any],
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[Manifest]:
    """``helm install RELEASE charts/gpu-sizer -n NAMESPACE --create-namespace``, by Helm's Go
    SDK; returns the objects of the release's manifest (what Helm applied, CRDs aside)."""
    import helm_python as helm

    with (
        helm.Chart.load(CHART) as chart,
        helm.Config(kubeconfig_path=str(kubeconfig), namespace=namespace) as config,
    ):
        answer = config.install(
            chart, release, dict(values), namespace=namespace, create_namespace=True, timeout=120
        )
    return [doc for doc in yaml.safe_load_all(answer["manifest"]) if doc]


def helm_upgrade(
    kubeconfig: Path,
    values: Mapping[str, Any],
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> list[Manifest]:
    """``helm upgrade RELEASE charts/gpu-sizer -n NAMESPACE --reset-values`` with ``values``."""
    import helm_python as helm

    with (
        helm.Chart.load(CHART) as chart,
        helm.Config(kubeconfig_path=str(kubeconfig), namespace=namespace) as config,
    ):
        answer = config.upgrade(
            chart, release, dict(values), namespace=namespace, reset_values=True, timeout=120
        )
    return [doc for doc in yaml.safe_load_all(answer["manifest"]) if doc]


def one(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [
        m
        for m in manifests
        if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


# --------------------------------------------------------------------------------- operator


def operator_command(
    deployment: Manifest,
    config_files: Mapping[str, str],
    workdir: Path,
    *,
    kubeconfig: Path,
    health_port: int,
    pod_name: str = "gpu-sizer-out-of-cluster",
) -> tuple[list[str], dict[str, str]]:
    """The rendered Deployment's container command and environment, for a process on this
    machine: the same flags, except that

    * files under a mounted ConfigMap (``--catalog``, ``--policy``) are written under
      ``workdir`` from ``config_files`` (the ConfigMap's data) and named there;
    * ``--webhook-listen`` is 127.0.0.1 (``webhook.url`` names that address), ``--metrics-port``
      0 (off) and ``--health-port`` ``health_port``;
    * the downward-API variables get the release namespace and ``pod_name``, ``TMPDIR`` a
      folder of ``workdir``, and ``KUBECONFIG`` the ServiceAccount token's kubeconfig.
    """
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {
        m["mountPath"].rstrip("/") + "/": m["name"]
        for m in container.get("volumeMounts") or []
        if any(v["name"] == m["name"] and "configMap" in v for v in pod.get("volumes") or [])
    }
    config_dir = workdir / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    for key, text in config_files.items():
        (config_dir / key).write_text(text)

    def local(arg: str) -> str:
        flag, sep, value = arg.partition("=")
        for mount in mounts:
            if sep and value.startswith(mount):
                return f"{flag}={config_dir / value.removeprefix(mount)}"
        if flag == "--webhook-listen":
            return f"{flag}=127.0.0.1"
        if flag == "--metrics-port":
            return f"{flag}=0"
        if flag == "--health-port":
            return f"{flag}={health_port}"
        return arg

    assert container["command"] == ["gpu-sizer"], container["command"]
    argv = [sys.executable, "-m", "gpu_sizer.cli", *(local(a) for a in container["args"])]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_SIZER_", "KUBE"))}
    field_values = {
        "metadata.namespace": deployment["metadata"]["namespace"],
        "metadata.name": pod_name,
    }
    tmp = workdir / "tmp"
    tmp.mkdir(exist_ok=True)
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
        else:
            env[var["name"]] = field_values[var["valueFrom"]["fieldRef"]["fieldPath"]]
    env["TMPDIR"] = str(tmp)
    env["KUBECONFIG"] = str(kubeconfig)
    env["PYTHONPATH"] = str(ROOT / "operator") + os.pathsep + env.get("PYTHONPATH", "")
    return argv, env


class OperatorProcess:
    """``gpu-sizer operator`` as a subprocess; its log goes to a file (printed on failure)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, health_port: int) -> None:
        self.argv, self.env, self.log, self.health_port = argv, env, log, health_port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )

    def healthy(self) -> bool:
        """kopf's ``/healthz`` answers 200 (the chart's liveness and readiness probe)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"the operator exited {self.proc.returncode}:\n{self.tail()}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/healthz", timeout=5
            ) as r:
                return int(r.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)

    def tail(self, lines: int = 80) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def logged(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")


@dataclass
class Install:
    """The release on the control plane, and the operator serving it."""

    plane: ControlPlane
    admin: Kubectl
    #: kubectl under the chart's ServiceAccount token (what the operator runs with).
    as_operator: Kubectl
    #: The chart values installed (out-of-cluster ones included).
    values: dict[str, Any]
    manifests: list[Manifest]
    webhook_port: int
    operator: OperatorProcess
    workdir: Path
    namespace: str = NAMESPACE
    #: The operator's log from its start until its watches delivered (the fixture fills it).
    startup_log: str = ""

    @property
    def service_account(self) -> str:
        name: str = one(self.manifests, "ServiceAccount")["metadata"]["name"]
        return name

    @property
    def username(self) -> str:
        """The ServiceAccount's user name in the audit log and in RBAC."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    def forbidden(self, since: float = 0.0) -> list[str]:
        """Requests the operator made that RBAC refused, as ``verb path`` lines.

        The authorizer's decision in the audit event's annotations, not the HTTP 403: an
        admission plugin answers 403 too, such as NamespaceLifecycle refusing an Event posted
        into a namespace being deleted (``reason: NamespaceTerminating``, decision ``allow``),
        which a test's own namespace teardown races with and no grant could avoid.
        """
        return refused_by_rbac(self.plane, self.username, since)

    def restart_operator(self) -> None:
        self.operator.stop()
        self.operator.start()
        eventually(self.operator.healthy, what="the restarted operator's /healthz")
        self.wait_for_webhook()

    def wait_for_webhook(self) -> None:
        """Wait until the webhook port takes connections, where the webhook is enabled. kopf
        answers ``/healthz`` once its startup handlers ran, and the webhook server starts beside
        it: on a busy machine a second or more later, when a write would be refused."""
        if not (self.values.get("webhook") or {}).get("enabled", True):
            return

        def listening() -> bool:
            proc = self.operator.proc
            if proc is not None and proc.poll() is not None:
                raise AssertionError(
                    f"the operator exited {proc.returncode}:\n{self.operator.tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.webhook_port), timeout=5):
                    return True
            except OSError:
                return False

        eventually(listening, what=f"the operator's webhook on port {self.webhook_port}")

    def upgrade(self, values: Mapping[str, Any]) -> None:
        """``helm upgrade`` the release to ``values`` (complete, as with ``--reset-values``) and
        restart the operator with the upgraded Deployment's command line, as a rollout would."""
        self.manifests = helm_upgrade(self.plane.admin_kubeconfig, values)
        self.values = dict(values)
        self.operator.stop()
        self.operator.argv, self.operator.env = self._command()
        self.operator.start()
        eventually(self.operator.healthy, what="the upgraded operator's /healthz")
        self.wait_for_webhook()

    def _command(self) -> tuple[list[str], dict[str, str]]:
        deployment = one(self.manifests, "Deployment")
        config_map = next(
            v["configMap"]["name"]
            for v in deployment["spec"]["template"]["spec"]["volumes"]
            if "configMap" in v
        )
        data = self.admin.json("configmap", config_map, "-n", self.namespace)["data"]
        return operator_command(
            deployment,
            data,
            self.workdir,
            kubeconfig=self.as_operator.kubeconfig,
            health_port=self.operator.health_port,
        )


def audit_time(event: Mapping[str, Any]) -> float:
    """When the API server received the audited request (seconds since the epoch)."""
    import datetime as dt

    stamp = str(event.get("requestReceivedTimestamp") or "")
    if not stamp:
        return 0.0
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def service_account_kubeconfig(
    install_admin: Kubectl, plane: ControlPlane, sa: str, path: Path
) -> Path:
    """A kubeconfig with a token of ``sa`` from the TokenRequest API (``kubectl create token``)."""
    token = install_admin(
        "create", "token", sa, "-n", NAMESPACE, "--duration", "24h"
    ).stdout.strip()
    return plane.kubeconfig_for_token(token, path)


@contextlib.contextmanager
def installed(plane: ControlPlane, kubectl: str, workdir: Path, **values: Any) -> Iterator[Install]:
    """Install the chart on ``plane`` (``values`` over the out-of-cluster ones) and run its
    operator; stop it on leaving."""
    admin = Kubectl(kubectl, plane.admin_kubeconfig)
    port = free_port()
    chosen = values_out_of_cluster(port, **values)
    manifests = helm_install(plane.admin_kubeconfig, chosen)
    sa = one(manifests, "ServiceAccount")["metadata"]["name"]
    token_config = service_account_kubeconfig(admin, plane, sa, workdir / "operator.kubeconfig")
    install = Install(
        plane=plane,
        admin=admin,
        as_operator=Kubectl(kubectl, token_config),
        values=chosen,
        manifests=manifests,
        webhook_port=port,
        operator=OperatorProcess([], {}, workdir / "operator.log", free_port()),
        workdir=workdir,
    )
    install.operator.argv, install.operator.env = install._command()
    install.operator.start()
    try:
        eventually(install.operator.healthy, what="the operator's /healthz")
        yield install
    finally:
        install.operator.stop()


# --------------------------------------------------------------------------- cluster pieces


def gpu_node(name: str, product: str, memory_mib: int, count: int = 8) -> Manifest:
    """A Node as GPU Feature Discovery and the NVIDIA device plugin leave it (labels, capacity)."""
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(count)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.memory": str(memory_mib),
                "nvidia.com/gpu.count": str(count),
            },
        },
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def probe_success(
    peak_bytes: int, *, device_name: str, total_bytes: int, spec_hash: str | None = None
) -> str:
    """The probe's report of a CUDA run that peaked at ``peak_bytes`` (NVML), built through the
    real result model, compact as the probe writes it to ``/dev/termination-log``."""
    return ProbeResult(
        status="Succeeded",
        mode="Synthetic",
        device="cuda",
        gpu_count=1,
        spec_hash=spec_hash,
        peak_allocated_bytes=peak_bytes - 2 * GIB,
        peak_reserved_bytes=peak_bytes - GIB,
        peak_device_used_bytes=peak_bytes,
        nvml=NvmlInfo(available=True, device_name=device_name, total_bytes=total_bytes),
        started_at=_now(),
        completed_at=_now(),
    ).model_dump_json(by_alias=True, exclude_none=True)


def kubelet_finishes(admin: Kubectl, namespace: str, job: str, message: str) -> Manifest:
    """Play the kubelet for the measurement Job's pod: once the real Job controller created it
    and the real scheduler bound it, write its status (Running then Succeeded, the probe's report
    as the termination message) through the ``status`` subresource. Returns the pod."""

    def bound() -> Manifest | None:
        # The workload's namespace, or the operator's own for a measurement other namespaces
        # may reuse (job names carry the workload name and spec hash: one such Job anywhere).
        pods = admin.json("pods", "-A", "-l", f"batch.kubernetes.io/job-name={job}")
        for pod in (pods or {}).get("items") or []:
            if pod["spec"].get("nodeName"):
                return dict(pod)
        return None

    pod = eventually(bound, what=f"a pod of Job {namespace}/{job} bound to a node")
    name = pod["metadata"]["name"]
    container = pod["spec"]["containers"][0]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        "phase": "Succeeded",
        "startTime": now,
        "hostIP": "10.0.0.10",
        "podIP": "10.244.0.10",
        "conditions": [
            {"type": t, "status": s, "lastTransitionTime": now}
            for t, s in (
                ("PodScheduled", "True"),
                ("Initialized", "True"),
                ("Ready", "False"),
                ("ContainersReady", "False"),
            )
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "containerID": f"containerd://{'0' * 64}",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "terminated": {
                        "exitCode": 0,
                        "reason": "Completed",
                        "message": message,
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
        ],
    }
    admin(
        "patch",
        "pod",
        name,
        "-n",
        pod["metadata"]["namespace"],
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    return pod


def refused_by_rbac(plane: ControlPlane, username: str, since: float = 0.0) -> list[str]:
    """``verb path`` of each request of ``username`` since ``since`` (seconds since the epoch)
    that the authorizer refused (:meth:`Install.forbidden`)."""
    return [
        f"{e.get('verb')} {e.get('requestURI')}"
        for e in plane.audit_events(username)
        if _annotations(e).get("authorization.k8s.io/decision") == "forbid"
        and audit_time(e) >= since
    ]


def _annotations(event: Mapping[str, object]) -> Mapping[str, object]:
    found = event.get("annotations")
    return found if isinstance(found, Mapping) else {}
