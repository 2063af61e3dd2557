"""Configuration errors stop the operator at startup with the reason, instead of retrying."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.e2e.conftest import ROOT


def test_webhook_without_certificates_or_flags_exits_with_the_reason(cluster) -> None:
    kubeconfig = getattr(cluster, "operator_kubeconfig", cluster.kubeconfig)
    env = dict(os.environ, KUBECONFIG=kubeconfig, PYTHONPATH=str(ROOT / "operator"))
    env.pop("POD_NAMESPACE", None)
    argv = [sys.executable, "-m", "gpu_sizer.cli", "operator", "-A", "--standalone"]
    argv += ["--metrics-port", "0", "--health-port", "0"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "--webhook-tls-secret" in done.stderr and "--no-webhook" in done.stderr
    assert "failed permanently" in done.stderr


def test_bad_catalog_is_a_usage_error() -> None:
    argv = [
        sys.executable,
        "-m",
        "gpu_sizer.cli",
        "operator",
        "-A",
        "--catalog",
        "/nonexistent.yaml",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "operator"))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "/nonexistent.yaml" in done.stderr
