"""Estimate versus measurement across a fleet: ``gpu-sizer accuracy``. Pure.

Every GPU measurement is also a test of the estimate it was taken against. This module reads
exported objects (``kubectl get gpumeasurements -o yaml`` and/or ``kubectl get gpuworkloads -A
-o yaml``: ``List`` documents, or several YAML/JSON documents; the CLI can also list them from
the cluster) and tabulates the relative error of the estimate per GPU class, engine, model
family and workload kind.

A shared measurement record (``GPUMeasurement``, :mod:`gpu_sizer.api.record`) is one record:
its ``spec.estimate.perGpu.totalBytes`` against the peak of its ``spec.result``, grouped by its
``gpuClass``, ``engine``, ``modelFamily`` and ``workloadKind``; a record whose estimate's
verdict is ``Incomplete`` is skipped. A GPUWorkload that reused a record
(``status.measurement.reusedFrom``), or whose measurement produced a record in the same input
(``status.measurement.measurementKey`` equal to a record's ``spec.key``), is skipped: the
measurement counts once, as its record.

A record is one GPUWorkload whose ``status.measurement`` is a finished GPU measurement of the
spec its status describes (``measurement.specHash == status.specHash``, ``device: cuda``, no
failure ``reason``). Its error is ``(estimated - measured) / measured`` with

- estimated: ``status.estimate.perGpu.totalBytes`` (bytes on the most loaded GPU);
- measured: the peak the recommendation rests on (:func:`gpu_sizer.lifecycle.measured_peak`:
  NVML device-used, else PyTorch reserved, else allocated bytes).

Positive errors over-estimate (safe, maybe wasteful); negative ones under-estimate (the case
headroom exists for). Objects without such a measurement are counted as skipped, with the reason;
an estimate with missing components (``Incomplete``, a lower bound) is skipped too: its error
says what is missing, not how good the model is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GROUPS",
    "Record",
    "Row",
    "Summary",
    "analytic_total",
    "counted_elsewhere",
    "format_table",
    "percentile",
    "read_records",
    "record_keys",
    "summarize",
]

#: The groupings the table shows, in order: (title, Record attribute).
GROUPS: tuple[tuple[str, str], ...] = (
    ("GPU CLASS", "gpu_class"),
    ("ENGINE", "engine"),
    ("FAMILY", "family"),
    ("KIND", "kind"),
)


@dataclass(frozen=True)
class Record:
    """One measured workload: where it ran, what it is, the estimate and the measured peak
    (bytes per GPU)."""

    name: str
    gpu_class: str
    engine: str
    family: str
    kind: str
    estimated_bytes: int
    measured_bytes: int

    @property
    def error(self) -> float:
        """Relative error of the estimate: (estimated - measured) / measured."""
        return (self.estimated_bytes - self.measured_bytes) / self.measured_bytes


@dataclass(frozen=True)
class Row:
    """Errors of one group: ``median`` (signed), ``p90`` of the absolute error, ``worst`` (the
    signed error largest in magnitude); fractions (0.1 = 10 %)."""

    group: str
    value: str
    count: int
    median: float
    p90: float
    worst: float


@dataclass
class Summary:
    """The records read and why the other objects were skipped (reason -> count)."""

    records: list[Record] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    #: Objects refused as malformed (a byte figure that is not an integer, or beyond any GPU's
    #: memory by orders of magnitude), one ``name: field: why`` line each.
    rejected: list[str] = field(default_factory=list)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _objects(docs: Iterable[Any]) -> Iterable[Mapping[str, Any]]:
    for doc in docs:
        if not isinstance(doc, Mapping):
            continue
        if str(doc.get("kind") or "").endswith("List") and isinstance(doc.get("items"), list):
            yield from (i for i in doc["items"] if isinstance(i, Mapping))
        else:
            yield doc


def _peak(m: Mapping[str, Any]) -> int | None:
    # The order of gpu_sizer.lifecycle.measured_peak (plain data here: exported objects of
    # older versions may not validate against today's model).
    for key in ("peakDeviceUsedBytes", "peakReservedBytes", "peakAllocatedBytes"):
        value = m.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _describe(spec: Mapping[str, Any]) -> tuple[str, str, str]:
    """(engine, family, kind) of a spec."""
    family = str(_get(spec, "model", "architecture", "modelType") or "(no architecture)")
    if isinstance(spec.get("training"), Mapping):
        return "pytorch", family, "training"
    if isinstance(spec.get("generation"), Mapping):
        return "diffusers", family, "generation"
    return str(_get(spec, "inference", "engine") or "?"), family, "inference"


RECORD_KIND = "GPUMeasurement"


def analytic_total(estimate: Mapping[str, Any]) -> Any:
    """``perGpu.totalBytes`` of an estimate as the memory model computed it: a calibrated
    estimate (``--calibration=apply``) keeps that figure in ``calibration.analyticTotalBytes``."""
    cal = estimate.get("calibration")
    if isinstance(cal, Mapping) and cal.get("adjusted"):
        return cal.get("analyticTotalBytes")
    return _get(estimate, "perGpu", "totalBytes")


def record_keys(objects: Iterable[Mapping[str, Any]]) -> set[str]:
    """The measurement keys of the GPUMeasurement records among ``objects``."""
    return {
        str(_get(o, "spec", "key"))
        for o in objects
        if o.get("kind") == RECORD_KIND and _get(o, "spec", "key")
    }


def counted_elsewhere(obj: Mapping[str, Any], keys: set[str]) -> str | None:
    """Why a GPUWorkload's measurement counts as a record instead (None: it counts here)."""
    m = _get(obj, "status", "measurement")
    if not isinstance(m, Mapping):
        return None
    if m.get("reusedFrom"):
        return "reused a shared record (counted once, as its GPUMeasurement)"
    if m.get("measurementKey") and str(m.get("measurementKey")) in keys:
        return "measured for a GPUMeasurement in the input (counted once, as the record)"
    return None


