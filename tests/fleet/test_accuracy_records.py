"""``gpu-sizer accuracy`` over shared measurement records (issue 15, items 3 and 4): exported
GPUMeasurements, a mix with GPUWorkloads (each measurement counted once), the cluster itself
(kubeconfig, the official kubernetes client, against the kmock emulator on loopback), and the
calibration factors learned from records."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpu_sizer_testbed.emulator import LoopbackCluster, crd_document

from gpu_sizer.api import GROUP, VERSION
from gpu_sizer.api.record import parse_record
from gpu_sizer.cli import main
from gpu_sizer.records.accuracy import read_records
from gpu_sizer.records.calibration import Component, learn, sample_from_record, samples_from

HERE = Path(__file__).parent / "records"
RECORDS = HERE / "gpumeasurements.yaml"
MIB = 1 << 20
GPUM = (GROUP, VERSION, "gpumeasurements")
GW = (GROUP, VERSION, "gpuworkloads")
CRDS = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")


def _items() -> list[dict[str, Any]]:
    return list(yaml.safe_load(RECORDS.read_text())["items"])


def test_the_fixture_is_made_of_valid_records() -> None:
    assert all(parse_record(item) is not None for item in _items())


def test_the_table_of_the_records_is_pinned(capsys: pytest.CaptureFixture[str]) -> None:
    # Errors by hand (the fixture's header): -4.8 %, -9.1 %, +5.3 %, +2.9 %, -16.7 %.
    assert main(["accuracy", str(RECORDS)]) == 0
    assert capsys.readouterr().out == (HERE / "gpumeasurements.table.txt").read_text()


def _workload(name: str, measurement: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "GPUWorkload",
        "metadata": {"namespace": "team-b", "name": name},
        "spec": {"model": {"architecture": {"modelType": "llama"}}, "inference": {}},
        "status": {
            "specHash": "h",
            "estimate": {"perGpu": {"totalBytes": 10000 * MIB}},
            "measurement": {
                "specHash": "h",
                "gpuClass": "nvidia-l4",
                "device": "cuda",
                "completedAt": "2026-11-30T22:00:00Z",
                "peakDeviceUsedBytes": 20000 * MIB,
                **measurement,
            },
        },
    }


def test_a_measurement_counts_once_whether_produced_or_reused() -> None:
    serve_a = _items()[0]
    producer = _workload("producer", {"measurementKey": serve_a["spec"]["key"]})
    reuser = _workload("reuser", {"reusedFrom": serve_a["metadata"]["name"]})
    own = _workload("own", {})  # measured before records existed: counts on its own
    summary = read_records([*_items(), producer, reuser, own])
    names = sorted(r.name for r in summary.records)
    assert len(names) == 6 and "team-b/own" in names
    assert "team-b/producer" not in names and "team-b/reuser" not in names
    assert summary.skipped["reused a shared record (counted once, as its GPUMeasurement)"] == 1
    assert (
        summary.skipped["measured for a GPUMeasurement in the input (counted once, as the record)"]
        == 1
    )
    # The same rule for calibration samples.
    assert len(samples_from([*_items(), producer, reuser, own])) == 6


def test_calibration_learns_from_records() -> None:
    sample, _ = sample_from_record(_items()[0])
    assert sample is not None and (sample.engine, sample.gpu_class) == ("transformers", "nvidia-l4")
    assert sample.analytic[Component.Tensors] == 9000 * MIB
    assert sample.measured[Component.Tensors] == 9500 * MIB
    assert sample.measured[Component.RuntimeOverhead] == 1000 * MIB
    assert sample_from_record(_items()[5])[0] is None  # OutOfMemory
    assert sample_from_record(_items()[6])[1] == "incomplete estimate (a lower bound)"
    factors = learn(samples_from(_items()))
    assert factors[("transformers", "nvidia-l4", Component.Total)].records == 3
    # A calibrated record estimate is read at its analytic figures.
    calibrated = copy.deepcopy(_items()[0])
    calibrated["spec"]["estimate"]["perGpu"]["totalBytes"] = 13000 * MIB
    calibrated["spec"]["estimate"]["calibration"] = {
        "mode": "Apply",
        "gpuClass": "nvidia-l4",
        "adjusted": True,
        "analyticTotalBytes": 10000 * MIB,
        "analyticRuntimeOverheadBytes": 1000 * MIB,
    }
    assert parse_record(calibrated) is not None  # RecordEstimate.calibration
    again, _ = sample_from_record(calibrated)
    assert again is not None and again.analytic[Component.Total] == 10000 * MIB


def test_from_cluster_lists_records_and_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> int:
        extra = {
            GPUM: dict(
                kind="GPUMeasurement",
                singular="gpumeasurement",
                namespaced=False,
                verbs={"get", "list", "watch", "create", "patch", "delete"},
            )
        }
        async with LoopbackCluster(extra=extra) as cluster:
            await cluster.create(CRDS, crd_document())
            for item in _items():
                await cluster.create(GPUM, item)
            reuser = _workload("reuser", {"reusedFrom": _items()[0]["metadata"]["name"]})
            await cluster.create(GW, reuser)
            args = ["accuracy", "--from-cluster", "--kubeconfig", cluster.kubeconfig]
            # The client is synchronous: it runs in a thread while the emulator serves here.
            return await asyncio.to_thread(main, args)

    assert asyncio.run(scenario()) == 0
    out = capsys.readouterr().out
    pinned = (HERE / "gpumeasurements.table.txt").read_text()
    # The same table as the exported records; the workload that reused one is skipped.
    assert out.split("\nskipped: ")[0] == pinned.split("\nskipped: ")[0]
    assert "1 reused a shared record" in out


def test_from_cluster_without_a_cluster_says_how_to_fix_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-kubeconfig"
    assert main(["accuracy", "--from-cluster", "--kubeconfig", str(missing)]) == 2
    assert "--kubeconfig" in capsys.readouterr().err
    assert main(["accuracy"]) == 2
    assert "--from-cluster" in capsys.readouterr().err


def test_the_operator_learns_from_trusted_records_only() -> None:
    """Records no tenant could have written (scope Cluster) teach the cluster, one vote per
    namespace, from five records in three namespaces up; a namespace's own records (scope
    Namespace) and a workload's status are no cluster-wide evidence (a tenant who may write
    them could forge them); a record that goes away is learned without."""
    from gpu_sizer.controller.options import Options
    from gpu_sizer.controller.reconciler import Reconciler
    from gpu_sizer.measurement.backends import KubernetesJobBackend

    reconciler = Reconciler(Options(), KubernetesJobBackend())
    usable = [
        i
        for i in _items()
        if i["spec"]["engine"] == "transformers" and "reason" not in i["spec"]["result"]
    ][:3]
    assert len(usable) == 3
    records = []
    # Five trusted records: serve-a..c in team-a..c, and serve-a and serve-b again, measured
    # for team-a and team-c (five records, three namespaces).
    for n, (base, team) in enumerate(
        zip([*usable, *usable[:2]], ("team-a", "team-b", "team-c", "team-a", "team-c"), strict=True)
    ):
        record = copy.deepcopy(base)
        record["metadata"]["name"] = f"{base['metadata']['name'][:40]}-{n}"
        record["spec"]["scope"] = "Cluster"
        record["spec"]["result"]["sourceNamespace"] = team
        record["spec"]["result"]["sourceName"] = f"serve-{n}"
        records.append(record)
    # A namespace's own record in a fourth namespace with a large ratio: not the cluster's.
    forged = copy.deepcopy(usable[0])
    forged["metadata"]["name"] = "gpum-forged"
    forged["spec"]["scope"] = "Namespace"
    forged["spec"]["namespace"] = "team-x"
    forged["spec"]["result"]["sourceNamespace"] = "team-x"
    forged["spec"]["result"]["peakDeviceUsedBytes"] *= 3
    own = _workload("own", {})
    own["spec"]["inference"] = {"engine": "transformers"}
    reconciler._workloads = {("team-b", "own"): [own]}
    reconciler._records = {r["metadata"]["name"]: [r] for r in [*records, forged]}
    cal = reconciler.calibration()
    assert cal is not None and cal.factors is not None
    factor = cal.factors[("transformers", "nvidia-l4", Component.Total)]
    assert (factor.records, factor.namespaces, factor.usable) == (5, 3, True)
    assert "team-b/own" not in factor.sources and not any("team-x" in s for s in factor.sources)
    # team-x's own record is its own: it may raise team-x's estimates only (one record: not
    # enough to be used even there).
    assert ("transformers", "nvidia-l4", Component.Total) in cal.by_namespace["team-x"]
    reconciler.record_seen("DELETED", records[1])
    cal = reconciler.calibration()
    assert cal is not None and cal.factors is not None
    factor = cal.factors[("transformers", "nvidia-l4", Component.Total)]
    assert (factor.records, factor.namespaces, factor.usable) == (4, 2, False)
