"""Metadata-only updates and updates of an object being deleted are never judged (issue 13,
item 1), through the real webhook server.

kopf adds and removes finalizers and writes annotations with main-resource updates; Argo CD and
Flux label the objects they track; the last finalizer's removal completes a deletion. Each is an
UPDATE whose spec is unchanged. Judged on the spec, a workload stored while the webhook was
bypassed (or admitted before the namespace policy was tightened) could never be labelled, and a
deleted one would stay Terminating.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .conftest import Webhook, admission_review, workload

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _rejected_spec() -> dict[str, Any]:
    """A spec the validating webhook denies (invalid fields): it stands for any spec that no
    longer passes, whether stored without the webhook or under a looser policy."""
    return {"model": {"dtype": "bfloat17"}, "inference": {"maxModelLen": 0, "maxNumSeqs": 8}}


def _outside_policy_spec() -> dict[str, Any]:
    """Valid, but asks for a class the ``research`` namespace's policy does not allow."""
    return {
        "model": {"parameterCount": 1_000_000_000, "dtype": "bfloat16"},
        "inference": {"maxModelLen": 2048, "maxNumSeqs": 4},
        "placement": {"gpuClasses": ["nvidia-h200"]},
    }


async def test_metadata_only_updates_are_allowed_whatever_the_spec(webhook: Webhook) -> None:
    for spec, namespace in ((_rejected_spec(), "default"), (_outside_policy_spec(), "research")):
        stored = workload(spec, namespace=namespace)
        assert not (await webhook.validate(admission_review(stored)))["allowed"]
        for change in (
            {"finalizers": ["gpusizer.dev/finalizer"]},
            {"labels": {"argocd.argoproj.io/instance": "ml"}},
            {"annotations": {"gpusizer.dev/last-handled-configuration": "{}"}},
        ):
            new = copy.deepcopy(stored)
            new["metadata"].update(change)
            review = admission_review(new, operation="UPDATE", old=stored)
            assert (await webhook.validate(review))["allowed"] is True, change
            mutated = await webhook.mutate(review)
            assert mutated["allowed"] is True and "patch" not in mutated, change


async def test_an_object_being_deleted_stays_deletable(webhook: Webhook) -> None:
    old = workload(_outside_policy_spec(), namespace="research")
    old["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    old["metadata"]["finalizers"] = ["gpusizer.dev/finalizer"]
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    review = admission_review(new, operation="UPDATE", old=old)
    assert (await webhook.validate(review))["allowed"] is True


async def test_a_spec_change_is_still_judged(webhook: Webhook) -> None:
    stored = workload(_rejected_spec())
    new = copy.deepcopy(stored)
    new["spec"]["inference"]["maxNumSeqs"] = 16
    new["metadata"]["labels"] = {"team": "ml"}
    resp = await webhook.validate(admission_review(new, operation="UPDATE", old=stored))
    assert resp["allowed"] is False
    assert "spec.model.dtype" in resp["status"]["message"]
