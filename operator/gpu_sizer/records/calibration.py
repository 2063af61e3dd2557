"""Calibration from the fleet: per (engine, GPU class, component) correction
factors learned from measurement records, shown in ``status.estimate.calibration`` and, with
``--calibration=apply``, applied to the estimate. Pure.

**What a component can be.** A measurement keeps three peaks per GPU (``status.measurement``,
and the ``result`` of a ``GPUMeasurement`` record): PyTorch's ``max_memory_allocated`` (the
tensors the caching allocator handed out), ``max_memory_reserved`` and NVML's device-used peak
(``gpu_sizer.measurement.result``). It does not keep a peak per budget component: the probe's
per-phase peaks (``load``, ``prefill@N``, ``step2.backward``, ...) stay in the Job's result, and
a phase peak mixes weights, KV cache and activations anyway. So the components calibrated are
the ones the peaks separate:

- ``Tensors``: the estimate's tensor components (weights, quantization metadata, KV cache,
  activations, gradients, optimizer state, master weights, communication buffers; everything
  but ``runtimeOverheadBytes``) against ``peakAllocatedBytes``. Records without PyTorch figures
  (Command mode measures only NVML) give none.
- ``RuntimeOverhead``: ``runtimeOverheadBytes`` (CUDA context, library workspaces, allocator
  cache) against ``peakDeviceUsedBytes - peakAllocatedBytes``. Needs both peaks.
- ``Total``: ``totalBytes`` against the peak a recommendation rests on
  (:func:`gpu_sizer.lifecycle.measured_peak`: device-used, else reserved, else allocated). Every
  GPU record gives one, Command mode included; it is applied only where neither component factor
  is usable (never on top of them).

Applying ``Tensors`` scales each tensor component by the factor (the records cannot say which
of them the error sits in: it is spread in proportion); ``Total`` scales every component. Each
scaled figure is rounded up; ``totalBytes`` grows by the sum of the increases. Phase totals
(``estimate.phases``) stay analytic.

**Whose evidence, and how much of it.** A factor moves other teams' estimates, so no one team
may move it. Cluster-wide factors learn only from records no tenant could have written
(``GPUMeasurement`` of scope ``Cluster``: Synthetic runs of the operator's probe image in the
operator's own namespace, see :mod:`gpu_sizer.api.record`); a namespace's own records (scope
``Namespace``: Command mode, its own image, its own namespace) calibrate that namespace only.
Workload statuses are not evidence for the operator (a tenant who may write its workload's
status could forge one; every measurement the operator trusts is a record). The statistic is
robust to the few who would push it: the ratios of each *voter* (a namespace, cluster-wide; a
measured workload, within a namespace) are reduced to their median, so seven workloads of one
team are one vote; voters whose median is an outlier among all voters' are trimmed by the
modified z-score of Iglewicz and Hoaglin ("How to Detect and Handle Outliers", ASQC 1993):
``|x - median| / (1.4826 x MAD) > 3.5`` (:data:`MAD_CUTOFF`; 1.4826 x MAD estimates the standard
deviation of normal data), with ``1.2533 x`` the mean absolute deviation in place of the scaled
MAD when more than half the voters agree exactly (MAD 0), as they prescribe; the factor is the
median of the voters kept. A cluster-wide factor is used only with
at least :data:`MIN_RECORDS` records from at least :data:`MIN_NAMESPACES` namespaces; the
namespaces and the workloads that moved it are kept with it (``namespaces``, ``sources``). A
namespace's own factor may only raise its estimates above the cluster's (the larger applies):
a team can make its own workloads larger, never anyone's smaller.

**Bounds.** The factor is bounded to :data:`MIN_FACTOR` ``..`` :data:`MAX_FACTOR` (deterministic:
the same records give the same factor in any order): never below 1.0, so an over-estimate is
never corrected downwards (the analytic figure stays the floor), and at most 1.5: an estimate
off by more than half is a gap in the memory model to fix, not to paper over (the observed
ratio is shown either way).

**Which records.** A finished GPU measurement (``device: cuda``) of the spec its estimate
describes, without an ending reason (OOM, failure) and of a complete estimate (an ``Incomplete``
estimate is a lower bound). The estimate a record is compared with is the *analytic* one: a
status whose estimate was calibrated keeps the analytic figures in ``estimate.calibration``, so
factors never feed on themselves.

**Pre-allocating engines** (vLLM, SGLang, TGI with a pool): the estimate is the pool the engine
takes (``gpuMemoryUtilization`` of the GPU); a factor cannot move what the engine pre-allocates,
so their factors are reported and never applied.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from gpu_sizer.api.spec import GPUWorkloadSpec
from gpu_sizer.api.status import (
    CalibrationFactor,
    CalibrationMode,
    CalibrationStatus,
    EstimateStatus,
    PerGpuBreakdown,
)
from gpu_sizer.records.accuracy import RECORD_KIND, counted_elsewhere, record_keys

__all__ = [
    "MAD_CUTOFF",
    "MAX_FACTOR",
    "MAX_SOURCES",
    "MIN_FACTOR",
    "MIN_NAMESPACES",
    "MIN_RECORDS",
    "TENSOR_FIELDS",
    "Calibration",
    "Component",
    "Factor",
    "Sample",
    "calibrate",
    "engine_of",
    "learn",
    "learn_calibration",
    "parse_mode",
    "sample_from_record",
    "sample_from_workload",
    "samples_from",
]

#: Factors are bounded to MIN_FACTOR..MAX_FACTOR (see the module docstring).
MIN_FACTOR: Final = 1.0
MAX_FACTOR: Final = 1.5
#: Records of one (engine, GPU class, component) needed before its factor is applied.
MIN_RECORDS: Final = 5
#: Distinct namespaces a cluster-wide factor's records must come from.
MIN_NAMESPACES: Final = 3
#: Voters whose modified z-score exceeds this are trimmed (Iglewicz and Hoaglin's 3.5).
MAD_CUTOFF: Final = 3.5
#: Sources (namespace/name of the measured workloads) kept with a factor, for people to see.
MAX_SOURCES: Final = 10
_MAD_SCALE: Final = 1.4826
_MEAN_AD_SCALE: Final = 1.253314
CLUSTER: Final = "Cluster"
NAMESPACE: Final = "Namespace"

#: The per-GPU fields of the tensor components (everything PyTorch's allocator holds).
TENSOR_FIELDS: Final = (
    "weights_bytes",
    "quantization_overhead_bytes",
    "kv_cache_bytes",
    "activation_bytes",
    "gradient_bytes",
    "optimizer_state_bytes",
    "master_weight_bytes",
    "communication_buffer_bytes",
)
_ALL_FIELDS: Final = (*TENSOR_FIELDS, "runtime_overhead_bytes")
_GIB: Final = 1 << 30


class Component(StrEnum):
    """What a factor corrects (see the module docstring)."""

    Tensors = "Tensors"
    RuntimeOverhead = "RuntimeOverhead"
    Total = "Total"


def parse_mode(text: str) -> CalibrationMode:
    """``off`` / ``report`` / ``apply`` (any case) as a :class:`CalibrationMode`.

    :raises ValueError: another word, naming the three.
    """
    for mode in CalibrationMode:
        if text.strip().lower() == mode.value.lower():
            return mode
    raise ValueError(f"--calibration must be off, report or apply, not {text!r}")


def engine_of(spec: GPUWorkloadSpec) -> str:
    """The engine a spec's records are grouped by: the inference engine, ``pytorch`` for
    training, ``diffusers`` for generation (the ``gpusizer.dev/engine`` label of records)."""
    if spec.training is not None:
        return "pytorch"
    if spec.generation is not None:
        return "diffusers"
    if spec.inference is not None:
        return str(spec.inference.engine)
    return "unknown"


def _engine_of_data(spec: Mapping[str, Any]) -> str:
    if isinstance(spec.get("training"), Mapping):
        return "pytorch"
    if isinstance(spec.get("generation"), Mapping):
        return "diffusers"
    inference = spec.get("inference")
    if isinstance(inference, Mapping) and inference.get("engine"):
        return str(inference["engine"])
    return "unknown"


@dataclass(frozen=True)
class Sample:
    """One record: where it ran, the analytic estimate and the measured peaks (bytes per GPU)
    of each component it can speak for; the namespace and workload measured (``source``:
    ``namespace/name``) and whether it is cluster-wide evidence (``trusted``)."""

    engine: str
    gpu_class: str
    analytic: Mapping[Component, int]
    measured: Mapping[Component, int]
    namespace: str = ""
    source: str = ""
    trusted: bool = True


def _int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _sample(
    engine: str, estimate: Mapping[str, Any], m: Mapping[str, Any]
) -> tuple[Sample | None, str]:
    """A sample from an estimate and a measurement (plain data); None with the reason."""
    if not m.get("completedAt"):
        return None, "not measured (yet)"
    if m.get("reason") or m.get("outOfMemory"):
        return None, f"measurement ended {m.get('reason') or 'OutOfMemory'}"
    if m.get("device") != "cuda":
        return None, "CPU smoke run (no GPU figures)"
    if estimate.get("missingComponents") or estimate.get("verdict") == "Incomplete":
        return None, "incomplete estimate (a lower bound)"
    per = estimate.get("perGpu")
    if not isinstance(per, Mapping):
        return None, "no estimate"
    cal = estimate.get("calibration")
    total = _int(per.get("totalBytes"))
    runtime = per.get("runtimeOverheadBytes")
    if isinstance(cal, Mapping) and cal.get("adjusted"):
        total = _int(cal.get("analyticTotalBytes"))
        runtime = cal.get("analyticRuntimeOverheadBytes")
    runtime_b = runtime if isinstance(runtime, int) and not isinstance(runtime, bool) else 0
    device = _int(m.get("peakDeviceUsedBytes"))
    allocated = _int(m.get("peakAllocatedBytes"))
    peak = device or _int(m.get("peakReservedBytes")) or allocated
    if total is None or peak is None:
        return None, "no byte figures"
    analytic: dict[Component, int] = {Component.Total: total}
    measured: dict[Component, int] = {Component.Total: peak}
    tensors = total - runtime_b
    if allocated is not None and tensors > 0:
        analytic[Component.Tensors] = tensors
        measured[Component.Tensors] = allocated
        if device is not None and device > allocated and runtime_b > 0:
            analytic[Component.RuntimeOverhead] = runtime_b
            measured[Component.RuntimeOverhead] = device - allocated
    gpu_class = str(m.get("gpuClass") or "?")
    return Sample(engine, gpu_class, analytic, measured), ""


def sample_from_workload(obj: Mapping[str, Any]) -> tuple[Sample | None, str]:
    """The sample of an exported GPUWorkload (plain data), or None and why it is skipped."""
    status = obj.get("status")
    spec = obj.get("spec")
    if not isinstance(status, Mapping) or not isinstance(spec, Mapping):
        return None, "no status"
    m = status.get("measurement")
    estimate = status.get("estimate")
    if not isinstance(m, Mapping) or not m.get("completedAt"):
        return None, "not measured (yet)"
    if m.get("specHash") != status.get("specHash"):
        return None, "measurement of an earlier spec"
    if m.get("reusedFrom"):
        # Another workload's measurement: it counts once, as its record (300 namespaces
        # reusing one record must not weigh 300 times).
        return None, "reused a shared record"
    if not isinstance(estimate, Mapping):
        return None, "no estimate"
    sample, why = _sample(_engine_of_data(spec), estimate, m)
    if sample is None:
        return None, why
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace = str(meta.get("namespace") or "")
    return dataclasses.replace(
        sample, namespace=namespace, source=f"{namespace}/{meta.get('name') or '?'}"
    ), ""


def sample_from_record(obj: Mapping[str, Any]) -> tuple[Sample | None, str]:
    """The sample of a ``GPUMeasurement`` record (plain data): its ``spec.estimate`` against its
    ``spec.result``, under its ``engine`` and ``gpuClass``; cluster-wide evidence only for scope
    ``Cluster`` (unset is ``Namespace``, as :class:`gpu_sizer.api.record.GPUMeasurementSpec`
    reads it); or None and why it is skipped."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return None, "GPUMeasurement without a spec"
    m = spec.get("result")
    estimate = spec.get("estimate")
    if not isinstance(m, Mapping):
        return None, "not measured (yet)"
    if not isinstance(estimate, Mapping):
        return None, "no estimate"
    m = {**m, "gpuClass": spec.get("gpuClass") or m.get("gpuClass")}
    sample, why = _sample(str(spec.get("engine") or "unknown"), estimate, m)
    if sample is None:
        return None, why
    trusted = spec.get("scope") == CLUSTER
    namespace = str((None if trusted else spec.get("namespace")) or m.get("sourceNamespace") or "")
    source = f"{namespace}/{m.get('sourceName') or '?'}"
    return dataclasses.replace(sample, namespace=namespace, source=source, trusted=trusted), ""


