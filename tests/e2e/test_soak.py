"""The soak of issue 13 in a short form (``hack/soak.py`` runs it at full size): workloads of
every kind under API faults and SIGKILLs settle with every invariant kept (``tests/e2e/soak.py``
says which)."""

from __future__ import annotations

import pytest
from gpu_sizer_testbed.emulator import LoopbackCluster

from tests.e2e.faults import Faults
from tests.e2e.soak import soak

pytestmark = [pytest.mark.emulated_api, pytest.mark.local_operator, pytest.mark.emulated_kubelet]


def soak_faults(seed: int) -> Faults:
    """What a busy, failing API server does, to the operator's requests only."""
    return Faults(
        patch_conflict=0.05,
        patch_error=0.05,
        create_error=0.05,
        watch_gone=0.02,
        stream_expiry=8.0,
        watch_delay={"gpuworkloads": 1.0, "jobs": 0.3, "pods": 0.3},
        clients="kopf/",
        seed=seed,
    )


@pytest.mark.timeout(900)
async def test_soak_under_faults_and_kills(cluster: LoopbackCluster, start_operator) -> None:
    faults = soak_faults(seed=13)
    report = await soak(
        cluster, start_operator, per_kind=3, kills=2, faults=faults, seed=13, settle_timeout=300
    )
    print("\n".join(report.lines()))
    assert report.problems == []
    assert report.kills == 2 and report.restart_status_writes == 0
    assert sum(report.injected.values()) > 0
