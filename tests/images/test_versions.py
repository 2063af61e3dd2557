"""One version everywhere a platform team reads it: the package, the chart's default image tags,
the Dockerfiles' OCI labels and the labels of the images as built."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from gpu_sizer import __version__
from tests.images.buildah import Store

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-sizer"
DOCKERFILES = {"operator": "docker/operator.Dockerfile", "probe": "docker/probe.Dockerfile"}
TITLES = {"operator": "gpu-sizer", "probe": "gpu-sizer-probe"}
OCI = "org.opencontainers.image."


def dockerfile_labels(path: Path) -> dict[str, str]:
    """The ``LABEL key="value" ...`` pairs of a Dockerfile (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    labels: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip().upper().startswith("LABEL "):
            labels.update(re.findall(r'([\w.-]+)="([^"]*)"', line))
    return labels


def chart_image(key: str) -> str:
    """The image the chart deploys by default: ``repository:tag``, an empty tag being the
    chart's appVersion (``templates/_helpers.tpl``)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    image = values["image"] if key == "operator" else values["measurement"]["probeImage"]
    return f"{image['repository']}:{image['tag'] or app_version}"


def test_package_version_is_one() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == __version__


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_dockerfile_labels_say_the_package_version(image: str) -> None:
    labels = dockerfile_labels(ROOT / DOCKERFILES[image])
    license_ = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]
    assert labels[f"{OCI}version"] == __version__
    assert labels[f"{OCI}title"] == TITLES[image]
    assert labels[f"{OCI}licenses"] == license_
    assert labels[f"{OCI}description"]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_chart_default_tag_is_the_package_version(image: str) -> None:
    repository, tag = chart_image(image).rsplit(":", 1)
    assert tag == __version__
    assert repository.rsplit("/", 1)[1] == TITLES[image]


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_built_image_is_the_one_the_chart_names(
    image: str, store: Store, request: pytest.FixtureRequest
) -> None:
    """``hack/build-images.sh`` tags each image with the reference the chart deploys, and the
    image carries the package version in its labels."""
    name: str = request.getfixturevalue(f"{image}_image")
    assert name == chart_image(image)
    labels = store.inspect(name)["OCIv1"]["config"]["Labels"]
    assert labels[f"{OCI}version"] == __version__
    assert labels[f"{OCI}title"] == TITLES[image]
