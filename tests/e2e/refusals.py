"""Status writes the API server refuses, on either backend: what a test needs when the operator's
write must not land (a crash between a Job's creation and its status, a retry pending) without
injecting a server error.

- On a real API server: a ``ValidatingAdmissionPolicy`` (``admissionregistration.k8s.io/v1``,
  GA since Kubernetes 1.30) whose CEL rule is ``false`` for UPDATEs of ``gpuworkloads/status``,
  bound to the test's namespaces: every status write is answered 422 with the policy's message,
  nothing stored, the way a cluster's own policy refuses a write. The refusals are counted from
  the API server's audit log (the operator's requests: kopf's user agent).
- On the emulator: :class:`~tests.e2e.faults.Faults` answers them 500, nothing stored.

Either way the operator sees a write that did not land and retries it with backoff; the tests
assert what it does meanwhile, not which status code it got.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.envtest import AuditTail
from tests.e2e.faults import Faults
from tests.e2e.real_cluster import ApiStatus, RealCluster
from tests.e2e.waiting import eventually

__all__ = ["StatusWritesRefused"]

GW = ("gpusizer.dev", "v1alpha1", "gpuworkloads")
POLICIES = ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies")
BINDINGS = ("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings")
POLICY = "gpu-sizer-e2e-refuse-status"
MESSAGE = "status writes refused by the test's ValidatingAdmissionPolicy"
#: The operator's requests, as kopf's session names itself (kopf _cogs/clients/auth.py).
OPERATOR_AGENT = "kopf/"


class StatusWritesRefused:
    """Refuse the operator's GPUWorkload status writes from :meth:`start` to :meth:`stop`;
    :attr:`refused` counts the refusals so far."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self._faults: Faults | None = None
        self._audit: AuditTail | None = None
        self._refused = 0

    @property
    def real(self) -> bool:
        return isinstance(self.cluster, RealCluster)

    @property
    def refused(self) -> int:
        """Status writes of the operator refused so far."""
        if self._faults is not None:
            return int(self._faults.injected["500 patch gpuworkloads"])
        assert self._audit is not None
        namespaces = self._namespaces()
        for event in self._audit.events():
            ref = event.get("objectRef") or {}
            if (
                ref.get("resource") == "gpuworkloads"
                and ref.get("subresource") == "status"
                and ref.get("namespace") in namespaces
                and str(event.get("userAgent") or "").startswith(OPERATOR_AGENT)
                and (event.get("responseStatus") or {}).get("code") == 422
                and event.get("stage") == "ResponseComplete"
            ):
                self._refused += 1
        return self._refused

    def _namespaces(self) -> list[str]:
        return [self.cluster.real_namespace(self.cluster.logical_namespace)]

    async def start(self) -> StatusWritesRefused:
        """Refuse from now on; on a real API server, once the policy is in force (a dry-run
        status write of one of the test's workloads is refused)."""
        if not self.real:
            self._faults = Faults(patch_error=1.0, resources={"gpuworkloads"}, status_only=True)
            self.cluster.emulator.faults = self._faults
            return self
        self._audit = AuditTail(self.cluster.plane.audit_log)
        await self.cluster.create(
            POLICIES,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": POLICY},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {
                        "resourceRules": [
                            {
                                "apiGroups": [GW[0]],
                                "apiVersions": ["*"],
                                "operations": ["UPDATE"],
                                "resources": ["gpuworkloads/status"],
                            }
                        ]
                    },
                    "validations": [{"expression": "false", "message": MESSAGE}],
                },
            },
        )
        await self.cluster.create(
            BINDINGS,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": POLICY},
                "spec": {
                    "policyName": POLICY,
                    "validationActions": ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/metadata.name",
                                    "operator": "In",
                                    "values": self._namespaces(),
                                }
                            ]
                        }
                    },
                },
            },
        )
        await eventually(lambda: self._in_force(True), what="the refusing policy in force")
        return self

    async def stop(self) -> None:
        """Let status writes land again (on a real API server, once the policy is gone)."""
        if self._faults is not None:
            self._faults.enabled = False
            return
        await self.cluster.delete(BINDINGS, None, POLICY)
        await self.cluster.delete(POLICIES, None, POLICY)
        await eventually(lambda: self._in_force(False), what="the refusing policy gone")

    async def _in_force(self, wanted: bool) -> bool:
        workloads = await self.cluster.list(GW, self.cluster.logical_namespace)
        assert workloads, "create a GPUWorkload in the test's namespace first"
        name = workloads[0]["metadata"]["name"]
        path = f"/apis/{GW[0]}/{GW[1]}/namespaces/{self.cluster.namespace}/{GW[2]}/{name}/status"
        try:
            await self.cluster.request("PATCH", path, {"status": {}}, params={"dryRun": "All"})
        except ApiStatus as exc:
            if exc.status == 422 and MESSAGE in exc.text:
                return wanted
            raise
        return not wanted
