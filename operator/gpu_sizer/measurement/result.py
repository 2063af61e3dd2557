"""The probe's result document (versioned schema) and its parsing. Pure.

The probe prints one JSON document to stdout and writes the same, compact and under 4096 bytes,
to ``/dev/termination-log``; the operator reads it back from the pod's
``status.containerStatuses[].state.terminated.message`` with :func:`parse_result`.
Sizes are bytes, durations seconds.

Field meanings, by source:

- ``peakAllocatedBytes`` / ``peakReservedBytes``: ``torch.cuda.max_memory_allocated()`` and
  ``torch.cuda.max_memory_reserved()`` (PyTorch "CUDA semantics / memory management" docs),
  reset between phases with ``torch.cuda.reset_peak_memory_stats()``; the top-level figure is the
  maximum over phases. Synthetic mode on a GPU only.
- ``peakDeviceUsedBytes``: the highest ``nvmlDeviceGetMemoryInfo().used`` sampled on the most
  loaded visible device (NVML API reference, "Device Queries"); it includes the CUDA context,
  library workspaces and every other process on the device.
- ``peakRssBytes``: CPU runs only: the process's (or, in Command mode, the command's) peak
  resident set size from ``getrusage(2)`` / ``/proc/self/status`` ``VmHWM``. Never a GPU figure.
- ``peakCpuTensorBytes``: CPU runs of synthetic training only: the peak of live CPU tensor
  storages, counted through PyTorch's dispatcher (``gpu_sizer.probe.tensor_memory``), the CPU's
  counterpart of ``peakAllocatedBytes``: what the estimate's tensor components (everything but
  the runtime overhead) predict. Never a GPU figure.
- ``ranks``: distributed training (``worldSize`` > 1 processes under ``torch.distributed.run``):
  each rank's own peaks; the top-level peaks are the most loaded rank's (the device peak is
  NVML's most loaded device).
"""

from __future__ import annotations

import json
from typing import Final, Literal

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

__all__ = [
    "MAX_TERMINATION_MESSAGE_BYTES",
    "RESULT_SCHEMA",
    "ImplausibleResult",
    "InvalidResult",
    "NvmlDevice",
    "NvmlInfo",
    "PhaseResult",
    "ProbeResult",
    "RankPeaks",
    "ResultStatus",
    "VllmReport",
    "compact_message",
    "implausibilities",
    "parse_result",
]

#: Kubernetes truncates termination messages at 4096 bytes.
MAX_TERMINATION_MESSAGE_BYTES: Final = 4096
#: Version tag of the schema; bump when a field changes meaning.
RESULT_SCHEMA: Final = "gpusizer.dev/probe-result/v1"

ResultStatus = Literal["Succeeded", "OutOfMemory", "Failed", "Unsupported", "Timeout"]


class _Doc(BaseModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True, extra="ignore"
    )


class PhaseResult(_Doc):
    """One measured phase (load, kv-cache, prefill@16, decode@16, step2.backward, command)."""

    name: str = Field(description="Phase name, e.g. load, prefill@16, decode@16, step2.backward.")
    seconds: float = Field(description="Wall time of the phase.")
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_device_used_bytes: int | None = None
    peak_rss_bytes: int | None = Field(None, description="CPU runs: peak RSS during the phase.")
    peak_cpu_tensor_bytes: int | None = Field(
        None, description="CPU training runs: peak live CPU tensor bytes during the phase."
    )


class RankPeaks(_Doc):
    """One rank's peaks in a distributed run (bytes)."""

    rank: int
    status: ResultStatus
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_device_used_bytes: int | None = Field(
        None, description="NVML peak of the rank's device (LOCAL_RANK)."
    )
    peak_rss_bytes: int | None = None
    peak_cpu_tensor_bytes: int | None = None
    oom_phase: str | None = None


class NvmlDevice(_Doc):
    """One visible device as NVML reports it."""

    index: int
    name: str
    total_bytes: int
    peak_used_bytes: int
    baseline_used_bytes: int = Field(description="Used bytes at the first sample (before work).")


class NvmlInfo(_Doc):
    """What NVML said about the device, or why it could not."""

    available: bool
    reason: str | None = Field(None, description="Why NVML is unavailable.")
    device_name: str | None = None
    total_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    sample_hz: float | None = Field(None, description="Achieved sampling rate, samples/s.")
    samples: int | None = None
    sampler_cpu_seconds: float | None = Field(
        None, description="CPU time the sampler thread used (the probe's own overhead)."
    )
    devices: list[NvmlDevice] = Field(default_factory=list)
    process_peak_bytes: dict[str, int] = Field(
        default_factory=dict,
        description="Peak usedGpuMemory per PID as NVML reports it (host PIDs inside containers).",
    )


