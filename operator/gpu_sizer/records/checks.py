"""Whether a shared measurement record is plausible for the workload about to reuse it. Pure.

A ``GPUMeasurement`` decides another workload's verdict without that workload measuring, so it
is checked against what the reader knows independently of the record: the reader's own
analytic estimate of the same spec (the key digests the memory-relevant spec, so the estimate is
the same one the producer had) and the catalog entry of the class. Only the operator may write
records (chart RBAC and ValidatingAdmissionPolicy), so these checks are the second line: they
catch a record written past that line (an administrator's hand, a policy not installed, a bug),
never the only one. A record that fails is not reused and the workload measures itself: the
worst a wrong refusal costs is one measurement.

What is checked, each with its reason:

- **Identity.** ``spec.key`` is the digest of ``spec.keyFields`` and names the class the record
  says it was measured on; the result ran on a GPU (``device: cuda``).
- **Time.** ``startedAt <= completedAt <= recordedAt`` and ``recordedAt`` not in the future
  (:data:`~gpu_sizer.api.record.CLOCK_SKEW_SECONDS` allowed); the expiry is capped by the TTL
  (:func:`gpu_sizer.api.record.effective_expiry`).
- **The device.** No peak exceeds the class's memory (``nvmlDeviceGetMemoryInfo().total`` as the
  catalog has it, :data:`DEVICE_TOLERANCE`): NVML cannot report more used than there is, an OOM
  included (a 10**15-byte peak made a workload ``Rejected``); PyTorch's allocated peak never
  exceeds its reserved peak (``max_memory_allocated <= max_memory_reserved``: the caching
  allocator hands out only what it reserved); ``gpuMemoryBytes`` is the class's memory within
  5 %, the tolerance GPU Feature Discovery labels get
  (``gpu_sizer.inventory.nodes.MEMORY_TOLERANCE``).
- **The estimate.** A success holds at least :data:`MIN_WEIGHT_FRACTION` of the estimated weights
  on the GPU (the probe allocates every parameter before it measures anything; a 3 GiB peak for
  15 GiB of weights cannot be true); for a complete estimate of an engine that does not
  pre-allocate, the peak stays within :data:`MAX_ESTIMATE_RATIO` times the estimate plus
  :data:`ESTIMATE_SLACK_BYTES` (the memory model is not off by that much; pre-allocating engines
  take their fraction of any GPU, so they are exempt). An out-of-memory on the class is
  plausible only when the estimate fills at least :data:`MIN_OOM_FRACTION` of it.
"""

from __future__ import annotations

import datetime
from typing import Final

from gpu_sizer.api.record import CLOCK_SKEW_SECONDS, GPUMeasurement
from gpu_sizer.api.status import EstimateStatus
from gpu_sizer.api.times import parse_time
from gpu_sizer.catalog import GPUClass
from gpu_sizer.inventory.nodes import MEMORY_TOLERANCE

__all__ = [
    "DEVICE_TOLERANCE",
    "ESTIMATE_SLACK_BYTES",
    "MAX_ESTIMATE_RATIO",
    "MIN_OOM_FRACTION",
    "MIN_WEIGHT_FRACTION",
    "implausibilities",
]

GIB: Final = 1 << 30
#: A peak may exceed the catalog's device memory by this fraction (rounding of the catalog's
#: MiB figures), no more.
DEVICE_TOLERANCE: Final = 0.01
#: A success's peak is at least this fraction of the estimated weights per GPU (the analytic
#: figure; calibrated weights are taken at their 1.5 cap's lower bound).
MIN_WEIGHT_FRACTION: Final = 0.9
#: A success's peak is at most this many times the estimate's total (complete estimates of
#: engines that do not pre-allocate) ...
MAX_ESTIMATE_RATIO: Final = 3.0
#: ... or the estimate plus this many bytes, whichever is larger (small workloads).
ESTIMATE_SLACK_BYTES: Final = 8 * GIB
#: An out-of-memory record is plausible only for an estimate of at least this share of the
#: class's usable memory.
MIN_OOM_FRACTION: Final = 0.5
_CALIBRATION_CAP: Final = 1.5


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


def _pool_engine(estimate: EstimateStatus) -> bool:
    """Pre-allocating engines say which class their figures are for (the pool depends on it)."""
    return estimate.gpu_class is not None or estimate.kv_cache_capacity_tokens is not None


