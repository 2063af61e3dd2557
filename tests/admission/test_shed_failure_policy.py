"""A shed review through a real API server: what its webhook client makes of the 429.

The webhook server runs in the test (the direct dispatch, the handlers, a pool held backlogged
on a fake clock, so that every review is shed with 429 ``Backlog`` while the test holds it) and
a real kube-apiserver (``control_plane``, envtest) calls it by url with the test CA, as the chart
registers it (docs/admission.md, "The failure-policy trade-off" and "Overload"). client-go
retries a 429 after its ``Retry-After`` within the webhook's timeout; when that runs out the
configuration's ``failurePolicy`` decides: ``Fail`` (the chart's default) refuses the write and
stores nothing, ``Ignore`` admits it unchecked, which is what the chart documents for it. A spec
the webhook denies is used throughout: a shed review must never turn into its admission except
under ``Ignore``, and once the backlog clears the same spec is denied with its own message.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from gpu_sizer.admission import certs, handlers
from gpu_sizer.admission.capacity import AdmissionCapacity
from gpu_sizer.admission.handlers import DIRECT_ROUTES
from gpu_sizer.admission.namespaces import NamespaceLabels
from gpu_sizer.admission.server import AdmissionServer
from gpu_sizer.admission.verdict import Outcome, review
from gpu_sizer.api.crd import CRD_NAME
from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.metrics import ADMISSION_SHED
from gpu_sizer.policy.namespace import Policy
from tests.conftest import Kubectl

from .test_webhook import no_headroom_spec

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).resolve().parents[2]
VALUES = yaml.safe_load((ROOT / "charts/gpu-sizer/values.yaml").read_text())
#: Seconds the API server gives the webhook (the chart's default is 10; shorter keeps the test
#: short, and the API server's handling is the same).
TIMEOUT = 4


def shed_count() -> float:
    return ADMISSION_SHED.labels("Backlog")._value.get()  # type: ignore[attr-defined,no-any-return]


@dataclasses.dataclass
class Shedding:
    """The webhook at ``url`` (CA ``ca``); :meth:`hold` makes it shed every review."""

    url: str
    ca: bytes
    capacity: AdmissionCapacity
    now: list[float]
    gate: threading.Event = dataclasses.field(default_factory=threading.Event)
    held: list[asyncio.Task[Any]] = dataclasses.field(default_factory=list)

    async def hold(self) -> None:
        """A measured pace of 10 ms, and three pieces held in the pool: 30 ms of work ahead of
        any new review, over the 25 ms budget, until :meth:`release`."""
        self.gate.clear()
        first = asyncio.create_task(self.capacity.run(self.gate.wait, 120))
        await until(lambda: self.capacity.pending == 1)
        self.now[0] += 0.010
        self.gate.set()
        await first
        self.gate.clear()
        self.held = [asyncio.create_task(self.capacity.run(self.gate.wait, 120)) for _ in "abc"]
        await until(lambda: self.capacity.pending == 3)
        assert self.capacity.backlog() > self.capacity.budget

    async def release(self) -> None:
        self.gate.set()
        await asyncio.gather(*self.held)


async def until(condition: Any) -> None:
    async with asyncio.timeout(60):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.fixture(scope="module")
def crd(kubectl: Kubectl) -> Kubectl:
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    kubectl.wait_established(CRD_NAME)
    return kubectl


@pytest_asyncio.fixture(loop_scope="module")
async def shedding(tmp_path: Path) -> AsyncIterator[Shedding]:
    bundle = certs.generate_bundle(["127.0.0.1"], dt.datetime.now(dt.UTC))
    cert, key, _ = certs.write_files(bundle, tmp_path)
    now = [0.0]
    capacity = AdmissionCapacity(budget=0.025, processes=0, clock=lambda: now[0])
    saved = handlers._config
    handlers.configure_admission(
        handlers.AdmissionConfig(namespaces=NamespaceLabels(lambda _: {}), capacity=capacity)
    )

    async def kopf_dispatch(*_: Any, **__: Any) -> Any:
        raise AssertionError("every path is dispatched directly")

    server = AdmissionServer(
        addr="127.0.0.1", port=0, certfile=cert, pkeyfile=key, routes=DIRECT_ROUTES,
        capacity=capacity,
    )  # fmt: skip
    serving = server(kopf_dispatch)
    try:
        await anext(serving)
        assert server.bound is not None
        host, port = server.bound
        it = Shedding(f"https://{host}:{port}", bundle.ca_crt, capacity, now)
        yield it
        it.gate.set()
    finally:
        await serving.aclose()
        handlers.configure_admission(saved)
        capacity.close()


@pytest.fixture
def namespace(crd: Kubectl) -> Iterator[str]:
    name = f"shed-{uuid.uuid4().hex[:6]}"
    crd("create", "namespace", name)
    yield name
    crd("delete", "namespace", name, "--wait=false", check=False)


def registered(kubectl: Kubectl, webhook: Shedding, namespace: str, policy: str) -> str:
    """The validating webhook as the chart renders it (rules, sideEffects, review versions),
    by url, for ``namespace`` only (the control plane is shared with other tests)."""
    name = f"shed-{uuid.uuid4().hex[:6]}"
    config = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "validate.gpuworkloads.gpusizer.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": policy,
                "timeoutSeconds": TIMEOUT,
                "matchPolicy": "Equivalent",
                "clientConfig": {
                    "url": f"{webhook.url}/validate-gpuworkload",
                    "caBundle": base64.b64encode(webhook.ca).decode(),
                },
                "rules": [
                    {
                        "apiGroups": ["gpusizer.dev"],
                        "apiVersions": ["v1alpha1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["gpuworkloads"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            }
        ],
    }
    kubectl("apply", "-f", "-", input=json.dumps(config))
    return name


def denied_spec(max_model_len: int) -> dict[str, Any]:
    """A spec the webhook denies (no safe headroom), one per length: a spec the webhook has
    judged is answered from memory without the worker threads, so it is never shed."""
    spec = {**no_headroom_spec(), "measurement": {"mode": "Disabled"}}
    spec["inference"] = {**spec["inference"], "maxModelLen": max_model_len}
    answer = review(spec, namespace="x", policy=Policy().for_namespace({}), catalog=DEFAULT_CATALOG)
    assert answer.outcome is Outcome.NoSafeHeadroom, answer
    return spec


async def apply(
    kubectl: Kubectl, name: str, namespace: str, spec: dict[str, Any], *args: str
) -> Any:
    """``kubectl apply`` in a thread: the webhook answers on this test's event loop."""
    doc = {
        "apiVersion": "gpusizer.dev/v1alpha1",
        "kind": "GPUWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return await asyncio.to_thread(
        kubectl, "apply", "-f", "-", *args, input=json.dumps(doc), check=False
    )


