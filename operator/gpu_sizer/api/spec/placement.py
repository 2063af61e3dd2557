"""``spec.placement``: which GPU classes the workload may use, and the memory it must leave
free at its peak."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gpu_sizer.api.spec.base import _Model
from gpu_sizer.api.spec.bounds import LENGTHS, Fraction

__all__ = ["MAX_MIN_HEADROOM_FRACTION", "Placement"]


#: Largest ``spec.placement.minHeadroomFraction`` the API accepts. A margin of more than half a
#: GPU would leave most of it idle, and is usually a mix-up with a utilization (vLLM's
#: ``--gpu-memory-utilization 0.9`` is 10 % headroom, not 90 %). The one source of this bound:
#: the CRD, ``gpu-sizer estimate`` and the webhook refuse larger values with the same field error,
#: and a namespace policy (``maxMinHeadroomFraction``) can only lower it.
MAX_MIN_HEADROOM_FRACTION: float = 0.5


class Placement(_Model):
    """Where the workload may run, and the safety margin it needs."""

    gpu_classes: Annotated[
        list[Annotated[str, Field(max_length=LENGTHS["gpuClass"])]],
        Field(max_length=LENGTHS["gpuClasses"]),
    ] = Field(
        default_factory=list,
        description="Allowed GPU classes (see `gpu-sizer catalog`); empty allows every class.",
    )
    min_headroom_fraction: Fraction = Field(
        0.10,
        ge=0.0,
        le=MAX_MIN_HEADROOM_FRACTION,
        description="Fraction of the GPU's memory that must stay free at the peak.",
    )