def implausibilities(
    record: GPUMeasurement,
    cls: GPUClass,
    estimate: EstimateStatus | None,
    now: datetime.datetime,
) -> list[str]:
    """What makes ``record`` implausible for a reader whose analytic estimate of the same spec
    is ``estimate`` (None: only the record's own consistency is checked), measured on ``cls``;
    each problem names the field and the figures. Empty: plausible."""
    spec = record.spec
    r = spec.result
    problems: list[str] = []
    if spec.key != spec.key_fields.digest():
        problems.append("spec.key is not the digest of spec.keyFields")
    if spec.gpu_class != cls.name or spec.key_fields.gpu_class != cls.name:
        problems.append(f"spec.gpuClass {spec.gpu_class} is not the key's class {cls.name}")
    if r.device != "cuda":
        problems.append(f"spec.result.device is {r.device!r}, not a GPU run")
    started, completed = parse_time(r.started_at), parse_time(r.completed_at)
    recorded = parse_time(spec.recorded_at)
    skew = datetime.timedelta(seconds=CLOCK_SKEW_SECONDS)
    if recorded is None or recorded > now + skew:
        problems.append(f"spec.recordedAt {spec.recorded_at!r} is unreadable or in the future")
    if completed is None:
        problems.append("spec.result.completedAt is missing")
    elif recorded is not None and completed > recorded + skew:
        problems.append("spec.result.completedAt is after spec.recordedAt")
    # startedAt is the operator's clock (the Job's start), completedAt the node's (the probe's
    # own): they may disagree by the skew allowed.
    if started is not None and completed is not None and started > completed + skew:
        problems.append("spec.result.startedAt is after spec.result.completedAt")
    if r.gpu_memory_bytes is not None and (
        abs(r.gpu_memory_bytes - cls.memory_bytes) > MEMORY_TOLERANCE * cls.memory_bytes
    ):
        problems.append(
            f"spec.result.gpuMemoryBytes {_gib(r.gpu_memory_bytes)} is not {cls.name}'s "
            f"{_gib(cls.memory_bytes)}"
        )
    peaks = {
        "peakAllocatedBytes": r.peak_allocated_bytes,
        "peakReservedBytes": r.peak_reserved_bytes,
        "peakDeviceUsedBytes": r.peak_device_used_bytes,
    }
    ceiling = cls.memory_bytes * (1 + DEVICE_TOLERANCE)
    for wire, value in peaks.items():
        if value is None:
            continue
        if value < 0 or value > ceiling:
            problems.append(
                f"spec.result.{wire} {value} bytes is outside 0..{cls.name}'s "
                f"{cls.memory_bytes} bytes of device memory"
            )
    allocated, reserved = r.peak_allocated_bytes, r.peak_reserved_bytes
    if allocated is not None and reserved is not None and allocated > reserved:
        problems.append(
            f"spec.result.peakAllocatedBytes {_gib(allocated)} exceeds peakReservedBytes "
            f"{_gib(reserved)} (PyTorch allocates only what it reserved)"
        )
    known = [v for v in peaks.values() if v is not None]
    if estimate is None:
        return problems
    per = estimate.per_gpu
    total = per.total_bytes
    weights = per.weights_bytes
    cal = estimate.calibration
    if cal is not None and cal.adjusted:
        total = cal.analytic_total_bytes
        weights = int(weights / _CALIBRATION_CAP)
    if r.out_of_memory:
        if total < MIN_OOM_FRACTION * cls.usable:
            problems.append(
                f"an out-of-memory on {cls.name} for an estimate of {_gib(total)} per GPU, "
                f"under {MIN_OOM_FRACTION:.0%} of its {_gib(cls.usable)} usable"
            )
        return problems
    peak = max(known, default=None)
    if peak is None:
        problems.append("spec.result holds no GPU peak")
        return problems
    if peak < MIN_WEIGHT_FRACTION * weights:
        problems.append(
            f"the measured peak {_gib(peak)} is below {MIN_WEIGHT_FRACTION:.0%} of the "
            f"estimated weights {_gib(weights)} per GPU (every parameter is on the GPU before "
            "anything is measured)"
        )
    complete = not estimate.missing_components
    if complete and not _pool_engine(estimate):
        limit = max(MAX_ESTIMATE_RATIO * total, total + ESTIMATE_SLACK_BYTES)
        if peak > limit:
            problems.append(
                f"the measured peak {_gib(peak)} is over {MAX_ESTIMATE_RATIO:g} times the "
                f"estimate of {_gib(total)} per GPU (and {_gib(ESTIMATE_SLACK_BYTES)} above it)"
            )
    return problems