class VllmReport(_Doc):
    """vLLM's own startup memory report, parsed from its log (Command mode). vLLM prints GiB
    (2^30) even where its older versions wrote "GB"; values here are bytes."""

    model_loading_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    gpu_blocks: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = Field(
        None, description="The per-request length vLLM computed maxConcurrency for."
    )
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    total_gpu_bytes: int | None = None


class ProbeResult(_Doc):
    """The probe's report. ``device`` is ``cuda`` or ``cpu``; CPU runs carry no GPU figures."""

    schema_: str = Field(RESULT_SCHEMA, alias="schema")
    status: ResultStatus
    mode: Literal["Synthetic", "Command"]
    device: Literal["cuda", "cpu"]
    gpu_count: int = 0
    gpu_class: str | None = Field(None, description="--gpu-class the operator scheduled for.")
    spec_hash: str | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_device_used_bytes: int | None = None
    peak_rss_bytes: int | None = Field(None, description="CPU runs: the process's peak RSS.")
    peak_cpu_tensor_bytes: int | None = Field(
        None,
        description="CPU training runs: peak live CPU tensor bytes (the most loaded rank's).",
    )
    world_size: int | None = Field(
        None, description="Distributed training: processes (ranks) measured together."
    )
    ranks: list[RankPeaks] = Field(
        default_factory=list, description="Distributed training: every rank's peaks."
    )
    weights_bytes: int | None = Field(
        None, description="Synthetic: bytes of the parameters built (allocated after load)."
    )
    kv_cache_bytes: int | None = Field(None, description="Synthetic: KV cache tensor bytes.")
    kv_cache_tokens: int | None = Field(None, description="Synthetic: token slots in the cache.")
    parameter_count: int | None = Field(
        None,
        description="Synthetic: parameters built on the measured GPU (one tensor-parallel rank "
        "when tensorParallelSize > 1).",
    )
    trainable_parameter_count: int | None = None
    out_of_memory: bool = False
    oom_phase: str | None = None
    oom_requested_bytes: int | None = None
    message: str | None = None
    notes: list[str] = Field(default_factory=list, description="Caveats of this measurement.")
    exit_code: int | None = Field(None, description="Command mode: the command's exit status.")
    nvml: NvmlInfo | None = None
    vllm: VllmReport | None = None
    phases: list[PhaseResult] = Field(default_factory=list)
    phases_omitted: int = Field(0, description="Phases dropped to fit the termination message.")
    torch_version: str | None = None
    started_at: str | None = None
    completed_at: str | None = None


class InvalidResult(ValueError):
    """The termination message is not a probe result (truncated, empty, another program's)."""


class ImplausibleResult(InvalidResult):
    """A well-formed probe result whose figures cannot be true (negative bytes, no peak on a
    GPU run, a peak above the device's memory without an out-of-memory). Never trusted."""


_BYTE_FIELDS: Final = (
    ("peak_allocated_bytes", "peakAllocatedBytes"),
    ("peak_reserved_bytes", "peakReservedBytes"),
    ("peak_device_used_bytes", "peakDeviceUsedBytes"),
    ("peak_rss_bytes", "peakRssBytes"),
    ("peak_cpu_tensor_bytes", "peakCpuTensorBytes"),
    ("weights_bytes", "weightsBytes"),
    ("kv_cache_bytes", "kvCacheBytes"),
    ("oom_requested_bytes", "oomRequestedBytes"),
)
_GPU_PEAKS: Final = _BYTE_FIELDS[:3]


def implausibilities(result: ProbeResult) -> list[str]:
    """What makes ``result``'s figures impossible, each naming its field (empty: plausible).

    - byte counts are never negative (top level and per phase);
    - a ``cuda`` run that succeeded reports at least one GPU peak;
    - no GPU peak exceeds the device's memory (``nvml.totalBytes``, or the largest
      ``nvml.devices[].totalBytes``) unless the run ran out of memory.
    """
    problems: list[str] = []
    for attr, wire in _BYTE_FIELDS:
        value = getattr(result, attr)
        if value is not None and value < 0:
            problems.append(f"{wire} is {value}, a byte count cannot be negative")
    for i, phase in enumerate(result.phases):
        for attr, wire in (*_GPU_PEAKS, _BYTE_FIELDS[3], _BYTE_FIELDS[4]):
            value = getattr(phase, attr)
            if value is not None and value < 0:
                problems.append(f"phases[{i}].{wire} is {value}, a byte count cannot be negative")
    for i, rank in enumerate(result.ranks):
        for attr, wire in (*_GPU_PEAKS, _BYTE_FIELDS[3], _BYTE_FIELDS[4]):
            value = getattr(rank, attr)
            if value is not None and value < 0:
                problems.append(f"ranks[{i}].{wire} is {value}, a byte count cannot be negative")
    if result.device != "cuda":
        return problems
    peaks = {wire: getattr(result, attr) for attr, wire in _GPU_PEAKS}
    if result.status == "Succeeded" and all(v is None for v in peaks.values()):
        problems.append(
            "a GPU run reported none of peakAllocatedBytes, peakReservedBytes, peakDeviceUsedBytes"
        )
    total = None
    if result.nvml is not None:
        totals = [d.total_bytes for d in result.nvml.devices]
        total = result.nvml.total_bytes or (max(totals) if totals else None)
    if total and not result.out_of_memory:
        for wire, value in peaks.items():
            if value is not None and value > total:
                problems.append(
                    f"{wire} is {value}, above the device's memory of {total} bytes "
                    "(nvml.totalBytes) without an out-of-memory"
                )
    return problems


