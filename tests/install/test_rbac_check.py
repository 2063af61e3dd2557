"""The install tests' RBAC check counts what the authorizer refused, and nothing else.

Every install test fails when the operator got a refusal the chart's RBAC caused
(``conftest._operator_permitted_and_quiet``). An HTTP 403 alone is not one: the API server's
NamespaceLifecycle admission plugin answers 403 to anything created in a namespace being deleted,
which an operator posting an Event races with whenever a test deletes its namespace. Here a
ServiceAccount of its own makes one request of each kind on the real control plane.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from gpu_sizer_testbed.controlplane import ControlPlane

from tests.conftest import Kubectl

from .harness import NAMESPACE, eventually, refused_by_rbac, service_account_kubeconfig


def test_a_refusal_by_rbac_counts_and_a_terminating_namespace_does_not(
    control_plane: ControlPlane, kubectl: Kubectl, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    witness, doomed = f"rbac-witness-{suffix}", f"doomed-{suffix}"
    kubectl("create", "namespace", NAMESPACE, check=False)
    kubectl("create", "serviceaccount", witness, "-n", NAMESPACE)
    username = f"system:serviceaccount:{NAMESPACE}:{witness}"
    kubectl("create", "namespace", doomed)
    kubectl("create", "role", "events", "--verb=create", "--resource=events", "-n", doomed)
    binding = f"--serviceaccount={NAMESPACE}:{witness}"
    kubectl("create", "rolebinding", "events", "--role=events", binding, "-n", doomed)
    # A finalizer keeps the namespace Terminating until the test lets it go.
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "held", "namespace": doomed, "finalizers": ["example.com/hold"]},
        }
    )
    config = tmp_path / "witness.kubeconfig"
    as_witness = Kubectl(
        kubectl.binary, service_account_kubeconfig(kubectl, control_plane, witness, config)
    )
    since = time.time() - 1
    try:
        refused = as_witness("get", "secrets", "-n", "kube-system", check=False)
        assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
        kubectl("delete", "namespace", doomed, "--wait=false")
        eventually(
            lambda: kubectl.json("namespace", doomed)["status"]["phase"] == "Terminating",
            what=f"namespace {doomed} Terminating",
        )
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"late.{suffix}", "namespace": doomed},
            "involvedObject": {"kind": "ConfigMap", "name": "held", "namespace": doomed},
            "reason": "Late",
            "message": "posted while the namespace is deleted",
        }
        late = as_witness("create", "-f", "-", input=json.dumps(event), check=False)
        assert late.returncode != 0 and "being terminated" in late.stderr, late.stderr

        def both_audited() -> list[str] | None:
            codes = [
                (
                    str(e.get("requestURI")).partition("?")[0],
                    (e.get("responseStatus") or {}).get("code"),
                )
                for e in control_plane.audit_events(username)
            ]
            wanted = {
                "/api/v1/namespaces/kube-system/secrets",
                f"/api/v1/namespaces/{doomed}/events",
            }
            seen = {uri for uri, code in codes if code == 403}
            return refused_by_rbac(control_plane, username, since) if wanted <= seen else None

        found = eventually(both_audited, what="both 403s in the audit log")
        assert [line.partition("?")[0] for line in found] == [
            "list /api/v1/namespaces/kube-system/secrets"
        ]
    finally:
        kubectl("patch", "configmap", "held", "-n", doomed, "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
        kubectl("delete", "serviceaccount", witness, "-n", NAMESPACE, check=False)
