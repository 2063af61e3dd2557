"""The probe's result document (versioned schema) and its parsing. Pure.

The probe prints one JSON document to stdout and writes the same, compact and under 4096 bytes,
to ``/dev/termination-log``; the operator reads it back from the pod's
``status.containerStatuses[].state.terminated.message`` with :func:`parse_result`.
Sizes are bytes, durations seconds.
"""

from __future__ import annotations

import json
from typing import Final, Literal

from pydantic import AliasGenerator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

__all__ = [
    "MAX_TERMINATION_MESSAGE_BYTES",
    "RESULT_SCHEMA",
    "InvalidResult",
    "NvmlInfo",
    "PhaseResult",
    "ProbeResult",
    "parse_result",
]

#: Kubernetes truncates termination messages at 4096 bytes.
MAX_TERMINATION_MESSAGE_BYTES: Final = 4096
#: Version tag of the schema; bump when a field changes meaning.
RESULT_SCHEMA: Final = "gpusizer.dev/probe-result/v1"


class _Doc(BaseModel):
    model_config = ConfigDict(
        alias_generator=AliasGenerator(alias=to_camel), populate_by_name=True, extra="ignore"
    )


class PhaseResult(_Doc):
    """One measured phase (load, prefill, decode at a concurrency, train step, command)."""

    name: str = Field(description="Phase name, e.g. load, prefill@16, decode@16, step.")
    seconds: float = Field(description="Wall time of the phase.")
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_device_used_bytes: int | None = None


class NvmlInfo(_Doc):
    """What NVML said about the device, or why it could not."""

    available: bool
    reason: str | None = Field(None, description="Why NVML is unavailable.")
    device_name: str | None = None
    total_bytes: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    sample_hz: float | None = None


class ProbeResult(_Doc):
    """The probe's report. ``device`` is ``cuda`` or ``cpu``; CPU runs carry no GPU figures."""

    schema_: str = Field(RESULT_SCHEMA, alias="schema")
    status: Literal["Succeeded", "OutOfMemory", "Failed", "Unsupported", "Timeout"]
    mode: Literal["Synthetic", "Command"]
    device: Literal["cuda", "cpu"]
    gpu_count: int = 0
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    peak_device_used_bytes: int | None = None
    peak_rss_bytes: int | None = Field(None, description="CPU runs: the process's peak RSS.")
    out_of_memory: bool = False
    oom_phase: str | None = None
    oom_requested_bytes: int | None = None
    message: str | None = None
    exit_code: int | None = Field(None, description="Command mode: the command's exit status.")
    nvml: NvmlInfo | None = None
    phases: list[PhaseResult] = Field(default_factory=list)
    started_at: str | None = None
    completed_at: str | None = None


class InvalidResult(ValueError):
    """The termination message is not a probe result (truncated, empty, another program's)."""


def parse_result(message: str) -> ProbeResult:
    """Parse a termination message.

    :raises InvalidResult: not JSON, wrong schema, or missing fields; the text says which.
    """
    try:
        data = json.loads(message)
    except json.JSONDecodeError as exc:
        raise InvalidResult(f"termination message is not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA:
        raise InvalidResult(f"termination message is not a {RESULT_SCHEMA} document")
    try:
        return ProbeResult.model_validate(data)
    except ValidationError as exc:
        raise InvalidResult(f"invalid probe result: {exc.errors(include_url=False)}") from None
