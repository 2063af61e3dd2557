"""The GPU_SIZER_E2E_KUBECONFIG switch, tested without a cluster of one's own.

The real-cluster backend (``real_cluster.py``) speaks the Kubernetes REST API: pointing the switch
at the test's own API (the envtest control plane when ``KUBEBUILDER_ASSETS`` is set, else the
loopback emulator) runs the real-cluster code path (fresh namespaces per test, namespaced
operator, node-derived GPU classes, watch-recorded statuses, mode skips) for every scenario that
does not play the kubelet. On the control plane that is a real API server, Job controller,
garbage collector and scheduler, with the outer test's Nodes (whose pods nothing runs); what
neither shows is a real kubelet's timeline: hack/e2e-real-cluster.md says how to run the suite
on kind for that.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import real_cluster
from tests.e2e.conftest import ROOT, on_control_plane
from tests.e2e.envtest import AuditTail

REAL = real_cluster.kubeconfig_from_env() is not None
not_nested = pytest.mark.skipif(REAL, reason="already running in real-cluster mode")

RESTART = "test_operator_restart_keeps_exactly_one_job"
#: Generous: a nested suite on a loaded 2-core machine; it ends as soon as its tests do.
NESTED_SECONDS = 1500
#: The scenarios that must pass in real-cluster mode (the rest is skipped there, with reasons).
BOTH_MODES = {
    "test_cluster_semantics.py::test_spec_change_replaces_the_job",
    "test_cluster_semantics.py::test_operator_restart_keeps_exactly_one_job",
    "test_cluster_semantics.py::test_invalid_object_is_refused_or_stalled",
    "test_lifecycle.py::test_job_manifest_fields",
    "test_lifecycle.py::test_measurement_disabled_is_ready_on_the_estimate",
    "test_endings.py::test_workload_deleted_deletes_its_job",
    "test_real_probe.py::test_local_process_backend",
    "test_startup.py::test_webhook_without_certificates_or_flags_exits_with_the_reason",
    "test_zz_status_schema.py::test_the_suite_exercised_every_part_of_the_status",
}


def test_mode_comes_from_the_environment(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("{}")
    assert real_cluster.kubeconfig_from_env({}) is None
    assert real_cluster.kubeconfig_from_env({real_cluster.ENV_KUBECONFIG: " "}) is None
    env = {real_cluster.ENV_KUBECONFIG: str(kubeconfig)}
    assert real_cluster.kubeconfig_from_env(env) == str(kubeconfig)
    with pytest.raises(pytest.UsageError, match="no such file"):
        real_cluster.kubeconfig_from_env({real_cluster.ENV_KUBECONFIG: str(tmp_path / "nope")})
    assert real_cluster.operator_mode_from_env({}) == "local"
    assert real_cluster.operator_mode_from_env({real_cluster.ENV_OPERATOR: "installed"}) == (
        "installed"
    )
    with pytest.raises(pytest.UsageError, match="installed"):
        real_cluster.operator_mode_from_env({real_cluster.ENV_OPERATOR: "chart"})


def test_markers_skip_only_in_real_cluster_mode() -> None:
    reason = real_cluster.skip_reason
    assert reason({"emulated_kubelet"}, real=False, operator="local") is None
    assert "kubelet" in (reason({"emulated_kubelet"}, real=True, operator="local") or "")
    assert "kmock" in (reason({"emulated_api"}, real=True, operator="installed") or "")
    assert reason({"local_operator"}, real=True, operator="local") is None
    assert "installed" in (reason({"local_operator"}, real=True, operator="installed") or "")
    assert reason({"gpu_classes"}, real=True, operator="installed") is None


def test_gpu_classes_come_from_gfd_product_labels() -> None:
    def node(name: str, product: str | None) -> dict[str, object]:
        labels = {real_cluster.PRODUCT_LABEL: product} if product else {}
        return {"metadata": {"name": name, "labels": labels}}

    nodes = [
        node("a", "NVIDIA-L4"),
        node("b", "NVIDIA-L4-SHARED"),
        node("c", "NVIDIA-H100-80GB-HBM3"),
        node("cpu", None),
        node("odd", "Some-Other-GPU"),
    ]
    assert real_cluster.classes_of_nodes(nodes) == {
        "nvidia-l4": ["a", "b"],
        "nvidia-h100-80gb": ["c"],
    }


def _pytest_env(kubeconfig: str, *, kmock: bool = True) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "operator"), str(ROOT)]))
    for key in [k for k in env if k.startswith("PYTEST_XDIST_")]:  # a plain, one-process run
        del env[key]
    env[real_cluster.ENV_KUBECONFIG] = kubeconfig
    env.pop(real_cluster.ENV_OPERATOR, None)
    env.pop(real_cluster.ENV_KMOCK, None)
    if kmock:
        # kmock 0.8 answers 500 to every /api/v1/namespaces request (see real_cluster.ENV_KMOCK).
        env[real_cluster.ENV_KMOCK] = "1"
    return env


@not_nested
def test_unreachable_cluster_ends_the_session_fast(tmp_path: Path) -> None:
    import subprocess

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "x", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                "current-context": "x",
            }
        )
    )
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += ["tests/e2e/test_lifecycle.py", "tests/e2e/test_cluster_semantics.py"]
    # "Fast" means: at the first test, before any test body runs (no per-test connect
    # timeouts); how many seconds that takes is the loaded machine's business.
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=_pytest_env(str(kubeconfig)),
        capture_output=True,
        text=True,
        timeout=280,
    )
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert "https://127.0.0.1:1 is not reachable" in out and real_cluster.ENV_KUBECONFIG in out
    assert not re.search(r"\d+ (passed|failed)", out), "no test ran"


async def _run_suite(cluster: Any, *args: str, operator: str | None = None) -> str:
    """pytest in real-cluster mode against ``cluster`` in a subprocess (this loop keeps serving
    the emulator, or the control plane's kubelet)."""
    env = _pytest_env(cluster.kubeconfig, kmock=not isinstance(cluster, real_cluster.RealCluster))
    if operator:
        env[real_cluster.ENV_OPERATOR] = operator
    # Per-test timeout as in the outer suite (pyproject's 300 s): a loaded machine is slow.
    argv = ["-m", "pytest", "-v", "-rfs", "-p", "no:cacheprovider", "--timeout", "300", *args]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out = (await asyncio.wait_for(proc.communicate(), NESTED_SECONDS))[0].decode(
            errors="replace"
        )
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0, _failures(out)
    return out


def _failures(out: str) -> str:
    """What a failed nested run says about its failures (its tail alone is the skip list)."""
    start = out.find("= FAILURES =")
    failures = out[max(start, 0) : max(start, 0) + 12000] if start >= 0 else ""
    return failures + "\n...\n" + out[-3000:]


def _passed(out: str) -> set[str]:
    return set(re.findall(r"^tests/e2e/(\S+) PASSED", out, re.MULTILINE))


@not_nested
@pytest.mark.timeout(NESTED_SECONDS + 60)
async def test_real_cluster_mode_end_to_end(cluster) -> None:
    """The whole suite in real-cluster mode, with the test's own API as "the cluster"."""
    audit = AuditTail(cluster.plane.audit_log) if on_control_plane(cluster) else None
    out = await _run_suite(cluster, "tests/e2e", "--ignore", "tests/e2e/test_real_cluster_mode.py")
    passed = _passed(out)
    assert passed >= BOTH_MODES, sorted(BOTH_MODES - passed)
    assert "real-cluster mode: the test plays kubelet" in out
    assert "real-cluster mode: the test injects API faults" in out
    # Every GPUWorkload of the run lived in a namespace the backend made, never in ml-team.
    if audit is not None:
        namespaces = {
            (event.get("objectRef") or {}).get("namespace")
            for event in audit.events()
            if event.get("verb") == "create"
            and (event.get("objectRef") or {}).get("resource") == "gpuworkloads"
        }
    else:
        objects = cluster.emulator.objects
        namespaces = {key[1] for key in objects if getattr(key[0], "plural", "") == "gpuworkloads"}
    assert namespaces and all(str(ns).startswith("gse2e-") for ns in namespaces), namespaces


@not_nested
@pytest.mark.timeout(NESTED_SECONDS + 60)
async def test_installed_operator_mode_end_to_end(cluster, start_operator) -> None:
    """GPU_SIZER_E2E_OPERATOR=installed: the suite starts no operator; one serving every
    namespace (here started by this test, as the chart's would be) handles its workloads."""
    cluster.operator_scope = ["-A"]  # every namespace, as the chart's operator serves
    start_operator("--unschedulable-timeout", "600")
    out = await _run_suite(
        cluster,
        "tests/e2e/test_cluster_semantics.py",
        "tests/e2e/test_lifecycle.py",
        operator="installed",
    )
    semantics = {t for t in BOTH_MODES if t.startswith(("test_cluster_semantics", "test_lifec"))}
    expected = semantics - {f"test_cluster_semantics.py::{RESTART}"}
    assert _passed(out) >= expected, sorted(expected - _passed(out))
    assert f"{RESTART} SKIPPED" in out
    assert real_cluster.LOCAL_OPERATOR_REASON[:40] in out
