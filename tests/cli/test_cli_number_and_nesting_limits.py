"""Files Python's own decoders refuse although they are well formed: an integer longer than the
interpreter converts (``sys.get_int_max_str_digits()``, 4300 digits) and JSON nested beyond the
decoder's recursion. Each is one line naming the file and what is wrong, and exit 2, as for any
bad input; it used to be a ``ValueError`` or ``RecursionError`` traceback and exit 1."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpu_sizer.cli import main

ROOT = Path(__file__).resolve().parents[2]
WAN_YAML = ROOT / "examples" / "wan21-t2v-1.3b-480p-4090.yaml"
WAN_HUB = ROOT / "tests" / "budget" / "diffusion" / "hub" / "Wan-AI--Wan2.1-T2V-1.3B-Diffusers"

#: Well-formed JSON nested far beyond any recursion limit.
DEEP_ARRAY = "[" * 200_000 + "]" * 200_000
DEEP_OBJECT = '{"a": ' * 100_000 + "1" + "}" * 100_000


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.mark.parametrize(
    ("old", "line"),
    [("numFrames: 81", 61), ("numLayers: 30", 41)],
    ids=["generation", "component-config"],
)
def test_estimate_refuses_an_integer_python_cannot_read_at_its_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, old: str, line: int
) -> None:
    text = WAN_YAML.read_text()
    assert old in text
    path = tmp_path / "huge.yaml"
    path.write_text(text.replace(old, old.split(":")[0] + ": " + "9" * 5000))
    code, out, err = run(capsys, "estimate", str(path))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"{path}: line {line}: invalid YAML: an integer of 5000 digits, over the 4300 Python "
        "reads: no setting is anywhere near that large; fix the value"
    ]


def test_a_catalog_with_an_integer_python_cannot_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("gpuClasses:\n- name: x\n  memoryGiB: " + "1" * 4301 + "\n")
    code, _, err = run(capsys, "catalog", "--catalog", str(catalog))
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert f"{catalog}: " in err and "an integer of 4301 digits" in err, err


def _wan(tmp_path: Path) -> Path:
    root = tmp_path / "wan"
    shutil.copytree(WAN_HUB, root)
    return root


def test_import_diffusers_refuses_an_integer_python_cannot_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = _wan(tmp_path)
    config = root / "transformer" / "config.json"
    config.write_text('{\n  "num_layers": ' + "9" * 50_000 + "\n}\n")
    code, out, err = run(capsys, "import-diffusers", str(root), "--name", "x")
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"error: {config}: an integer of 50000 digits at line 2, column 17, over the 4300 "
        "Python reads: no setting is anywhere near that large; fix the value"
    ]


@pytest.mark.parametrize(
    ("name", "text"),
    [("model_index.json", DEEP_ARRAY), ("transformer/config.json", DEEP_OBJECT)],
    ids=["model-index-array", "component-object"],
)
def test_import_diffusers_refuses_json_nested_too_deep(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, text: str
) -> None:
    root = _wan(tmp_path)
    (root / name).write_text(text)
    code, out, err = run(capsys, "import-diffusers", str(root), "--name", "x")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {root / name}: nested too deep: "), err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"num_hidden_layers": ' + "9" * 50_000 + "}", "an integer of 50000 digits at line 1"),
        (DEEP_ARRAY, "nested too deep: "),
        (DEEP_OBJECT, "nested too deep: "),
    ],
    ids=["integer", "array", "object"],
)
def test_import_hf_config_refuses_what_python_cannot_decode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    code, out, err = run(capsys, "import-hf-config", str(path), "--name", "x")
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: {expected}"), err
    assert "set_int_max_str_digits" not in err  # advice for a programmer, not for the user


def test_an_integer_python_can_read_is_still_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The limit is Python's, not a new one: a 4300-digit value reaches validation, which names
    the field and its bound."""
    root = _wan(tmp_path)
    config = root / "transformer" / "config.json"
    values = json.loads(config.read_text())
    config.write_text(json.dumps({**values, "num_layers": int("9" * 4300)}))
    code, _, err = run(capsys, "import-diffusers", str(root), "--name", "x")
    assert code == 2
    assert f"{config}: num_layers: must be between" in err, err[:500]
