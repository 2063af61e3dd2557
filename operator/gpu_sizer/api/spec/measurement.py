"""``spec.measurement``: how the measurement Job runs (synthetic model, the workload's own
command, or none)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictInt, model_validator

from gpu_sizer.api.spec.base import _Model, _Problems
from gpu_sizer.api.spec.bounds import LENGTHS, Seqs
from gpu_sizer.api.spec.enums import MeasurementMode

__all__ = ["Measurement"]


class Measurement(_Model):
    """How the measurement Job runs."""

    mode: MeasurementMode = Field(
        MeasurementMode.Synthetic, description="Synthetic | Command | Disabled."
    )
    image: Annotated[str, Field(max_length=LENGTHS["image"])] | None = Field(
        None, description="Probe image; default from the operator."
    )
    command: Annotated[
        list[Annotated[str, Field(max_length=LENGTHS["commandArg"])]],
        Field(max_length=LENGTHS["commandArgs"]),
    ] = Field(
        default_factory=list,
        description="Command mode: the workload's own command, run under the probe's sampler.",
    )
    timeout_seconds: StrictInt = Field(
        900, ge=30, le=86400, description="Deadline for the measurement Job, in seconds."
    )
    concurrency_levels: Annotated[list[Seqs], Field(max_length=LENGTHS["concurrencyLevels"])] = (
        Field(
            default_factory=list,
            description="Inference: concurrent sequences to measure at; default [1, maxNumSeqs].",
        )
    )

    @model_validator(mode="after")
    def _check(self) -> Measurement:
        problems = _Problems()
        if self.mode is MeasurementMode.Command and not self.command:
            problems.add("command", "mode Command needs a non-empty command")
        for i, arg in enumerate(self.command):
            if not arg:
                problems.add(f"command[{i}]", "must not be an empty string")
        problems.raise_if_any()
        return self
