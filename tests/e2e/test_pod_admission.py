"""Pod admission end to end: the real operator process sizes a GPUWorkload on the loopback API,
and its webhook server applies (or, under ``podEnforcement: Enforce``, refuses) pods labelled
``gpusizer.dev/workload`` (issue 16, acceptance).

The emulator has no API server admission chain, so the test plays the API server: it POSTs the
AdmissionReview a real one would send for a pod created by a ReplicaSet (no ``metadata.name`` or
``namespace`` in the object; the request names the namespace) and applies the returned JSONPatch.
Which pods are sent at all (the objectSelector on the label, ``failurePolicy: Ignore``) is the
chart's webhook configuration, checked in tests/chart/test_render.py.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import kubernetes_validate
import pytest
import yaml
from gpu_sizer_testbed.emulator import LoopbackCluster

from gpu_sizer.admission import certs

from .conftest import GW, NS, ROOT, eventually, spec, workload

pytestmark = [pytest.mark.e2e, pytest.mark.emulated_api, pytest.mark.local_operator]


def pod_review(labels: dict[str, str]) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "llama-7d9f-", "labels": labels},
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.11.0"}]},
    }
    resource = {"group": "", "version": "v1", "resource": "pods"}
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": resource,
            "requestKind": kind,
            "requestResource": resource,
            "namespace": NS,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
        },
    }


class PodWebhook:
    def __init__(self, url: str, session: aiohttp.ClientSession, context: ssl.SSLContext) -> None:
        self.url, self.session, self.context = url, session, context

    async def review(self, review: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(
            f"{self.url}/mutate-pod", json=review, ssl=self.context, server_hostname="localhost"
        ) as resp:
            assert resp.status == 200, await resp.text()
            data: dict[str, Any] = await resp.json()
        assert data["response"]["uid"] == review["request"]["uid"]
        return data["response"]


@pytest.fixture
async def pod_webhook(cluster: LoopbackCluster, tmp_path: Path) -> AsyncIterator[PodWebhook]:
    """``gpu-sizer operator`` with its webhook on loopback and ``podEnforcement: Enforce``."""
    bundle = certs.generate_bundle(["localhost"], dt.datetime.now(dt.UTC))
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    certs.write_files(bundle, cert_dir)
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"podEnforcement": "Enforce"}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SIZER_")}
    env["KUBECONFIG"] = cluster.kubeconfig
    env["PYTHONPATH"] = str(ROOT / "operator") + os.pathsep + env.get("PYTHONPATH", "")
    argv = [
        *(sys.executable, "-m", "gpu_sizer.cli", "operator", "-A", "--standalone"),
        *("--metrics-port", "0", "--health-port", "0", "--policy", str(policy)),
        *("--webhook-cert-dir", str(cert_dir), "--webhook-listen", "127.0.0.1"),
        *("--webhook-port", str(port)),
    ]
    log = tmp_path / "operator.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT)
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    try:
        async with aiohttp.ClientSession() as session:
            yield PodWebhook(f"https://127.0.0.1:{port}", session, context)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print("---- operator log (tail) ----\n" + log.read_text(errors="replace")[-3000:])


async def first_answer(webhook: PodWebhook, review: dict[str, Any]) -> dict[str, Any]:
    """The first answer once the server listens (the operator starts in a subprocess)."""

    async def attempt() -> dict[str, Any] | None:
        try:
            return await webhook.review(review)
        except aiohttp.ClientConnectorError:
            return None

    return await eventually(attempt, timeout=90, what="the webhook server")


async def phase(cluster: LoopbackCluster, name: str, wanted: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        obj = await cluster.get(GW, NS, name)
        return obj if ((obj or {}).get("status") or {}).get("phase") == wanted else None

    return await eventually(check, timeout=90, what=f"{name} phase {wanted}")


async def test_enforce_denies_a_rejected_workloads_pod_and_applies_it_once_fixed(
    cluster: LoopbackCluster, pod_webhook: PodWebhook
) -> None:
    disabled = {"measurement": {"mode": "Disabled"}}
    # 64 concurrent requests of 8k tokens held in vLLM's KV pool on an L4 only (about 64 GiB of
    # KV cache for this 8B model): no safe headroom, the operator writes Rejected. maxNumSeqs
    # alone would not do it: for a pre-allocating engine it is a cap on the batch, not a size.
    too_big = spec(
        inference={"maxModelLen": 8192, "maxNumSeqs": 512, "targetConcurrency": 64},
        placement={"gpuClasses": ["nvidia-l4"]},
        **disabled,
    )
    await cluster.create(GW, workload("llama", too_big))
    await phase(cluster, "llama", "Rejected")
    labelled = pod_review({"app": "llama", "gpusizer.dev/workload": "llama"})
    denied = await first_answer(pod_webhook, labelled)
    assert denied["allowed"] is False
    message = denied["status"]["message"]
    assert message.startswith("pod denied by gpu-sizer (podEnforcement Enforce): ")
    assert f"GPUWorkload {NS}/llama is Rejected" in message and "Fix its spec" in message

    # Fixed: a spec that fits; measurement disabled, so Ready rests on the estimate.
    await cluster.change_spec(
        GW,
        NS,
        "llama",
        {"inference": {"maxModelLen": 2048, "maxNumSeqs": 4, "targetConcurrency": 1}},
    )
    ready = await phase(cluster, "llama", "Ready")
    rec = ready["status"]["recommendation"]
    admitted = await pod_webhook.review(pod_review({"gpusizer.dev/workload": "llama"}))
    assert admitted["allowed"] is True, admitted
    ops = json.loads(base64.b64decode(admitted["patch"]))
    pod = jsonpatch.apply_patch(
        pod_review({"gpusizer.dev/workload": "llama"})["request"]["object"], ops
    )
    pod["metadata"]["name"] = "llama-7d9f-abcde"  # what the API server fills from generateName
    kubernetes_validate.validate(pod, kubernetes_validate.utils.latest_version(), strict=True)
    required = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required == rec["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": str(rec["gpuCount"])
    }
    assert pod["metadata"]["annotations"] == {
        "gpusizer.dev/gpu-class": rec["gpuClass"],
        "gpusizer.dev/basis": "Estimate",
        "gpusizer.dev/spec-hash": ready["status"]["specHash"],
    }
    assert "namespace" not in pod["metadata"]  # filled for the lookup only, never patched in

    # A GPUWorkload that does not exist: denied with the fix.
    missing = await pod_webhook.review(pod_review({"gpusizer.dev/workload": "nope"}))
    assert missing["allowed"] is False and "not found: create it" in missing["status"]["message"]
    # A pod without the label (the chart's objectSelector never sends one): left alone.
    plain = await pod_webhook.review(pod_review({"app": "web"}))
    assert plain["allowed"] is True and "patch" not in plain
