"""The chart's crds/ holds the generated GPUWorkload CRD byte for byte (hack/gen-crd.py writes
both copies from gpu_sizer.api), plus kopf's two peering CRDs, which only the chart needs."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from .conftest import CHART, KUBE_VERSION, ROOT

TOP_LEVEL = ROOT / "crds"
CHART_CRDS = CHART / "crds"
# Present only in the chart: the peering object must exist before replicas start, and Helm
# installs crds/ before any template (see the chart README).
CHART_ONLY = {"kopfpeerings.kopf.dev.yaml", "clusterkopfpeerings.kopf.dev.yaml"}


def yaml_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.yaml"))}


def test_chart_crds_equal_top_level_crds() -> None:
    top = yaml_files(TOP_LEVEL)
    assert "gpuworkloads.gpusizer.dev.yaml" in top, (
        "crds/gpuworkloads.gpusizer.dev.yaml is missing: generate it with hack/gen-crd.py"
    )
    chart = yaml_files(CHART_CRDS)
    for name, content in top.items():
        assert chart.get(name) == content, (
            f"charts/gpu-sizer/crds/{name} differs from crds/{name}: run hack/gen-crd.py"
        )
    assert set(chart) - set(top) == CHART_ONLY


@pytest.mark.parametrize("name", sorted(CHART_ONLY))
def test_peering_crds_are_valid(name: str) -> None:
    crd = yaml.safe_load((CHART_CRDS / name).read_text())
    kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)
    assert crd["spec"]["group"] == "kopf.dev"
    assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.kopf.dev"
    assert name == f"{crd['metadata']['name']}.yaml"


def test_helm_sees_the_crds(chart: object) -> None:
    names = {c["filename"].rsplit("/", 1)[-1] for c in chart.crds}  # type: ignore[attr-defined]
    assert names >= CHART_ONLY