def _from_record(obj: Mapping[str, Any], out: Summary) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        out.skip("GPUMeasurement without a spec")
        return
    m = spec.get("result")
    estimate = spec.get("estimate")
    if not isinstance(m, Mapping) or not m.get("completedAt"):
        out.skip("not measured (yet)")
        return
    if m.get("reason") or m.get("outOfMemory"):
        out.skip(f"measurement ended {m.get('reason') or 'OutOfMemory'}")
        return
    if m.get("device") != "cuda":
        out.skip("CPU smoke run (no GPU figures)")
        return
    if not isinstance(estimate, Mapping):
        out.skip("no estimate")
        return
    if estimate.get("verdict") == "Incomplete" or estimate.get("missingComponents"):
        out.skip("incomplete estimate (a lower bound)")
        return
    meta = obj.get("metadata") or {}
    problems = _byte_problems("spec.estimate", estimate, "spec.result", m)
    if problems:
        name = meta.get("name") if isinstance(meta, Mapping) else None
        out.rejected += [f"{name or spec.get('key') or '?'}: {p}" for p in problems]
        return
    estimated = analytic_total(estimate)
    measured = _peak(m)
    if not isinstance(estimated, int) or measured is None:
        out.skip("no byte figures")
        return
    out.records.append(
        Record(
            name=str(meta.get("name") or spec.get("key") or "?"),
            gpu_class=str(spec.get("gpuClass") or m.get("gpuClass") or "?"),
            engine=str(spec.get("engine") or "?"),
            family=str(spec.get("modelFamily") or "?"),
            kind=str(spec.get("workloadKind") or "?").lower(),
            estimated_bytes=estimated,
            measured_bytes=measured,
        )
    )


def _absurd_bytes() -> int:
    """Per-GPU bytes no record can hold: 100 times the largest GPU of the built-in catalog."""
    from gpu_sizer.catalog import DEFAULT_CATALOG

    return 100 * max(c.memory_bytes for c in DEFAULT_CATALOG)


_PEAK_KEYS = ("peakDeviceUsedBytes", "peakReservedBytes", "peakAllocatedBytes")


def _byte_problems(
    estimate_path: str, estimate: Mapping[str, Any], result_path: str, m: Mapping[str, Any]
) -> list[str]:
    """Byte figures of a record that are present but not integers in 0 .. :func:`_absurd_bytes`
    (a typo or a corrupted export: its error would read as -100 % or a huge figure)."""
    limit = _absurd_bytes()
    cal = estimate.get("calibration")
    if isinstance(cal, Mapping) and cal.get("adjusted"):
        figures = [(f"{estimate_path}.calibration.analyticTotalBytes", analytic_total(estimate))]
    else:
        figures = [(f"{estimate_path}.perGpu.totalBytes", analytic_total(estimate))]
    figures += [(f"{result_path}.{k}", m.get(k)) for k in _PEAK_KEYS]
    problems = []
    for path, value in figures:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{path}: must be an integer number of bytes, not {value!r}")
        elif not 0 <= value <= limit:
            problems.append(
                f"{path}: {value} bytes is not a per-GPU figure (0 to {limit}, 100 times the "
                "largest GPU's memory)"
            )
    return problems


