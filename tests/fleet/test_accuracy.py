"""``gpu-sizer accuracy`` over exported GPUWorkloads (issue 15, item 4): median, p90, worst and
count of the estimate's relative error by GPU class, engine, family and kind."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpu_sizer.cli import main
from gpu_sizer.records.accuracy import format_table, percentile, read_records, summarize

FIXTURE = Path(__file__).parent / "records" / "gpuworkloads.yaml"


def _summary():  # type: ignore[no-untyped-def]
    return read_records(yaml.safe_load_all(FIXTURE.read_text()))


def test_only_finished_gpu_measurements_of_the_current_spec_count() -> None:
    summary = _summary()
    assert sorted(r.name for r in summary.records) == [
        "a/llama-8b",
        "a/qwen",
        "b/mistral",
        "b/train-llama",
    ]
    assert summary.skipped == {
        "CPU smoke run (no GPU figures)": 1,
        "measurement ended OutOfMemory": 1,
        "measurement of an earlier spec": 1,
        "not measured (yet)": 1,
        "incomplete estimate (a lower bound)": 1,
    }


def test_errors_by_group() -> None:
    rows = {(r.group, r.value): r for r in summarize(_summary().records)}
    # Errors (estimated - measured) / measured: llama-8b 72 vs 70 GiB (NVML device peak
    # preferred over reserved), qwen 40 vs 44, mistral 18 vs 16, train-llama 60 vs 50 (reserved:
    # no NVML figure).
    e = {"llama": 2 / 70, "qwen": -4 / 44, "mistral": 2 / 16, "train": 10 / 50}
    every = rows[("ALL", "all")]
    assert every.count == 4
    assert every.median == pytest.approx((e["llama"] + e["mistral"]) / 2)
    # |errors| sorted: 2/70, 4/44, 2/16, 10/50; rank 0.9 * 3 = 2.7.
    assert every.p90 == pytest.approx(e["mistral"] + 0.7 * (e["train"] - e["mistral"]))
    assert every.worst == pytest.approx(e["train"])
    h100 = rows[("GPU CLASS", "nvidia-h100-80gb")]
    assert (h100.count, h100.worst) == (2, pytest.approx(e["qwen"]))
    assert rows[("ENGINE", "vllm")].count == 2
    assert rows[("ENGINE", "pytorch")].count == 1
    assert rows[("FAMILY", "llama")].count == 2
    assert rows[("KIND", "training")].median == pytest.approx(e["train"])
    assert rows[("KIND", "inference")].count == 3


def test_percentile_is_linear_between_ranks() -> None:
    assert percentile([3.0], 0.9) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)


def test_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0].split()
    assert header[:3] == ["GROUP", "VALUE", "COUNT"]
    assert "MEDIAN" in out and "P90" in out and "WORST" in out
    assert any(line.split()[:3] == ["ALL", "all", "4"] for line in out.splitlines())
    assert "+20.0 %" in out  # the worst: train-llama
    assert "skipped: 1 CPU smoke run" in out


def test_command_json_and_empty_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["accuracy", str(FIXTURE), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0] == {
        "group": "ALL",
        "value": "all",
        "count": 4,
        "median": pytest.approx(doc["rows"][0]["median"]),
        "p90": pytest.approx(doc["rows"][0]["p90"]),
        "worst": pytest.approx(0.2),
    }
    assert doc["skipped"]["not measured (yet)"] == 1
    empty = tmp_path / "unmeasured.yaml"
    empty.write_text("apiVersion: gpusizer.dev/v1alpha1\nkind: GPUWorkload\nspec: {}\n")
    assert main(["accuracy", str(empty)]) == 1
    assert "no measured GPUWorkload" in capsys.readouterr().err
    assert main(["accuracy", str(tmp_path / "missing.yaml")]) == 2


def test_the_table_text_names_the_error_definition() -> None:
    assert "error = (estimated - measured) / measured" in format_table(_summary())


def test_the_table_of_the_fixture_is_pinned(capsys: pytest.CaptureFixture[str]) -> None:
    # Pinned output (tests/fleet/records/gpuworkloads.table.txt); the figures follow from the
    # hand-chosen errors of test_errors_by_group.
    assert main(["accuracy", str(FIXTURE)]) == 0
    pinned = (FIXTURE.parent / "gpuworkloads.table.txt").read_text()
    assert capsys.readouterr().out == pinned