def parse_result(message: str) -> ProbeResult:
    """Parse a termination message.

    :raises InvalidResult: not JSON, wrong schema, or missing fields; the text says which.
    :raises ImplausibleResult: well-formed but impossible figures (:func:`implausibilities`).
    """
    try:
        data = json.loads(message)
    except json.JSONDecodeError as exc:
        raise InvalidResult(f"termination message is not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
        raise InvalidResult(f"termination message is not a {RESULT_SCHEMA} document")
    try:
        result = ProbeResult.model_validate(data)
    except ValidationError as exc:
        raise InvalidResult(f"invalid probe result: {exc.errors(include_url=False)}") from None
    problems = implausibilities(result)
    if problems:
        raise ImplausibleResult("implausible probe result: " + "; ".join(problems))
    return result


def _dump(result: ProbeResult) -> str:
    return json.dumps(
        result.model_dump(mode="json", by_alias=True, exclude_none=True),
        separators=(",", ":"),
        ensure_ascii=False,
    )


def _fits(text: str, limit: int) -> bool:
    return len(text.encode("utf-8")) < limit


def compact_message(result: ProbeResult, limit: int = MAX_TERMINATION_MESSAGE_BYTES) -> str:
    """The result as compact JSON strictly under ``limit`` bytes (UTF-8).

    Kubernetes keeps at most 4096 bytes of ``terminationMessagePath``. Detail goes first, peaks
    last: per-process NVML figures, per-device lists, notes, phase timings, then phases one by
    one from the middle (the first and the most expensive phases are the most telling), then the
    per-rank peaks of a distributed run, then the message is shortened. Top-level peaks, status
    and OOM fields are never dropped; the count of dropped phases is kept in ``phasesOmitted``.

    :raises ValueError: when even the bare peaks do not fit (``limit`` far too small).
    """
    text = _dump(result)
    if _fits(text, limit):
        return text
    slim = result.model_copy(deep=True)
    if slim.nvml is not None:
        slim.nvml = slim.nvml.model_copy(update={"process_peak_bytes": {}, "devices": []})
    text = _dump(slim)
    if _fits(text, limit):
        return text
    slim.notes = []
    text = _dump(slim)
    if _fits(text, limit):
        return text
    phases = list(slim.phases)
    omitted = slim.phases_omitted
    while phases:
        # Keep the most expensive phase and the first one; drop from the middle outwards.
        keep = {0, max(range(len(phases)), key=lambda i: _phase_peak(phases[i]))}
        drop = next((i for i in _middle_out(len(phases)) if i not in keep), len(phases) - 1)
        del phases[drop]
        omitted += 1
        slim.phases = phases
        slim.phases_omitted = omitted
        text = _dump(slim)
        if _fits(text, limit):
            return text
    if slim.ranks:
        slim.ranks = []  # the top-level peaks are the most loaded rank's
        text = _dump(slim)
        if _fits(text, limit):
            return text
    if slim.message:
        for size in (1024, 256, 64):
            slim.message = slim.message[:size]
            text = _dump(slim)
            if _fits(text, limit):
                return text
    slim.vllm = None
    slim.nvml = (
        None
        if slim.nvml is None
        else NvmlInfo(available=slim.nvml.available, reason=(slim.nvml.reason or "")[:128] or None)
    )
    text = _dump(slim)
    if _fits(text, limit):
        return text
    raise ValueError(f"probe result cannot fit in {limit} bytes even without detail")


def _phase_peak(phase: PhaseResult) -> int:
    return max(
        phase.peak_allocated_bytes or 0,
        phase.peak_reserved_bytes or 0,
        phase.peak_device_used_bytes or 0,
        phase.peak_rss_bytes or 0,
    )


def _middle_out(n: int) -> list[int]:
    mid = n // 2
    order = [mid]
    for step in range(1, n):
        for i in (mid - step, mid + step):
            if 0 <= i < n:
                order.append(i)
    return order
