"""The webhook under bursts and overload, over HTTPS to the real kopf operator (see conftest.py).

No assertion here depends on how fast the machine is: bursts are answered in full (their
verdicts and the API reads they cost are counted), and overload is produced by holding the
server's capacity, not by outrunning it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from gpu_sizer.admission import handlers
from gpu_sizer.admission.namespaces import NamespaceLabels, kubernetes_fetcher

from .conftest import Webhook, admission_review, workload
from .test_webhook import inference

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def test_a_burst_for_a_cold_namespace_makes_one_read_and_denies_none(
    webhook: Webhook,
) -> None:
    # Issue 13, item 12: 300 concurrent reviews for one namespace with a cold cache made 136
    # Namespace reads and were denied 200 times with 503 PolicyUnavailable.
    reads: list[str] = []
    fetch = kubernetes_fetcher()

    def counting(namespace: str) -> Any:
        reads.append(namespace)
        return fetch(namespace)

    saved = handlers._config
    # A generous read timeout: this asserts how many reads a burst costs, not how fast the
    # emulator answers on a loaded machine.
    labels = NamespaceLabels(counting, timeout=120)
    handlers.configure_admission(dataclasses.replace(saved, namespaces=labels))
    try:
        reviews = [
            admission_review(workload(inference(), name=f"w{i}", namespace="burst"))
            for i in range(300)
        ]
        answers = await asyncio.gather(*(webhook.validate(r) for r in reviews))
    finally:
        handlers.configure_admission(saved)
    assert reads == ["burst"]
    assert [a for a in answers if not a["allowed"]] == []