def read_records(docs: Iterable[Any]) -> Summary:
    """The records among ``docs`` (plain data of YAML/JSON documents), and the skipped ones."""
    out = Summary()
    objects = list(_objects(docs))
    keys = record_keys(objects)
    for obj in objects:
        if obj.get("kind") == RECORD_KIND:
            _from_record(obj, out)
            continue
        if obj.get("kind") != "GPUWorkload":
            out.skip(f"not a GPUWorkload or GPUMeasurement ({obj.get('kind') or 'no kind'})")
            continue
        elsewhere = counted_elsewhere(obj, keys)
        if elsewhere is not None:
            out.skip(elsewhere)
            continue
        status = obj.get("status")
        spec = obj.get("spec")
        m = _get(status, "measurement")
        if not isinstance(status, Mapping) or not isinstance(spec, Mapping):
            out.skip("no status")
            continue
        if not isinstance(m, Mapping) or not m.get("completedAt"):
            out.skip("not measured (yet)")
            continue
        if m.get("specHash") != status.get("specHash"):
            out.skip("measurement of an earlier spec")
            continue
        if m.get("reason"):
            out.skip(f"measurement ended {m.get('reason')}")
            continue
        if m.get("device") != "cuda":
            out.skip("CPU smoke run (no GPU figures)")
            continue
        estimate = status.get("estimate")
        if not isinstance(estimate, Mapping):
            out.skip("no estimate")
            continue
        if estimate.get("missingComponents"):
            out.skip("incomplete estimate (a lower bound)")
            continue
        meta = obj.get("metadata") or {}
        problems = _byte_problems("status.estimate", estimate, "status.measurement", m)
        if problems:
            name = f"{_get(meta, 'namespace') or ''}/{_get(meta, 'name') or ''}"
            out.rejected += [f"{name}: {p}" for p in problems]
            continue
        estimated = analytic_total(estimate)
        measured = _peak(m)
        if not isinstance(estimated, int) or measured is None:
            out.skip("no byte figures")
            continue
        engine, family, kind = _describe(spec)
        out.records.append(
            Record(
                name=f"{meta.get('namespace') or ''}/{meta.get('name') or ''}",
                gpu_class=str(m.get("gpuClass") or "?"),
                engine=engine,
                family=family,
                kind=kind,
                estimated_bytes=estimated,
                measured_bytes=measured,
            )
        )
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by linear interpolation between closest ranks
    (NumPy's default ``linear`` method; Hyndman and Fan 1996, definition 7).

    :raises ValueError: ``values`` is empty or ``q`` outside 0..1.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must lie in 0..1, not {q}")
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(records: Sequence[Record]) -> list[Row]:
    """One row for all records, then one per value of each grouping in :data:`GROUPS`
    (values sorted by name)."""
    rows: list[Row] = []
    if not records:
        return rows
    rows.append(_row("ALL", "all", records))
    for title, attr in GROUPS:
        groups: dict[str, list[Record]] = {}
        for r in records:
            groups.setdefault(str(getattr(r, attr)), []).append(r)
        for value in sorted(groups):
            rows.append(_row(title, value, groups[value]))
    return rows


def _row(group: str, value: str, records: Sequence[Record]) -> Row:
    errors = [r.error for r in records]
    return Row(
        group=group,
        value=value,
        count=len(errors),
        median=percentile(errors, 0.5),
        p90=percentile([abs(e) for e in errors], 0.9),
        worst=max(errors, key=abs),
    )


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def format_table(summary: Summary) -> str:
    """The table as text: estimate error = (estimated - measured) / measured, per group."""
    rows = summarize(summary.records)
    lines: list[list[str]] = [["GROUP", "VALUE", "COUNT", "MEDIAN", "P90 |ERR|", "WORST"]]
    for row in rows:
        lines.append(
            [
                row.group,
                row.value,
                str(row.count),
                _pct(row.median),
                f"{row.p90 * 100:.1f} %",
                _pct(row.worst),
            ]
        )
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    text = [
        "   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in lines
    ]
    text.append("")
    text.append(
        "error = (estimated - measured) / measured per GPU; estimated: the memory model's "
        "perGpu.totalBytes (before calibration); measured: NVML device-used peak (else PyTorch "
        "reserved, allocated); positive = over-estimate"
    )
    if summary.skipped:
        text.append(
            "skipped: "
            + ", ".join(f"{n} {reason}" for reason, n in sorted(summary.skipped.items()))
        )
    return "\n".join(text) + "\n"
