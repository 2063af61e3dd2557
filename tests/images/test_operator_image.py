"""The operator image as built (``docker/operator.Dockerfile``), checked from inside.

Every command runs as the pod runs it: the image's numeric user, a read-only root filesystem and
a writable ``/tmp`` volume (:mod:`tests.images.buildah`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpu_sizer import __version__
from tests.images.buildah import Container, Store, Volume, run_leftovers

ROOT = Path(__file__).resolve().parents[2]
#: Distributions and modules of the probe and of the test bed (kmock's emulator included),
#: never the operator's runtime.
NOT_IN_OPERATOR = {
    "distributions": ["torch", "diffusers", "transformers", "gpu-sizer-testbed", "kmock"],
    "modules": ["torch", "gpu_sizer_testbed", "kmock", "gpu_sizer.controller.emulator"],
}
FIND_ABSENT = """
import importlib.metadata as md, importlib.util as iu, json, sys
want = json.loads(sys.argv[1])
names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in md.distributions()}
def found(module):
    try:
        return iu.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
print(json.dumps({
    "distributions": sorted(n for n in want["distributions"] if n in names),
    "modules": sorted(m for m in want["modules"] if found(m)),
}))
"""


@pytest.fixture
def tmp_volume(tmp_path: Path) -> Volume:
    """A writable /tmp for the container (an emptyDir: world-writable, sticky)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    folder.chmod(0o1777)
    return Volume(folder, "/tmp")


def test_entry_point_is_gpu_sizer_and_starts(
    store: Store, operator_image: str, operator: Container, tmp_volume: Volume
) -> None:
    config = store.inspect(operator_image)["OCIv1"]["config"]
    assert config["Entrypoint"] == ["gpu-sizer"]
    assert config["Cmd"] == ["operator", "--all-namespaces"]
    before = operator.run_entries()
    proc = operator.run(["gpu-sizer", "--version"], volumes=[tmp_volume])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == f"gpu-sizer {__version__}"
    assert run_leftovers(before, operator) == []


def test_estimates_from_its_packaged_data_with_a_read_only_root(
    operator: Container, tmp_volume: Volume
) -> None:
    """The wheel carries the catalog and the rest of its data files, and the sizing path (what
    the webhook and the reconciler run) writes nothing outside /tmp."""
    examples = Volume(ROOT / "examples", "/examples", read_only=True)
    argv = ["gpu-sizer", "estimate", "/examples/llama-3-8b-vllm-bf16.yaml", "-o", "json"]
    proc = operator.run(argv, volumes=[tmp_volume, examples])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Read-only file system" not in proc.stderr
    status = json.loads(proc.stdout)["status"]
    assert status["recommendation"]["gpuClass"] == "nvidia-l4"
    fits = {c["type"]: c["reason"] for c in status["conditions"]}["HeadroomSufficient"]
    assert fits == "EstimateFits", status["conditions"]


def test_runs_as_a_numeric_non_root_user(
    store: Store, operator_image: str, operator: Container, tmp_volume: Volume
) -> None:
    user = store.inspect(operator_image)["OCIv1"]["config"]["User"]
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user), user  # runAsNonRoot needs a number
    proc = operator.run(
        ["python", "-c", "import os; print(os.getuid(), os.getgid())"], volumes=[tmp_volume]
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == user.split(":")


def absent(operator: Container, tmp_volume: Volume, wanted: dict[str, list[str]]) -> Any:
    proc = operator.run(["python", "-c", FIND_ABSENT, json.dumps(wanted)], volumes=[tmp_volume])
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_holds_no_torch_and_no_emulator(operator: Container, tmp_volume: Volume) -> None:
    """The operator's image is its wheel without extras: PyTorch and the libraries that build
    models belong to the probe image, kmock and the loopback test bed to gpu-sizer-testbed."""
    assert absent(operator, tmp_volume, NOT_IN_OPERATOR) == {"distributions": [], "modules": []}
