"""The operator image the chart names, run as the chart's Deployment runs it, against a real
control plane (``control_plane``: envtest's kube-apiserver, etcd, controller manager, scheduler).

This test plays the kubelet for the Deployment's one pod: the chart is rendered with its default
values, its ServiceAccount, RBAC and ConfigMap are applied, and the pod's container is started
from the image the Deployment names with the Deployment's command, arguments, environment
(``fieldRef``s resolved), user and read-only root filesystem, its ConfigMap volume as files, its
``emptyDir`` at ``/tmp`` and the service account's projected token where a pod has it
(``/var/run/secrets/kubernetes.io/serviceaccount``), so the operator logs in as in a pod (the
in-cluster configuration, ``KUBERNETES_SERVICE_HOST``). ``buildah run`` shares the host's
network, which is how the container reaches the API server on 127.0.0.1. Three changes, each
because of what this bed lacks: ``--no-webhook`` (the chart's webhooks are called through a
Service, and nothing routes Service IPs here), and the metrics and health ports moved to free
ones (the host's network is shared with other processes).

Then one example is applied as a user applies it and must settle where ``gpu-sizer estimate``
says: ``llama-3-8b-too-big-for-l4.yaml`` is Rejected (Stalled), ``llama-3-8b-vllm-bf16.yaml`` with
``spec.measurement.mode: Disabled`` (no GPU node runs a measurement here) is Ready on nvidia-l4.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_sizer_testbed.controlplane import ControlPlane

from gpu_sizer import __version__
from tests.conftest import Kubectl
from tests.images.buildah import Container, Store, Volume, run_leftovers

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-sizer"
RELEASE, NAMESPACE = "gs", "gpu-sizer"
#: What a kubelet does for the pod is done here; the rest of the chart is not applied.
APPLIED_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                 "ConfigMap"}  # fmt: skip
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
#: Generous: a loaded 2-core machine starts the operator (kopf, kubernetes client) in 10-60 s.
PATIENCE = 240.0


def render_chart() -> list[dict[str, Any]]:
    helm = pytest.importorskip("helm_python")
    with helm.Chart.load(CHART) as chart:
        rendered: dict[str, str] = chart.render(
            {}, name=RELEASE, namespace=NAMESPACE, is_install=True
        )
    return [
        doc
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def eventually(check: Callable[[], Any], what: str, pod: Pod, timeout: float = PATIENCE) -> Any:
    """Poll ``check`` every half second until it returns something truthy; fail at once when
    the operator's process has ended."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        ended = pod.proc is not None and pod.proc.poll() is not None
        if ended or time.monotonic() > deadline:
            why = "the operator exited" if ended else f"timed out after {timeout:.0f} s"
            pytest.fail(f"{why} waiting for {what}; operator log:\n{pod.tail()}")
        time.sleep(0.5)


def healthy(port: int) -> bool:
    url = f"http://127.0.0.1:{port}/healthz"
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
        return bool(resp.status == 200)
    return False


class Pod:
    """The Deployment's pod, its container run from the image as a kubelet would."""

    def __init__(
        self,
        deployment: dict[str, Any],
        container: Container,
        plane: ControlPlane,
        kubectl: Kubectl,
        folder: Path,
    ) -> None:
        template = deployment["spec"]["template"]
        spec = template["spec"]
        self.spec = spec
        (self.main,) = spec["containers"]
        self.container = container
        self.folder = folder
        self.log = folder / "operator.log"
        self.metrics_port, self.health_port = free_port(), free_port()
        name = f"{deployment['metadata']['name']}-0"
        account = spec["serviceAccountName"]
        token = kubectl("create", "token", account, "-n", NAMESPACE, "--duration=2h").stdout
        self.env = {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(plane.port),
        }
        fields = {"metadata.namespace": NAMESPACE, "metadata.name": name}
        for var in self.main.get("env", []):
            if "value" in var:
                self.env[var["name"]] = var["value"]
            else:
                self.env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        self.volumes = [
            self._secret_dir(
                "serviceaccount",
                {"token": token, "ca.crt": plane.ca_cert.read_text(), "namespace": NAMESPACE},
                SA_PATH,
            )
        ]
        sources = {v["name"]: v for v in spec["volumes"]}
        for mount in self.main["volumeMounts"]:
            source = sources[mount["name"]]
            if "configMap" in source:
                got = kubectl("get", "configmap", source["configMap"]["name"], "-n", NAMESPACE,
                              "-o", "json")  # fmt: skip
                data = json.loads(got.stdout).get("data", {})
                self.volumes.append(self._secret_dir(mount["name"], data, mount["mountPath"]))
            elif "emptyDir" in source:
                empty = folder / mount["name"]
                empty.mkdir()
                empty.chmod(0o1777)
                self.volumes.append(Volume(empty, mount["mountPath"]))
            else:
                raise AssertionError(f"a volume of the chart's pod this test cannot play: {source}")
        context = {**spec.get("securityContext", {}), **self.main.get("securityContext", {})}
        self.user = f"{context['runAsUser']}:{context['runAsGroup']}"
        self.read_only = bool(context.get("readOnlyRootFilesystem"))
        self.argv = [
            *self.main["command"],
            *self.main["args"],
            "--no-webhook",
            f"--metrics-port={self.metrics_port}",
            f"--health-port={self.health_port}",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def _secret_dir(self, name: str, files: dict[str, str], path: str) -> Volume:
        folder = self.folder / name
        folder.mkdir()
        folder.chmod(0o755)
        for key, text in files.items():
            (folder / key).write_text(text)
            (folder / key).chmod(0o644)
        return Volume(folder, path, read_only=True)

    def start(self) -> None:
        argv = self.container.command(
            self.argv,
            env=self.env,
            volumes=self.volumes,
            user=self.user,
            read_only_root=self.read_only,
        )
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the process group this test started, SIGKILL after a grace period."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


@pytest.fixture(scope="module")
def installed(kubectl: Kubectl) -> list[dict[str, Any]]:
    """The CRDs and what the chart grants the operator, applied; the rendered chart."""
    kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
    kubectl.wait_established("gpuworkloads.gpusizer.dev", "gpumeasurements.gpusizer.dev")
    for namespace in (NAMESPACE, "inference"):
        kubectl("create", "namespace", namespace, check=False)
    docs = render_chart()
    chosen = [d for d in docs if d["kind"] in APPLIED_KINDS]
    kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump_all(chosen))
    return docs


