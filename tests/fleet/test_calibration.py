"""Calibration from the fleet (issue 15, item 4): factors per (engine, GPU class, component)
learned from measured GPUWorkloads, bounded, shown in status.estimate.calibration and, with
apply, moving the verdict and the recommendation (gpu_sizer.records.calibration,
gpu_sizer.sizing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_sizer.api import CalibrationMode, parse_workload
from gpu_sizer.cli import main
from gpu_sizer.records.calibration import (
    MAX_FACTOR,
    Calibration,
    Component,
    Factor,
    learn,
    parse_mode,
    sample_from_workload,
    samples_from,
)
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

RECORDS = Path(__file__).parent / "records" / "calibration.yaml"
EXAMPLE = Path(__file__).parents[2] / "examples" / "llama-2-13b-lora.yaml"
MIB = 1 << 20
A6000 = "nvidia-rtx-a6000"


def _records() -> list[dict[str, Any]]:
    return list(yaml.safe_load(RECORDS.read_text())["items"])


def _factors() -> dict[tuple[str, str, Component], Factor]:
    return learn(samples_from(_records()))


def test_factors_are_the_median_ratio_per_engine_class_and_component() -> None:
    # Hand-computed in the fixture's header.
    f = _factors()
    teams = tuple(f"team-{x}/finetune-{i}" for i, x in enumerate("abcde", 1))
    assert f[("pytorch", A6000, Component.Tensors)] == Factor(5, 1.3, 5, sources=teams)
    assert f[("pytorch", A6000, Component.RuntimeOverhead)] == Factor(5, 1.2, 5, sources=teams)
    assert f[("pytorch", A6000, Component.Total)] == Factor(5, 1.29, 5, sources=teams)
    # NVML only (no PyTorch peaks): the total alone.
    assert ("vllm", "nvidia-h100-80gb", Component.Tensors) not in f
    assert f[("vllm", "nvidia-h100-80gb", Component.Total)].records == 1
    # Over-estimates: observed 0.8, the factor stays at the analytic floor.
    phi = f[("transformers", "nvidia-l4", Component.Total)]
    assert (phi.observed_ratio, phi.factor, phi.usable) == (0.8, 1.0, True)
    # The CPU smoke run gives nothing.
    assert sum(x.records for k, x in f.items() if k[2] is Component.Total) == 11


def test_factors_are_bounded_and_need_five_records() -> None:
    assert Factor(9, 3.7).factor == MAX_FACTOR
    assert Factor(9, 0.5).factor == 1.0
    assert not Factor(4, 1.2, 4).usable
    assert not Factor(9, 1.2, 2).usable  # two namespaces: not enough for everyone's estimate
    assert Factor(9, 1.2, 3).usable and Factor(5, 1.2, 1, scope="Namespace").usable
    # Deterministic: the order of the records does not matter.
    assert learn(reversed(samples_from(_records()))) == _factors()


def test_a_calibrated_estimate_is_learned_from_its_analytic_figures() -> None:
    obj = _records()[0]
    est = obj["status"]["estimate"]
    est["perGpu"]["totalBytes"] = 30000 * MIB  # as written with --calibration=apply
    est["calibration"] = {
        "adjusted": True,
        "analyticTotalBytes": 22000 * MIB,
        "analyticRuntimeOverheadBytes": 2000 * MIB,
    }
    sample, _ = sample_from_workload(obj)
    assert sample is not None
    assert sample.analytic[Component.Total] == 22000 * MIB
    assert sample.analytic[Component.Tensors] == 20000 * MIB


def _spec(**placement: Any):  # type: ignore[no-untyped-def]
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"].setdefault("placement", {}).update(placement)
    return parse_workload(doc)


def test_report_shows_the_factors_and_changes_no_figure() -> None:
    spec = _spec()
    plain = assess(spec)
    report = assess(spec, calibration=Calibration(CalibrationMode.Report, _factors()))
    assert plain.recommendation is not None and report.recommendation is not None
    assert plain.recommendation.gpu_class == report.recommendation.gpu_class == A6000
    assert report.estimate.per_gpu == plain.estimate.per_gpu
    cal = report.estimate.calibration
    assert cal is not None and cal.mode is CalibrationMode.Report and not cal.adjusted
    assert [(f.component, f.factor, f.records, f.applied) for f in cal.factors] == [
        ("RuntimeOverhead", 1.2, 5, False),
        ("Tensors", 1.3, 5, False),
        ("Total", 1.29, 5, False),
    ]
    assert cal.analytic_total_bytes == plain.estimate.per_gpu.total_bytes
    assert "not applied" in cal.message


def test_apply_scales_the_components_and_the_verdict_follows() -> None:
    apply = Calibration(CalibrationMode.Apply, _factors())
    # Held to the A6000 with 5 % headroom: the calibrated figures are the estimate.
    spec = _spec(gpuClasses=[A6000], minHeadroomFraction=0.05)
    plain = assess(spec).estimate.per_gpu
    got = assess(spec, calibration=apply)
    per, cal = got.estimate.per_gpu, got.estimate.calibration
    assert cal is not None and cal.adjusted and cal.gpu_class == A6000
    # Tensors x1.3 and runtime overhead x1.2; Total is not applied on top of them.
    assert per.weights_bytes == -(-plain.weights_bytes * 13 // 10)
    assert per.activation_bytes == -(-plain.activation_bytes * 13 // 10)
    assert per.runtime_overhead_bytes == -(-plain.runtime_overhead_bytes * 12 // 10)
    fields = [
        "weights_bytes",
        "quantization_overhead_bytes",
        "kv_cache_bytes",
        "activation_bytes",
        "gradient_bytes",
        "optimizer_state_bytes",
        "master_weight_bytes",
        "communication_buffer_bytes",
        "runtime_overhead_bytes",
    ]
    assert per.total_bytes - plain.total_bytes == sum(
        getattr(per, f) - getattr(plain, f) for f in fields
    )
    applied = {f.component: f for f in cal.factors}
    assert applied["Tensors"].applied and applied["RuntimeOverhead"].applied
    assert not applied["Total"].applied
    assert applied["Tensors"].after_bytes > applied["Tensors"].before_bytes
    assert cal.analytic_total_bytes == plain.total_bytes
    assert got.recommendation is not None
    assert got.recommendation.required_bytes_per_gpu == per.total_bytes
    assert "Tensors x1.3 (5 records)" in cal.message
    # With 15 % headroom the calibrated need no longer fits the A6000; the analytic one does.
    strict = assess(_spec(gpuClasses=[A6000], minHeadroomFraction=0.15), calibration=apply)
    assert strict.verdict is Verdict.NoSafeHeadroom
    assert assess(_spec(gpuClasses=[A6000], minHeadroomFraction=0.15)).verdict is Verdict.Fits
    # Any class allowed: the A6000 is ruled out, the next class (no records: analytic) chosen.
    moved = assess(_spec(minHeadroomFraction=0.15), calibration=apply)
    assert moved.recommendation is not None and moved.recommendation.gpu_class != A6000
    cal = moved.estimate.calibration
    assert cal is not None and not cal.adjusted and cal.factors == []
    assert cal.gpu_class == moved.recommendation.gpu_class
    assert {(f.gpu_class, f.component) for f in cal.ruled_out} == {
        (A6000, "Tensors"),
        (A6000, "RuntimeOverhead"),
        (A6000, "Total"),
    }
    assert moved.estimate.per_gpu == assess(_spec()).estimate.per_gpu
    assert any(f"ruled out {A6000}" in n for n in moved.estimate.notes)
    # Judged again with the factors its status holds: the same decision, whatever was learned.
    again = assess(
        _spec(minHeadroomFraction=0.15),
        calibration=Calibration.frozen(CalibrationMode.Apply, cal),
    )
    assert again.estimate == moved.estimate
    assert again.recommendation == moved.recommendation


def test_over_estimates_are_never_corrected_downwards() -> None:
    records = [
        {
            **r,
            "spec": {"model": {}, "training": {}},
            "status": {
                **r["status"],
                "measurement": {**r["status"]["measurement"], "gpuClass": A6000},
            },
        }
        for r in _records()
        if r["metadata"]["name"].startswith("phi-")
    ]
    factors = learn(samples_from(records))
    spec = _spec(gpuClasses=[A6000])
    got = assess(spec, calibration=Calibration(CalibrationMode.Apply, factors))
    assert got.estimate.per_gpu == assess(spec).estimate.per_gpu
    cal = got.estimate.calibration
    assert cal is not None and not cal.adjusted
    assert [(f.component, f.observed_ratio, f.factor) for f in cal.factors] == [("Total", 0.8, 1.0)]


def test_off_and_no_factors_leave_the_estimate_alone() -> None:
    spec = _spec()
    plain = assess(spec).estimate
    assert assess(spec, calibration=Calibration(CalibrationMode.Off, _factors())).estimate == plain
    assert assess(spec, calibration=Calibration(CalibrationMode.Apply, {})).estimate == plain
    assert parse_mode("APPLY") is CalibrationMode.Apply
    with pytest.raises(ValueError, match="off, report or apply"):
        parse_mode("sometimes")


def test_estimate_command_reports_and_applies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"].setdefault("placement", {})["minHeadroomFraction"] = 0.15
    workload = tmp_path / EXAMPLE.name
    workload.write_text(yaml.safe_dump(doc))
    args = ["estimate", str(workload), "--records", str(RECORDS), "-o", "json"]
    assert main(args) == 0
    status = json.loads(capsys.readouterr().out)["status"]
    assert status["recommendation"]["gpuClass"] == A6000
    assert status["estimate"]["calibration"]["mode"] == "Report"
    assert main([*args, "--calibration", "apply"]) == 0
    status = json.loads(capsys.readouterr().out)["status"]
    assert status["recommendation"]["gpuClass"] != A6000
    assert any("ruled out nvidia-rtx-a6000" in n for n in status["estimate"]["notes"])
    assert main([*args, "--calibration", "off"]) == 0
    assert "calibration" not in json.loads(capsys.readouterr().out)["status"]["estimate"]


def test_a_reused_measurement_is_not_a_sample_of_the_workload_that_reused_it() -> None:
    obj = _records()[0]
    obj["status"]["measurement"]["reusedFrom"] = "gpum-0123"
    assert sample_from_workload(obj) == (None, "reused a shared record")