def samples_from(objects: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """The samples among GPUMeasurement records and GPUWorkloads (plain data; other objects and
    those without a usable measurement are skipped). A workload whose measurement is a record
    of the input (it reused one, or produced one) counts once, as the record."""
    listed = list(objects)
    keys = record_keys(listed)
    out: list[Sample] = []
    for obj in listed:
        if obj.get("kind") == RECORD_KIND:
            sample, _ = sample_from_record(obj)
        elif counted_elsewhere(obj, keys) is None:
            sample, _ = sample_from_workload(obj)
        else:
            continue
        if sample is not None:
            out.append(sample)
    return out


@dataclass(frozen=True)
class Factor:
    """A factor of one (engine, GPU class, component): the records and namespaces it was
    learned from (the voters kept), the observed ratio, whose it is (``scope``: Cluster or one
    namespace's own) and the workloads that moved it (``sources``, at most
    :data:`MAX_SOURCES`). ``frozen``: restated from a status, as usable as it was then."""

    records: int
    observed_ratio: float
    namespaces: int = 1
    scope: str = CLUSTER
    sources: tuple[str, ...] = ()
    frozen: bool = False

    @property
    def factor(self) -> float:
        """The observed ratio bounded to :data:`MIN_FACTOR` .. :data:`MAX_FACTOR`."""
        return min(MAX_FACTOR, max(MIN_FACTOR, self.observed_ratio))

    @property
    def usable(self) -> bool:
        """At least :data:`MIN_RECORDS` records; cluster-wide, from at least
        :data:`MIN_NAMESPACES` namespaces."""
        if self.frozen:
            return True
        if self.records < MIN_RECORDS:
            return False
        return self.scope == NAMESPACE or self.namespaces >= MIN_NAMESPACES


def _median(values: Sequence[float]) -> float:
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


Key = tuple[str, str, Component]


def _robust(votes: Mapping[str, list[tuple[float, str, str]]], scope: str) -> Factor:
    """The factor of one key from its voters' ratios (see the module docstring): each voter's
    median, voters beyond :data:`MAD_CUTOFF` scaled MADs trimmed, the median of the rest."""
    medians = {voter: _median([r for r, _, _ in rows]) for voter, rows in votes.items()}
    center = _median(list(medians.values()))
    deviations = [abs(m - center) for m in medians.values()]
    spread = _MAD_SCALE * _median(deviations)
    if spread == 0:
        spread = _MEAN_AD_SCALE * sum(deviations) / len(deviations)
    kept = [v for v, m in medians.items() if abs(m - center) <= MAD_CUTOFF * spread]
    rows = [row for v in kept for row in votes[v]]
    return Factor(
        records=len(rows),
        observed_ratio=round(_median([medians[v] for v in kept]), 2),
        namespaces=len({ns for _, ns, _ in rows}),
        scope=scope,
        sources=tuple(sorted({src for _, _, src in rows}))[:MAX_SOURCES],
    )


def learn(samples: Iterable[Sample], *, scope: str = CLUSTER) -> dict[Key, Factor]:
    """The factor of every (engine, GPU class, component) the samples speak for. Cluster-wide
    (``scope`` Cluster) every namespace is one voter; within a namespace (``scope`` Namespace)
    every measured workload is."""
    votes: dict[Key, dict[str, list[tuple[float, str, str]]]] = {}
    for s in samples:
        voter = s.namespace if scope == CLUSTER else (s.source or s.namespace)
        for comp, analytic in s.analytic.items():
            if analytic > 0 and comp in s.measured:
                key = (s.engine, s.gpu_class, comp)
                votes.setdefault(key, {}).setdefault(voter, []).append(
                    (s.measured[comp] / analytic, s.namespace, s.source)
                )
    return {key: _robust(v, scope) for key, v in sorted(votes.items())}


def learn_calibration(mode: CalibrationMode, samples: Iterable[Sample]) -> Calibration:
    """The calibration of ``mode`` from ``samples``: cluster-wide factors from the trusted
    ones, and each namespace's own from that namespace's samples (see the module docstring)."""
    listed = list(samples)
    by_ns: dict[str, list[Sample]] = {}
    for sample in listed:
        by_ns.setdefault(sample.namespace, []).append(sample)
    return Calibration(
        mode,
        learn([s for s in listed if s.trusted]),
        {ns: learn(group, scope=NAMESPACE) for ns, group in sorted(by_ns.items()) if ns},
    )


@dataclass(frozen=True)
class Calibration:
    """The mode, the learned cluster-wide factors (:func:`learn`) and each namespace's own."""

    mode: CalibrationMode = CalibrationMode.Report
    factors: Mapping[Key, Factor] | None = None
    by_namespace: Mapping[str, Mapping[Key, Factor]] = dataclasses.field(default_factory=dict)

    @classmethod
    def frozen(cls, mode: CalibrationMode, status: CalibrationStatus | None) -> Calibration:
        """The factors a status was judged with (its ``factors`` and ``ruledOut``), in
        ``mode``: the same estimate again, whatever was learned since."""
        entries = [*status.factors, *status.ruled_out] if status is not None else []
        return cls(
            mode,
            {
                (e.engine, e.gpu_class, Component(e.component)): Factor(
                    e.records,
                    e.observed_ratio,
                    e.namespaces or 0,
                    e.scope or CLUSTER,
                    tuple(e.sources),
                    frozen=True,
                )
                for e in entries
            },
        )

    def for_namespace(self, namespace: str) -> Calibration:
        """The factors a workload of ``namespace`` is judged with: per key, the larger usable
        factor of the cluster's and the namespace's own (a namespace's evidence only ever
        raises its own estimates)."""
        own = self.by_namespace.get(namespace)
        if not own:
            return Calibration(self.mode, self.factors)
        merged = dict(self.factors or {})
        for key, factor in own.items():
            other = merged.get(key)
            if factor.usable and (
                other is None or not other.usable or factor.factor > other.factor
            ):
                merged[key] = factor
        return Calibration(self.mode, merged)

    def for_class(self, engine: str, gpu_class: str) -> dict[Component, Factor]:
        """The factors of ``engine`` on ``gpu_class``, by component."""
        return {
            comp: f
            for (e, c, comp), f in (self.factors or {}).items()
            if e == engine and c == gpu_class
        }


def _gib(n: int) -> str:
    return f"{n / _GIB:.2f} GiB"


def calibrate(
    est: EstimateStatus,
    engine: str,
    gpu_class: str,
    calibration: Calibration | None,
    *,
    pool: bool = False,
) -> EstimateStatus:
    """``est`` with ``calibration`` (factors of ``engine`` on ``gpu_class``) shown and, in mode
    Apply, applied (not for a pre-allocating engine's ``pool``). Unchanged when the mode is Off
    or no factor of this engine and class has :data:`MIN_RECORDS` records.
    """
    if calibration is None or calibration.mode is CalibrationMode.Off:
        return est
    # Only factors with enough records are shown: a status does not change with every record
    # of a key that is still being learned.
    found = {c: f for c, f in calibration.for_class(engine, gpu_class).items() if f.usable}
    if not found:
        return est
    per = est.per_gpu
    before = {
        Component.Tensors: sum(getattr(per, f) for f in TENSOR_FIELDS),
        Component.RuntimeOverhead: per.runtime_overhead_bytes,
        Component.Total: per.total_bytes,
    }
    apply = calibration.mode is CalibrationMode.Apply and not pool
    usable = set(found)
    chosen = usable & {Component.Tensors, Component.RuntimeOverhead} or usable & {Component.Total}
    if not apply:
        chosen = set()
    scaled = per.model_dump()
    fields_of = {
        Component.Tensors: TENSOR_FIELDS,
        Component.RuntimeOverhead: ("runtime_overhead_bytes",),
        Component.Total: _ALL_FIELDS,
    }
    increase = 0
    for comp in sorted(chosen):
        f = found[comp].factor
        for name in fields_of[comp]:
            new = math.ceil(scaled[name] * f)
            increase += new - scaled[name]
            scaled[name] = new
    scaled["total_bytes"] = per.total_bytes + increase
    after = PerGpuBreakdown.model_validate(scaled)
    after_of = {
        Component.Tensors: sum(getattr(after, f) for f in TENSOR_FIELDS),
        Component.RuntimeOverhead: after.runtime_overhead_bytes,
        Component.Total: after.total_bytes,
    }
    entries = [
        CalibrationFactor(
            engine=engine,
            gpu_class=gpu_class,
            component=str(comp),
            records=f.records,
            observed_ratio=f.observed_ratio,
            factor=f.factor,
            usable=f.usable,
            namespaces=f.namespaces,
            scope=f.scope,
            sources=list(f.sources),
            before_bytes=before[comp],
            after_bytes=after_of[comp] if comp in chosen else before[comp],
            applied=comp in chosen,
        )
        for comp, f in sorted(found.items())
    ]
    adjusted = increase > 0
    if adjusted:
        parts = [
            f"{e.component} x{e.factor:g} ({e.records} records): {_gib(e.before_bytes)} -> "
            f"{_gib(e.after_bytes)}"
            for e in entries
            if e.applied
        ]
        message = (
            f"applied: {'; '.join(parts)}; totalBytes {_gib(per.total_bytes)} -> "
            f"{_gib(after.total_bytes)}"
        )
    elif apply and chosen:
        message = "applied factors of 1.0: the records measured no more than the estimate"
    elif calibration.mode is CalibrationMode.Apply and pool:
        message = (
            "reported, not applied: a pre-allocating engine takes its pool whatever the factor"
        )
    else:
        message = "reported, not applied (--calibration=report)"
    status = CalibrationStatus(
        mode=calibration.mode,
        gpu_class=gpu_class,
        adjusted=adjusted,
        analytic_total_bytes=per.total_bytes,
        analytic_runtime_overhead_bytes=per.runtime_overhead_bytes,
        factors=entries,
        message=message,
    )
    return est.model_copy(update={"per_gpu": after if adjusted else per, "calibration": status})
