"""Fixtures for the chart tests: the chart rendered offline by Helm's own Go SDK
(helm-python-sdk, no helm binary, no cluster), values files, and parsed manifests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-sizer"
VALUES_DIR = Path(__file__).parent / "values"
RELEASE = "gs"
NAMESPACE = "gpu-sizer"
# The Kubernetes version manifests are validated against and lint runs for.
KUBE_VERSION = "1.34.0"

VALUE_FILES = sorted(VALUES_DIR.glob("*.yaml"))

Manifest = dict[str, Any]
Render = Callable[..., list[Manifest]]


def load_values(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return values


@pytest.fixture(scope="session")
def chart() -> Iterator[Any]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render_raw(chart: Any) -> Callable[..., dict[str, str]]:
    """Template path -> rendered text, as `helm template` would print it."""

    def _render(values: dict[str, Any] | None = None, **opts: Any) -> dict[str, str]:
        opts.setdefault("name", RELEASE)
        opts.setdefault("namespace", NAMESPACE)
        opts.setdefault("is_install", True)
        result: dict[str, str] = chart.render(values or {}, **opts)
        return result

    return _render


@pytest.fixture(scope="session")
def render(render_raw: Callable[..., dict[str, str]]) -> Render:
    """Every Kubernetes object the chart renders for ``values`` (NOTES.txt left out)."""

    def _render(values: dict[str, Any] | None = None, **opts: Any) -> list[Manifest]:
        docs: list[Manifest] = []
        for path, text in sorted(render_raw(values, **opts).items()):
            if path.endswith("NOTES.txt"):
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    doc.setdefault("__template__", path)
                    docs.append(doc)
        return docs

    return _render


def strip(doc: Manifest) -> Manifest:
    """The object without the test's bookkeeping key."""
    return {k: v for k, v in doc.items() if k != "__template__"}


def by_kind(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Manifest], kind: str) -> Manifest:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def operator_container(docs: list[Manifest]) -> dict[str, Any]:
    container: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container
