"""Fixtures of the install tests: gpu-sizer installed with Helm on a control plane of its own.

The install is a cluster of its own, not the session's shared ``control_plane``: its operator
serves every namespace and its webhooks (``failurePolicy: Fail``) judge every GPUWorkload and
every labelled pod outside ``gpu-sizer`` and ``kube-system``, as on a real cluster, so other
tests' objects must not meet them. It is started once per test session (per pytest-xdist worker)
from ``KUBEBUILDER_ASSETS`` and stopped by PID at the end; without the variable these tests skip
saying how to get the binaries.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from gpu_sizer_testbed import controlplane
from gpu_sizer_testbed.controlplane import ControlPlane, ControlPlaneError

from tests.conftest import kubectl_binary

from .harness import Install, eventually, gpu_node, installed

pytest.importorskip("helm_python")

#: Namespaces with this label get the platform's strict rule: Incomplete estimates are denied
#: and labelled pods are enforced (denied when their GPUWorkload is not Ready).
STRICT = {"gpusizer.dev/policy": "strict"}
#: The chart values beyond the out-of-cluster ones: a namespace rule, as a platform team sets it.
POLICY = {
    "namespaceRules": [
        {
            "namespaceSelector": {"matchLabels": STRICT},
            "incompleteEstimates": "Deny",
            "podEnforcement": "Enforce",
        }
    ]
}

#: The GPU nodes of the install's cluster (GFD labels): the classes the examples are sized for.
NODES = (
    ("l4-1", "NVIDIA-L4", 23034),
    ("a100-80-1", "NVIDIA-A100-SXM4-80GB", 81920),
    ("h100-1", "NVIDIA-H100-80GB-HBM3", 81559),
)


@pytest.fixture(scope="session")
def install_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    try:
        assets = controlplane.assets_from_env()
    except ControlPlaneError as exc:
        pytest.fail(str(exc), pytrace=False)
    if assets is None:
        pytest.skip(f"needs a real control plane: {controlplane.HOW_TO_GET}")
    with controlplane.started(assets, tmp_path_factory.mktemp("install-plane")) as plane:
        yield plane


@pytest.fixture(scope="session")
def install(
    install_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Install]:
    """The chart installed with Helm, its operator running under the chart's ServiceAccount."""
    binary = kubectl_binary()
    workdir = tmp_path_factory.mktemp("install")
    with installed(install_plane, binary, workdir, policy=POLICY) as inst:
        for name, product, mib in NODES:
            inst.admin.apply(gpu_node(name, product, mib))
            # The API server taints a new Node not-ready (TaintNodesByCondition); the node
            # lifecycle controller lifts it once the kubelet reports Ready. Neither runs here.
            inst.admin("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-")
        # Started: the operator's watches deliver (it has seen every node).
        for name, product, _ in NODES:
            eventually(
                lambda n=name, p=product: inst.operator.logged(f"GPU node {n}: 8 x "),
                what=f"the operator's inventory of node {name} ({product})",
            )
        # ... and its webhook server listens: it starts its verdict workers first, which on a
        # loaded machine can come after the inventory.
        eventually(
            lambda: inst.operator.logged("Admission webhooks listening"),
            what="the operator's admission webhook server",
        )
        inst.startup_log = inst.operator.log.read_text(errors="replace")
        yield inst


def _namespace(install: Install, labels: dict[str, str]) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:6]}"
    install.admin.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    yield name
    install.admin("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(install: Install) -> Iterator[str]:
    """A fresh namespace under the default policy (deleted after the test, with its objects)."""
    yield from _namespace(install, {})


@pytest.fixture
def strict_namespace(install: Install) -> Iterator[str]:
    """A fresh namespace that the platform's strict rule matches (:data:`STRICT`)."""
    yield from _namespace(install, STRICT)


@pytest.fixture(autouse=True)
def _operator_permitted_and_quiet(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test that uses the install fails when, during it, the operator got a 403 (a verb
    the chart does not grant and the operator needs) or logged an ERROR (nothing these tests do
    is an operator fault: denials, throttling and retries are not errors)."""
    if "install" not in request.fixturenames:
        yield
        return
    inst: Install = request.getfixturevalue("install")
    started = time.time() - 1
    logged = len(inst.operator.log.read_bytes()) if inst.operator.log.exists() else 0
    yield
    forbidden = inst.forbidden(since=started)
    assert not forbidden, f"the chart's RBAC refused the operator: {forbidden}"
    new = inst.operator.log.read_bytes()[logged:].decode(errors="replace").splitlines()
    errors = [line for line in new if " ERROR " in line]
    assert not errors, f"the operator logged errors: {errors}"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    rep = yield
    if rep.when == "call" and rep.failed and "install" in getattr(item, "fixturenames", ()):
        inst = item.funcargs.get("install")  # type: ignore[attr-defined]
        if isinstance(inst, Install):
            rep.sections.append(("operator log (tail)", inst.operator.tail(120)))
    return rep
