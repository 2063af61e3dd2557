"""`gpu-sizer operator` flags: the common brief's names, env GPU_SIZER_<FLAG> defaults."""

from __future__ import annotations

import argparse

import pytest

from gpu_sizer.catalog import DEFAULT_CATALOG
from gpu_sizer.controller.options import add_operator_arguments, options_from


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_operator_arguments(p)
    return p.parse_args(list(argv))


def test_defaults_and_flags() -> None:
    opts = options_from(parse("-A", "--standalone", "--unschedulable-timeout", "30"))
    assert opts.all_namespaces and opts.standalone and opts.unschedulable_timeout == 30
    assert opts.metrics_port == 8080 and opts.health_port == 8081 and opts.webhook
    assert opts.measurement_backend == "kubernetes" and opts.catalog == DEFAULT_CATALOG


def test_env_vars_are_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_SIZER_NAMESPACE", "a,b")
    monkeypatch.setenv("GPU_SIZER_METRICS_PORT", "9090")
    monkeypatch.setenv("GPU_SIZER_NO_WEBHOOK", "true")
    monkeypatch.setenv("GPU_SIZER_PEERING", "gpu-sizer")
    monkeypatch.setenv("POD_NAMESPACE", "gpu-sizer-system")
    opts = options_from(parse())
    assert opts.namespaces == ("a", "b") and opts.metrics_port == 9090
    assert not opts.webhook and opts.peering == "gpu-sizer" and not opts.standalone
    assert opts.pod_namespace == "gpu-sizer-system"


def test_namespace_or_all_is_required() -> None:
    with pytest.raises(ValueError, match="--all-namespaces"):
        options_from(parse())


def test_catalog_file_overrides_by_name(tmp_path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text("classes:\n  - name: nvidia-l4\n    rank: 1000\n")
    opts = options_from(parse("-A", "--catalog", str(path)))
    assert next(c for c in opts.catalog if c.name == "nvidia-l4").rank == 1000
