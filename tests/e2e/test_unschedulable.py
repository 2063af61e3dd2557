"""A measurement that cannot start ends on ``--unschedulable-timeout`` however that shows, not on
the Job's deadline (``timeoutSeconds`` + 30 s; 930 s by default): the scheduler's
``PodScheduled=False`` (test_endings.py), a Job whose pods are refused (no pod at all), and a
pod left unbound by a scheduler that does not run (no condition at all)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import (
    EVENTS,
    GW,
    NS,
    QUICK_UNSCHEDULABLE,
    SCHEDULING_GRACE,
    Kubelet,
    condition,
    eventually,
    real_namespace,
    spec,
    workload,
)
from tests.e2e.real_cluster import ApiStatus, RealCluster
from tests.e2e.test_lifecycle import phase_is

QUOTAS = ("", "v1", "resourcequotas")
MUTATING_POLICIES = ("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies")
MUTATING_BINDINGS = ("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings")
#: A secondary scheduler the pods are sent to (a cluster's GPU scheduler), which is not running.
SCHEDULER = "gpu-scheduler"


async def _kept_the_estimate(cluster: Any, kubelet: Kubelet, name: str, job: dict) -> dict:
    obj = await eventually(lambda: phase_is(cluster, name, "Estimated"), what="Estimated")
    measured = condition(obj, "Measured")
    # Nodes of the class exist (l4-1): this is not a missing class.
    assert measured["status"] == "False" and measured["reason"] == "Unschedulable", measured
    assert "nodes of class nvidia-l4 exist but none could run" in measured["message"]
    assert obj["status"]["recommendation"]["basis"] == "Estimate"
    assert condition(obj, "Stalled")["status"] == "True"

    async def deleted() -> bool:
        return all(j["metadata"]["name"] != job["metadata"]["name"] for j in await kubelet.jobs())

    await eventually(deleted, what="the Job deleted")
    return measured


async def test_a_job_whose_pods_are_refused_ends_on_the_unschedulable_timeout(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    """The namespace's ResourceQuota has no GPUs for it: the Job controller's pod creations are
    refused (its FailedCreate Events say so), the Job never gets a pod, and no scheduler ever
    sees one. On the emulator the Job gets no pod either: its Job controller makes none."""
    if isinstance(cluster, RealCluster):
        await cluster.create(
            QUOTAS,
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "no-gpus", "namespace": NS},
                "spec": {"hard": {"requests.nvidia.com/gpu": "0"}},
            },
        )

        async def counted() -> bool:
            found = await cluster.get(QUOTAS, NS, "no-gpus")
            return bool(((found or {}).get("status") or {}).get("used"))

        await eventually(counted, what="the quota's usage counted")
    await cluster.create(GW, workload("no-room", spec()))
    start_operator(*QUICK_UNSCHEDULABLE)
    job = await kubelet.wait_job()
    assert job["spec"]["activeDeadlineSeconds"] == 90  # what it waited for before
    measured = await _kept_the_estimate(cluster, kubelet, "no-room", job)
    assert "the Job has had no pod for" in measured["message"], measured
    if isinstance(cluster, RealCluster):
        refusals = [
            e
            for e in await cluster.list(EVENTS, NS)
            if e.get("reason") == "FailedCreate"
            and e["involvedObject"]["name"] == job["metadata"]["name"]
        ]
        assert refusals and "exceeded quota: no-gpus" in refusals[0]["message"], refusals


async def test_a_pod_no_scheduler_binds_ends_on_the_unschedulable_timeout(
    cluster, start_operator, kubelet: Kubelet
) -> None:
    """The namespace's pods go to a scheduler of their own (set by an admission policy, as a
    cluster with a GPU scheduler does), which is down: the pod stays unbound and carries no
    PodScheduled condition; the default scheduler leaves it alone."""
    if isinstance(cluster, RealCluster):
        # Named for the test's own namespace: the policy is cluster-scoped, and the suite's
        # real-cluster-mode run may hold one of its own on the same control plane.
        namespace = real_namespace(cluster)
        policy = f"{namespace}-scheduler"
        try:
            await cluster.create(MUTATING_POLICIES, _scheduler_policy(policy))
        except ApiStatus as exc:
            if exc.status != 404:
                raise
            pytest.skip("the cluster serves no admissionregistration.k8s.io/v1 admission policies")
        await cluster.create(MUTATING_BINDINGS, _scheduler_binding(policy, namespace))
        await eventually(lambda: _sent_to_the_gpu_scheduler(cluster), what="the policy in force")
    await cluster.create(GW, workload("unbound", spec()))
    # Time for the test (the emulator's Job controller) to create the pod before a Job without
    # one counts as unschedulable too.
    start_operator(*SCHEDULING_GRACE)
    job = await kubelet.wait_job()
    await kubelet.unbound(job, SCHEDULER)
    measured = await _kept_the_estimate(cluster, kubelet, "unbound", job)
    assert "not bound to a node for" in measured["message"], measured
    assert f"schedulerName {SCHEDULER}" in measured["message"], measured


def _scheduler_policy(name: str) -> dict[str, Any]:
    """Every pod created goes to :data:`SCHEDULER` (a MutatingAdmissionPolicy, Kubernetes 1.36:
    an apply configuration in CEL)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ]
            },
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [
                {
                    "patchType": "ApplyConfiguration",
                    "applyConfiguration": {
                        "expression": f'Object{{spec: Object.spec{{schedulerName: "{SCHEDULER}"}}}}'
                    },
                }
            ],
        },
    }


def _scheduler_binding(name: str, namespace: str) -> dict[str, Any]:
    """:func:`_scheduler_policy` for ``namespace`` only."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": [namespace],
                        }
                    ]
                }
            },
        },
    }


async def _sent_to_the_gpu_scheduler(cluster: RealCluster) -> bool:
    """A pod created now (a dry run) gets the policy's schedulerName."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe-policy", "namespace": cluster.namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    path = f"/api/v1/namespaces/{cluster.namespace}/pods"
    created = await cluster.request("POST", path, pod, params={"dryRun": "All"})
    return bool(created["spec"].get("schedulerName") == SCHEDULER)
