"""A real kopf operator serving the admission webhooks over HTTPS on loopback.

kopf needs a Kubernetes API for discovery before it starts its webhook server, so the operator
runs in-process (``kopf.operator``, cluster-wide, standalone) against kmock's
``KubernetesEmulator`` served on 127.0.0.1, reached through a kubeconfig file; the admission side's
own API reads (Namespace labels, Secrets, webhook configurations) go to the same emulator through
the official client. Tests POST AdmissionReview v1 documents to the webhook server with an
``aiohttp`` client that verifies the serving certificate against the test CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import ssl
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import kmock
import kopf
import kubernetes.config
import pytest
import pytest_asyncio
import yaml

from gpu_sizer.admission import certs, handlers  # handlers: registers the kopf handlers
from gpu_sizer.admission.namespaces import NamespaceLabels, kubernetes_fetcher
from gpu_sizer.admission.server import AdmissionServer, configure
from gpu_sizer.kube import client as kube

NAMESPACES = {
    "default": {},
    "team-a": {"team": "a"},
    "research": {"team": "research", "tier": "lab"},
    "burst": {"team": "burst"},
}

POLICY = {
    "defaultMinHeadroomFraction": 0.10,
    "minHeadroomFractionFloor": 0.05,
    "maxMinHeadroomFraction": 0.4,
    "namespaceRules": [
        {
            "namespaceSelector": {"matchLabels": {"team": "research"}},
            "allowedGpuClasses": ["nvidia-l4", "nvidia-a100-40gb"],
            "defaultMinHeadroomFraction": 0.15,
            "incompleteEstimates": "Deny",
        }
    ],
}


def workload(
    spec: dict[str, Any], *, name: str = "w", namespace: str = "default"
) -> dict[str, Any]:
    return {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": spec,
    }


def admission_review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    subresource: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview v1 request as the API server sends it."""
    body = obj if obj is not None else old
    assert body is not None
    resource = {"group": "gpusizer.dev", "version": "v1alpha1", "resource": "gpuworkloads"}
    kind = {"group": "gpusizer.dev", "version": "v1alpha1", "kind": "GPUWorkload"}
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": body["metadata"]["name"],
        "namespace": body["metadata"]["namespace"],
        "operation": operation,
        "userInfo": {"username": "alice", "uid": "1", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    if subresource:
        request["subResource"] = subresource
        request["requestSubResource"] = subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@dataclass
class Webhook:
    """The running webhook: post reviews, read responses."""

    url: str
    session: aiohttp.ClientSession
    ssl: ssl.SSLContext
    emulator: kmock.KubernetesEmulator

    async def post_raw(
        self, path: str, data: bytes, content_type: str = "application/json"
    ) -> aiohttp.ClientResponse:
        async with self.session.post(
            f"{self.url}/{path}",
            data=data,
            headers={"Content-Type": content_type},
            ssl=self.ssl,
            server_hostname="localhost",
        ) as resp:
            await resp.read()
            return resp

    async def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        async with self.session.post(
            f"{self.url}/{path}", json=review, ssl=self.ssl, server_hostname="localhost"
        ) as resp:
            assert resp.status == 200, await resp.text()
            data: dict[str, Any] = await resp.json()
        assert data["apiVersion"] == "admission.k8s.io/v1"
        assert data["kind"] == "AdmissionReview"
        assert data["response"]["uid"] == review["request"]["uid"]
        return data["response"]

    async def validate(self, review: dict[str, Any]) -> dict[str, Any]:
        return await self.review("validate-gpuworkload", review)

    async def mutate(self, review: dict[str, Any]) -> dict[str, Any]:
        return await self.review("mutate-gpuworkload", review)


def register_resources(emulator: kmock.KubernetesEmulator) -> None:
    """The resources kopf's discovery and the admission side touch."""
    emulator.resources["gpusizer.dev/v1alpha1/gpuworkloads"] = kmock.ResourceInfo(
        kind="GPUWorkload",
        singular="gpuworkload",
        namespaced=True,
        verbs={"get", "list", "watch", "patch", "create", "update"},
        shortnames={"gpuw"},
        subresources={"status"},
    )
    emulator.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", singular="namespace", namespaced=False, verbs={"get", "list", "watch"}
    )
    emulator.resources["v1/secrets"] = kmock.ResourceInfo(
        kind="Secret",
        singular="secret",
        namespaced=True,
        verbs={"get", "create", "update", "patch"},
    )
    emulator.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition",
        singular="customresourcedefinition",
        namespaced=False,
        verbs={"get", "list", "watch"},
    )
    for plural, kind in (
        ("validatingwebhookconfigurations", "ValidatingWebhookConfiguration"),
        ("mutatingwebhookconfigurations", "MutatingWebhookConfiguration"),
    ):
        emulator.resources[f"admissionregistration.k8s.io/v1/{plural}"] = kmock.ResourceInfo(
            kind=kind, singular=kind.lower(), namespaced=False, verbs={"get", "patch"}
        )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def emulator(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[kmock.KubernetesEmulator]:
    """kmock's emulator on loopback, a kubeconfig for it in KUBECONFIG, namespaces served."""
    tmp_path = tmp_path_factory.mktemp("kube")
    with pytest.MonkeyPatch.context() as monkeypatch:
        async with kmock.KubernetesEmulator() as k, kmock.Server(k) as srv:
            async for emulator in _emulate(k, srv, tmp_path, monkeypatch):
                yield emulator


async def _emulate(
    k: kmock.KubernetesEmulator,
    srv: kmock.Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[kmock.KubernetesEmulator]:
    if True:
        register_resources(k)
        for name, labels in NAMESPACES.items():
            # kmock 0.8 parses GET /api/v1/namespaces/NAME as a list in namespace NAME, so
            # a reaction serves the Namespace object itself.
            k[f"get /api/v1/namespaces/{name}"] << {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name, "labels": labels},
            }
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "kmock", "cluster": {"server": str(srv.url).rstrip("/")}}
                    ],
                    "users": [{"name": "test", "user": {"token": "test"}}],
                    "contexts": [
                        {"name": "kmock", "context": {"cluster": "kmock", "user": "test"}}
                    ],
                    "current-context": "kmock",
                }
            )
        )
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        # The client reads KUBECONFIG once, at import: point its default at this file too.
        monkeypatch.setattr(
            kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig)
        )
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        kube.api_client.cache_clear()
        yield k
        kube.api_client.cache_clear()


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cert-manager-like directory: tls.crt, tls.key, ca.crt for the name ``localhost``."""
    bundle = certs.generate_bundle(["localhost"], dt.datetime.now(dt.UTC))
    directory = tmp_path_factory.mktemp("certs")
    certs.write_files(bundle, directory)
    return directory


OptionsFactory = Callable[..., SimpleNamespace]


@pytest.fixture(scope="module")
def options(tmp_path_factory: pytest.TempPathFactory, cert_dir: Path) -> OptionsFactory:
    tmp_path = tmp_path_factory.mktemp("options")

    def make(**overrides: Any) -> SimpleNamespace:
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump(POLICY))
        values: dict[str, Any] = {
            "no_webhook": False,
            "webhook_port": 0,
            "webhook_listen": "127.0.0.1",
            "webhook_cert_dir": str(cert_dir),
            "webhook_tls_secret": None,
            "webhook_config_name": None,
            "webhook_service": None,
            "policy": str(policy),
        }
        values.update(overrides)
        return SimpleNamespace(**values)

    return make


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def webhook(
    emulator: kmock.KubernetesEmulator, cert_dir: Path, options: OptionsFactory
) -> AsyncIterator[Webhook]:
    """The real kopf operator with the admission handlers, serving on 127.0.0.1."""
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    server = configure(settings, options())
    assert isinstance(server, AdmissionServer)
    # These tests are about verdicts: a loaded machine makes the pool's pace slow, and one
    # review held on purpose would then shed the next with a 429 (tests/admission/
    # test_shedding.py tests shedding on a clock of its own). Likewise the loop's lag: the test's
    # client and the emulator share this event loop, so a burst they send makes it lag.
    server.capacity.budget = 3600.0
    server.capacity.lag_budget = 3600.0
    # And the review's own deadline (half its timeout, 5 s without ?timeout=): a verdict held
    # on purpose, or slow on a loaded machine, is answered, not shed with 503 (tests/admission/
    # test_workers.py and test_load.py test that deadline).
    server.capacity.queue_share = 100.0
    # Namespace reads bounded by 60 s instead of 2 s: on a loaded machine the emulator, which
    # shares this event loop with the webhook and the client, may be slower than a real API
    # server, and these tests are about verdicts, not about the emulator's speed.
    handlers.configure_admission(
        dataclasses.replace(
            handlers._config, namespaces=NamespaceLabels(kubernetes_fetcher(60.0), timeout=60.0)
        )
    )
    task = asyncio.create_task(
        kopf.operator(
            registry=kopf.get_default_registry(),
            settings=settings,
            clusterwide=True,
            standalone=True,
        )
    )
    try:
        async with asyncio.timeout(120):  # generous: a loaded machine; ends when bound
            while server.bound is None:
                if task.done():
                    task.result()  # re-raise why the operator died
                await asyncio.sleep(0.05)
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        host, port = server.bound
        async with aiohttp.ClientSession() as session:
            yield Webhook(f"https://{host}:{port}", session, context, emulator)
    finally:
        # Cancelling (rather than the stop flag) makes kopf cancel its leftover tasks at once,
        # kmock's open watch streams included, instead of waiting 5 s for them to finish.
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
