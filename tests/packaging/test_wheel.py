"""The operator's wheel (``pip install gpu-sizer``, no extras) carries no test machinery: no
emulator module, no kmock import, no kmock or testbed requirement outside an extra.

The wheel is built the way docker/operator.Dockerfile builds it (``pip wheel --no-deps .``, the
declared build backend in an isolated environment), from a copy of the files that Dockerfile
copies, so that a stale ``build/`` folder in the checkout cannot hide or add a module.
"""

from __future__ import annotations

import email.parser
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: An import of kmock or the testbed anywhere in a module, at top level or inside a function.
TEST_IMPORT = re.compile(r"^\s*(?:import|from)\s+(kmock|gpu_sizer_testbed)\b", re.MULTILINE)
#: The one module that may name the testbed: ``gpu-sizer demo``'s dispatch, which imports it
#: when a user runs the demo and otherwise says how to install it (as in .importlinter).
DEMO_DISPATCH = "gpu_sizer/controller/command.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "operator",
        src / "operator",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
    )
    out = tmp_path_factory.mktemp("wheels")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "--wheel-dir", str(out), "."],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("gpu_sizer-*.whl")
    return built


def test_wheel_has_no_emulator_and_no_kmock_import(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        modules = {name: whl.read(name).decode() for name in names if name.endswith(".py")}
    assert "gpu_sizer/controller/reconciler.py" in modules  # the operator is there
    assert "gpu_sizer/api/crd.py" in modules  # so is the CRD generator crd_document() uses
    assert not [n for n in names if "emulator" in n or n.startswith("gpu_sizer_testbed")]
    importing = {
        (name, m.group(1)) for name, text in modules.items() for m in TEST_IMPORT.finditer(text)
    }
    assert importing == {(DEMO_DISPATCH, "gpu_sizer_testbed")}, importing


def test_wheel_requires_no_kmock_outside_extras(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        (metadata,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(whl.read(metadata).decode())
    requirements = [Requirement(r) for r in message.get_all("Requires-Dist") or []]
    assert any(r.name == "kopf" and r.marker is None for r in requirements)
    base = {r.name for r in requirements if r.marker is None or "extra" not in str(r.marker)}
    assert "kmock" not in base and "gpu-sizer-testbed" not in base, sorted(base)
    extras = {
        extra: {r.name for r in requirements if r.marker and r.marker.evaluate({"extra": extra})}
        for extra in message.get_all("Provides-Extra") or []
    }
    # The demo's API servers come with the demo extra (and the tests'), kmock only through it.
    assert "gpu-sizer-testbed" in extras["demo"] and "gpu-sizer-testbed" in extras["test"]
    assert not any("kmock" in names for names in extras.values()), extras
