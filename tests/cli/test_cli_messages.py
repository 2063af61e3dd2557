"""Messages for the mistakes newcomers made (issue 14): each names the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_sizer.api import InvalidWorkload, parse_workload
from gpu_sizer.cli import main

ROOT = Path(__file__).resolve().parents[2]
FITS = ROOT / "examples" / "llama-3-8b-vllm-bf16.yaml"
TOO_BIG = ROOT / "examples" / "llama-3-8b-too-big-for-l4.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _problems(doc: object) -> list[str]:
    with pytest.raises(InvalidWorkload) as raised:
        parse_workload(doc)
    return [str(p) for p in raised.value.problems]


def test_a_misspelt_top_level_key_gets_a_did_you_mean() -> None:
    doc = yaml.safe_load(FITS.read_text())
    doc["spce"] = doc.pop("spec")
    problems = _problems(doc)
    assert problems[0] == (
        "spce: unknown field; did you mean spec? allowed: apiVersion, kind, metadata, spec, status"
    )
    assert "spec: required field is missing" in problems


def test_status_is_a_known_top_level_field() -> None:
    doc = yaml.safe_load(FITS.read_text())
    doc["status"] = {"phase": "Ready"}  # gpu-sizer estimate -o yaml, read back
    parse_workload(doc)


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [
        ("7.6e9", "must be an integer, not '7.6e9': write 7600000000"),  # YAML reads it as text
        ("7.6e+9", "must be an integer, not 7600000000.0: write 7600000000"),  # a float
        ("7.5", "must be an integer, not 7.5"),
    ],
)
def test_integers_written_in_exponent_form(text: str, suggestion: str) -> None:
    doc = yaml.safe_load(FITS.read_text())
    del doc["spec"]["model"]["architecture"]
    doc["spec"]["model"]["parameterCount"] = yaml.safe_load(text)
    (problem,) = _problems(doc)
    assert problem == f"spec.model.parameterCount: {suggestion}"


def test_no_write_hint_for_a_number_out_of_the_field_bounds() -> None:
    """``1e30`` is a whole number, but suggesting all 31 digits of it for a field capped at
    16,777,216 tokens would only earn a second error; say the bound instead."""
    doc = yaml.safe_load(FITS.read_text())
    doc["spec"]["inference"]["maxModelLen"] = "1e30"
    (problem,) = _problems(doc)
    assert problem == (
        "spec.inference.maxModelLen: must be an integer, not '1e30', and at most 16777216"
    )


@pytest.mark.parametrize("kind", ["GpuWorkload", "gpuworkload", "GPUWorkloads", "GPUWorkLoad"])
def test_a_misspelt_kind_is_an_error_not_a_skipped_document(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(FITS.read_text().replace("kind: GPUWorkload", f"kind: {kind}"))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 2
    assert (
        f"{path}: inference/llama-3-8b-chat: kind: must be GPUWorkload, not '{kind}' "
        "(kinds are case-sensitive)"
    ) in err
    assert "skipped" not in err


def test_rejected_rows_show_no_gpu_count_without_a_class(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "estimate", str(TOO_BIG))
    assert code == 1
    row = out.splitlines()[1].split()
    assert row[:2] == ["inference/llama-3-8b-on-l4", "-"]
    assert "x1" not in row


def test_catalog_help_explains_rank(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["catalog", "--help"])
    out, _ = capsys.readouterr()
    flat = " ".join(out.split())
    assert "RANK is the order of preference" in flat
    assert "first class in rank order (lowest first)" in flat


def test_a_parameter_count_only_spec_says_once_what_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(FITS.read_text())
    del doc["spec"]["model"]["architecture"]
    doc["spec"]["model"]["parameterCount"] = 8_030_261_248
    doc["spec"]["model"]["revision"] = "main"
    path = tmp_path / "bare.yaml"
    path.write_text(yaml.safe_dump(doc))
    code, _, err = run(capsys, "estimate", str(path))
    assert code == 3  # Incomplete
    lines = [line for line in err.splitlines() if "spec.model.architecture" in line]
    assert len(lines) == 1, err  # one line, not a note per component plus a warning
    assert "KV cache not counted" in lines[0] and "activations" in lines[0]
    assert "Warning" not in err