@pytest.fixture(scope="module")
def pod(
    installed: list[dict[str, Any]],
    store: Store,
    operator_image: str,
    control_plane: ControlPlane,
    kubectl: Kubectl,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pod]:
    (deployment,) = [d for d in installed if d["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == operator_image, "the image built is not the one the chart deploys"
    assert image.endswith(f":{__version__}")
    with store.container(image) as container:
        pod = Pod(deployment, container, control_plane, kubectl, tmp_path_factory.mktemp("pod"))
        # After the mount points (the runtime's, not the operator's writes) are made.
        container.command(pod.argv, volumes=pod.volumes)
        before = container.run_entries()
        pod.start()
        try:
            eventually(lambda: healthy(pod.health_port), "/healthz (the readiness probe)", pod)
            yield pod
        finally:
            pod.stop()
            assert run_leftovers(before, container) == []


def workload(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any] | None:
    got = kubectl("get", "gpuworkload", name, "-n", namespace, "-o", "json", check=False)
    return json.loads(got.stdout) if got.returncode == 0 else None


def settled(kubectl: Kubectl, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    """The workload once its status is for its current generation and in ``phase``."""
    obj = workload(kubectl, namespace, name)
    if not obj:
        return None
    status = obj.get("status") or {}
    ready = {c["type"]: c for c in status.get("conditions", [])}.get("Ready")
    current = ready is not None and ready.get("observedGeneration") == obj["metadata"]["generation"]
    return obj if current and status.get("phase") == phase else None


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def test_an_example_with_no_headroom_is_rejected(pod: Pod, kubectl: Kubectl) -> None:
    kubectl("apply", "-f", str(ROOT / "examples" / "llama-3-8b-too-big-for-l4.yaml"))
    obj = eventually(
        lambda: settled(kubectl, "inference", "llama-3-8b-on-l4", "Rejected"),
        "llama-3-8b-on-l4 to be Rejected",
        pod,
    )
    found = conditions(obj)
    assert found["Stalled"] == ("True", "NoSafeHeadroom"), found
    assert found["Ready"][0] == "False"


def test_an_example_is_ready_on_its_estimate(
    pod: Pod, kubectl: Kubectl, control_plane: ControlPlane
) -> None:
    doc = yaml.safe_load((ROOT / "examples" / "llama-3-8b-vllm-bf16.yaml").read_text())
    doc["spec"].setdefault("measurement", {})["mode"] = "Disabled"
    kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    name = doc["metadata"]["name"]
    obj = eventually(
        lambda: settled(kubectl, "inference", name, "Ready"), f"{name} to be Ready", pod
    )
    found = conditions(obj)
    assert found["Ready"] == ("True", "EstimateOnly"), found
    assert obj["status"]["recommendation"]["gpuClass"] == "nvidia-l4"
    # It was the chart's service account that wrote it, not an admin.
    account = f"system:serviceaccount:{NAMESPACE}:{pod.spec['serviceAccountName']}"
    writes = [
        e
        for e in control_plane.audit_events(account)
        if (e.get("objectRef") or {}).get("name") == name and e.get("verb") in ("patch", "update")
    ]
    assert writes, f"no write of {name} by {account} in the API server's audit log"
    text = pod.log.read_text(errors="replace")
    assert "Read-only file system" not in text and "Traceback" not in text, text[-4000:]
