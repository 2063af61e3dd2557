"""The webhook served by the real ``gpu-sizer operator`` process, as the chart runs it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import kmock
import pytest

from .conftest import Webhook, admission_review, workload
from .test_webhook import comfortable_spec, no_headroom_spec

pytestmark = pytest.mark.asyncio(loop_scope="module")

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def operator_process(
    emulator: kmock.KubernetesEmulator, cert_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[int]:
    for plural, kind in (
        ("v1/nodes", "Node"),
        ("v1/pods", "Pod"),
        ("v1/events", "Event"),
        ("batch/v1/jobs", "Job"),
        ("events.k8s.io/v1/events", "Event"),
    ):
        emulator.resources[plural] = kmock.ResourceInfo(
            kind=kind,
            namespaced=plural != "v1/nodes",
            verbs={"get", "list", "watch", "create", "patch", "delete"},
        )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("operator") / "operator.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_SIZER_")}
    env["PYTHONPATH"] = str(ROOT / "operator")
    argv = [
        *(sys.executable, "-m", "gpu_sizer.cli", "operator", "-A", "--standalone"),
        *("--metrics-port", "0", "--health-port", "0"),
        *("--webhook-cert-dir", str(cert_dir), "--webhook-listen", "127.0.0.1"),
        *("--webhook-port", str(port)),
    ]
    with log.open("wb") as fh:
        proc = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print("---- operator log (tail) ----\n" + log.read_text(errors="replace")[-3000:])


async def test_operator_process_serves_both_webhooks(
    operator_process: int, webhook: Webhook
) -> None:
    url = f"https://127.0.0.1:{operator_process}"
    served = Webhook(url, webhook.session, webhook.ssl, webhook.emulator)
    async with asyncio.timeout(180):  # the operator process starts slowly on a loaded machine
        while True:
            try:
                resp = await served.validate(admission_review(workload(no_headroom_spec())))
                break
            except aiohttp.ClientConnectorError:
                await asyncio.sleep(0.2)
    assert resp["allowed"] is False
    assert resp["status"]["message"].startswith("needs ")
    ok = await served.validate(admission_review(workload(comfortable_spec())))
    assert ok["allowed"] is True
    mutated = await served.mutate(admission_review(workload(comfortable_spec())))
    assert mutated["patchType"] == "JSONPatch"