async def wired(kubectl: Kubectl, namespace: str) -> str:
    """Wait until the API server calls the webhook (it picks new configurations up within a
    second or so): a dry run is denied with the webhook's message. Returns that message."""
    async with asyncio.timeout(120):
        while True:
            proc = await apply(kubectl, "probe", namespace, denied_spec(8192), "--dry-run=server")
            if "denied the request" in proc.stderr:
                return str(proc.stderr)
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
async def test_a_shed_review_is_what_the_failure_policy_says_never_an_admission_under_fail(
    crd: Kubectl, shedding: Shedding, namespace: str, policy: str
) -> None:
    assert VALUES["webhook"]["failurePolicy"] == "Fail"  # the chart's default, tested first
    config = registered(crd, shedding, namespace, policy)
    try:
        denial = await wired(crd, namespace)
        assert "headroom required" in denial, denial
        spec = denied_spec(4096)  # not judged yet: its review needs the worker threads
        await shedding.hold()
        before = shed_count()
        proc = await apply(crd, "shed", namespace, spec)
        assert shed_count() > before  # the API server reached the webhook and was shed
        stored = crd("get", "gpuworkload", "shed", "-n", namespace, "--ignore-not-found")
        if policy == "Fail":
            assert proc.returncode != 0, proc.stdout
            assert 'failed calling webhook "validate.gpuworkloads.gpusizer.dev"' in proc.stderr
            assert "denied the request" not in proc.stderr
            assert not stored.stdout.strip()  # nothing unchecked is stored
        else:
            assert proc.returncode == 0, proc.stderr  # admitted unchecked, as documented
            assert "gpuworkload.gpusizer.dev/shed created" in proc.stdout
        await shedding.release()
        # The backlog cleared: the same spec is judged now, and denied (no shed attempt left
        # an answer behind).
        again = await apply(crd, "after", namespace, spec)
        assert again.returncode != 0 and "denied the request" in again.stderr, again.stderr
        assert "headroom required" in again.stderr, again.stderr
    finally:
        await shedding.release()
        crd("delete", "validatingwebhookconfiguration", config, check=False)
