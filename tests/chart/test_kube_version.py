"""Chart.yaml's ``kubeVersion`` is what the chart really needs: the CRDs and every template
validate against the API schemas of the floor it claims and of the newest Kubernetes, the version
below the floor refuses the GPUWorkload CRD (so the floor is not higher than it must be), and the
chart README states the same range. The templates are validated against the floor's schemas in
test_render.py (every values file).

kubernetes-validate ships each release's OpenAPI schemas; ``strict`` fails on unknown fields,
which is what ``kubectl apply`` meets on an API server with strict field validation (the default
since Kubernetes 1.27). The running server's own check is tests/install/ (1.36.2).
"""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml

from .conftest import CHART

CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
_match = re.fullmatch(r">=(\d+)\.(\d+)\.0-0", CHART_YAML["kubeVersion"])
assert _match, f"kubeVersion {CHART_YAML['kubeVersion']!r} is not a plain floor '>=X.Y.0-0'"
FLOOR = (int(_match[1]), int(_match[2]))
NEWEST = kubernetes_validate.utils.latest_version()
CRDS = [
    doc
    for path in sorted((CHART / "crds").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc
]


def version(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}.0"


@pytest.mark.parametrize("kube", [version(FLOOR), NEWEST])
@pytest.mark.parametrize("crd", CRDS, ids=lambda d: d["metadata"]["name"])
def test_every_crd_validates_from_the_floor_to_the_newest(
    crd: dict[str, object], kube: str
) -> None:
    kubernetes_validate.validate(crd, kube, strict=True)


def test_the_version_below_the_floor_refuses_the_gpuworkload_crd() -> None:
    """1.27's CustomResourceDefinition has no ``fieldPath`` on validation rules (added in 1.28,
    kubernetes/kubernetes#118041): claiming 1.27 would promise an install that fails."""
    below = version((FLOOR[0], FLOOR[1] - 1))
    (crd,) = [c for c in CRDS if c["metadata"]["name"] == "gpuworkloads.gpusizer.dev"]
    with pytest.raises(kubernetes_validate.ValidationError, match="fieldPath"):
        kubernetes_validate.validate(crd, below, strict=True)


def test_the_chart_readme_states_the_floor() -> None:
    text = (CHART / "README.md").read_text()
    section = text.split("## Supported Kubernetes versions", 1)[1].split("\n## ", 1)[0]
    assert f"Kubernetes {FLOOR[0]}.{FLOOR[1]} or later" in section
    assert f'`kubeVersion: "{CHART_YAML["kubeVersion"]}"`' in section
