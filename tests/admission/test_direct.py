"""The server's own dispatch to gpu-sizer's handlers answers exactly as kopf's would.

Every review below goes to the same running operator twice: once through
:mod:`gpu_sizer.admission.direct` (the server calls the handler itself) and once through the
function kopf hands the server (``serve_admission_request``: kopf's registry, causes, handler
state machine and response builder). The responses must be equal field for field (the JSONPatch
decoded), and so must the records logged on ``kopf.objects`` and the verdict counters.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import json
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import kmock
import kopf
import pytest
import pytest_asyncio

from gpu_sizer.admission import handlers
from gpu_sizer.admission.handlers import DIRECT_ROUTES
from gpu_sizer.admission.namespaces import NamespaceLabels, kubernetes_fetcher
from gpu_sizer.admission.server import AdmissionServer, configure
from gpu_sizer.metrics import ADMISSION_VERDICTS

from .conftest import OptionsFactory, Webhook, admission_review, workload
from .test_webhook import comfortable_spec, inference, near_threshold_spec, no_headroom_spec

pytestmark = pytest.mark.asyncio(loop_scope="module")


@dataclasses.dataclass
class Served:
    webhook: Webhook
    server: AdmissionServer


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(
    emulator: kmock.KubernetesEmulator, cert_dir: Any, options: OptionsFactory
) -> AsyncIterator[Served]:
    """The real kopf operator with the admission handlers, and its server object."""
    # Pods in discovery, as in any cluster: kopf's dispatch looks the resource up there.
    emulator.resources["v1/pods"] = kmock.ResourceInfo(
        kind="Pod", singular="pod", namespaced=True, verbs={"get", "list", "watch"}
    )
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False
    server = configure(settings, options())
    assert isinstance(server, AdmissionServer)
    assert server.routes == DIRECT_ROUTES
    handlers.configure_admission(
        dataclasses.replace(
            handlers._config,
            namespaces=NamespaceLabels(kubernetes_fetcher(60.0), timeout=60.0),
            workloads=lambda namespace, name: pod_workload(namespace, name),
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
        async with asyncio.timeout(120):
            while server.bound is None:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        host, port = server.bound
        async with aiohttp.ClientSession() as session:
            yield Served(Webhook(f"https://{host}:{port}", session, context, emulator), server)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def pod_workload(namespace: str, name: str) -> Any:
    """The GPUWorkload the pod webhook reads: Ready with a recommendation, or absent."""
    if name == "missing":
        return None
    return {
        "metadata": {"name": name, "namespace": namespace, "generation": 2},
        "status": {
            "phase": "Ready",
            "observedGeneration": 2,
            "specHash": "abc123",
            "conditions": [{"type": "Ready", "status": "True", "message": "phase Ready"}],
            "recommendation": {
                "gpuClass": "nvidia-l4",
                "gpuCount": 1,
                "gpuMemoryBytes": 24 << 30,
                "requiredBytesPerGpu": 1,
                "headroomFraction": 0.5,
                "basis": "Measurement",
            },
        },
    }


def pod(workload_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "llama-0",
            "namespace": "default",
            "uid": "0b1c",
            "labels": {"gpusizer.dev/workload": workload_name},
        },
        "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.11.0"}]},
    }


def pod_review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    review = admission_review(obj if operation != "DELETE" else None, operation=operation, old=obj)
    resource = {"group": "", "version": "v1", "resource": "pods"}
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    review["request"].update(
        resource=resource, requestResource=resource, kind=kind, requestKind=kind
    )
    return review


def updated(spec: dict[str, Any], new_spec: dict[str, Any]) -> dict[str, Any]:
    old = workload(spec)
    new = copy.deepcopy(old)
    new["spec"] = new_spec
    return admission_review(new, operation="UPDATE", old=old)


def relabelled(spec: dict[str, Any]) -> dict[str, Any]:
    old = workload(spec)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"argocd.argoproj.io/instance": "x"}
    return admission_review(new, operation="UPDATE", old=old)


def status_update(spec: dict[str, Any]) -> dict[str, Any]:
    old = workload(spec)
    return admission_review(old, operation="UPDATE", old=old, subresource="status")


CASES: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "fits": ("validate-gpuworkload", lambda: admission_review(workload(comfortable_spec()))),
    "fits-with-warning": (
        "validate-gpuworkload",
        lambda: admission_review(workload(near_threshold_spec())),
    ),
    "no-safe-headroom": (
        "validate-gpuworkload",
        lambda: admission_review(workload(no_headroom_spec())),
    ),
    "invalid": (
        "validate-gpuworkload",
        lambda: admission_review(workload({"model": {"dtype": "bfloat17"}, "inference": {}})),
    ),
    "policy-violation": (
        "validate-gpuworkload",
        lambda: admission_review(
            workload(
                {**inference(), "placement": {"gpuClasses": ["nvidia-h100-80gb"]}},
                namespace="research",
            )
        ),
    ),
    "update-spec-changed": (
        "validate-gpuworkload",
        lambda: updated(comfortable_spec(), no_headroom_spec()),
    ),
    "update-metadata-only": ("validate-gpuworkload", lambda: relabelled(no_headroom_spec())),
    "update-status": ("validate-gpuworkload", lambda: status_update(no_headroom_spec())),
    "delete": (
        "validate-gpuworkload",
        lambda: admission_review(None, operation="DELETE", old=workload(no_headroom_spec())),
    ),
    "mutate-create": ("mutate-gpuworkload", lambda: admission_review(workload(inference()))),
    "mutate-invalid": (
        "mutate-gpuworkload",
        lambda: admission_review(workload({"model": {"dtype": "bfloat17"}})),
    ),
    "mutate-update-status": ("mutate-gpuworkload", lambda: status_update(inference())),
    "mutate-delete": (
        "mutate-gpuworkload",
        lambda: admission_review(None, operation="DELETE", old=workload(inference())),
    ),
    "mutate-connect": (
        "mutate-gpuworkload",
        lambda: admission_review(None, operation="CONNECT", old=workload(inference())),
    ),
    "pod-applied": ("mutate-pod", lambda: pod_review(pod("llama"))),
    "pod-without-workload": ("mutate-pod", lambda: pod_review(pod("missing"))),
    "pod-delete": ("mutate-pod", lambda: pod_review(pod("llama"), "DELETE")),
}

COUNTED = [
    (op, verdict)
    for op in ("CREATE", "UPDATE", "DELETE")
    for verdict in (
        "Allowed",
        "AllowedWithWarnings",
        "Invalid",
        "NoSafeHeadroom",
        "PolicyViolation",
        "PodApplied",
        "PodAllowed",
        "PodDenied",
    )
]


def counters() -> list[float]:
    return [ADMISSION_VERDICTS.labels(op, v)._value.get() for op, v in COUNTED]  # type: ignore[attr-defined]


def comparable(response: dict[str, Any]) -> dict[str, Any]:
    """The response with its JSONPatch decoded (base64 of JSON: compare the operations)."""
    response = copy.deepcopy(response)
    patch = response.get("patch")
    if patch is not None:
        response["patch"] = json.loads(base64.b64decode(patch))
    return response


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[int, str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.levelno, record.getMessage(), getattr(record, "k8s_ref", None)))


async def through(
    served: Served, path: str, review: dict[str, Any], *, direct: bool
) -> tuple[dict[str, Any], list[tuple[int, str, Any]], list[float]]:
    served.server.routes = dict(DIRECT_ROUTES) if direct else {}
    logger = logging.getLogger("kopf.objects")
    records, level = Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    before = counters()
    try:
        response = await served.webhook.review(path, review)
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
        served.server.routes = dict(DIRECT_ROUTES)
    delta = [after - b for after, b in zip(counters(), before, strict=True)]
    return comparable(response), records.seen, delta


@pytest.mark.parametrize("case", list(CASES))
async def test_the_direct_dispatch_answers_and_logs_as_kopf_does(served: Served, case: str) -> None:
    path, make = CASES[case]
    review = make()
    kopf_answer, kopf_logs, kopf_counts = await through(served, path, review, direct=False)
    answer, logs, counts = await through(served, path, review, direct=True)
    assert answer == kopf_answer
    assert logs == kopf_logs
    # Every case that runs a handler logs at least its outcome (none runs for a subresource,
    # nor a mutating one for a deletion).
    assert kopf_logs or case in {"update-status", "mutate-update-status", "mutate-delete"} | {
        "pod-delete"
    }
    assert counts == kopf_counts
    # and the same once more, the validating answer now coming from the cache
    assert (await through(served, path, review, direct=True))[0] == kopf_answer


async def test_the_cases_cover_every_kind_of_answer(served: Served) -> None:
    answers = {case: (await served.webhook.review(p, make())) for case, (p, make) in CASES.items()}
    assert answers["fits"]["allowed"] and "warnings" not in answers["fits"]
    assert answers["fits-with-warning"]["warnings"]
    assert answers["no-safe-headroom"]["status"]["code"] == 422
    assert answers["policy-violation"]["status"]["code"] == 403
    assert answers["mutate-create"]["patchType"] == "JSONPatch"
    assert "patch" not in answers["mutate-delete"]
    assert answers["pod-applied"]["patchType"] == "JSONPatch"
    assert answers["pod-without-workload"]["allowed"]
