"""What an assessment holds and how it reads: the :class:`Verdict`, the computed :class:`Fix`,
the :class:`Assessment` the webhook, the CLI and the controller all act on, and the phrases and
caps its messages and figures share (:mod:`gpu_sizer.sizing.verdict` decides; this module only
says). Pure.

Figures are bytes internally and GiB (2**30) in text; every integer of an assessment is capped
at :data:`MAX_REPORTED` so that a status fits the int64 the API server stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from pydantic import BaseModel

from gpu_sizer.api import (
    EstimateStatus,
    GPUWorkloadSpec,
    MeasurementMode,
    PerGpuBreakdown,
    RecommendationStatus,
)
from gpu_sizer.catalog import Choice, GPUClass

__all__ = [
    "GIB",
    "MAX_REPORTED",
    "Assessment",
    "Fix",
    "Verdict",
    "cap_figures",
    "gib",
    "incomplete_text",
    "largest_components",
    "mig_names",
    "parallel_path",
    "presence_note",
    "room",
    "sizing_failed",
    "spec_warnings",
]

GIB: Final = 1 << 30


#: Largest figure an assessment reports, in bytes or counts (1 EiB = 2**60). The field maxima of
#: the API keep real and mistyped specs below it; a spec whose shape still multiplies out beyond it
#: (every maximum at once) is reported at this cap with a note, so that every status integer fits
#: the int64 the API server stores.
MAX_REPORTED: Final = 1 << 60


_COMPONENTS: Final = (
    ("weights_bytes", "weights"),
    ("quantization_overhead_bytes", "quantization metadata"),
    ("kv_cache_bytes", "KV cache"),
    ("activation_bytes", "activations"),
    ("gradient_bytes", "gradients"),
    ("optimizer_state_bytes", "optimizer state"),
    ("master_weight_bytes", "master weights"),
    ("communication_buffer_bytes", "communication buffers"),
    ("runtime_overhead_bytes", "runtime overhead"),
)


class Verdict(StrEnum):
    """Outcome of an assessment.

    ``Incomplete``: the estimate leaves out a component the workload needs
    (``EstimateStatus.missingComponents``), so what it counts is a lower bound; it is never
    ``Fits``. A lower bound that already fits no allowed class is ``NoSafeHeadroom``: that
    rejection holds whatever the missing components add.
    """

    Fits = "Fits"
    NoSafeHeadroom = "NoSafeHeadroom"
    Incomplete = "Incomplete"
    UnknownGpuClass = "UnknownGpuClass"
    #: The memory model raised on a spec that passed validation (a gpu-sizer bug). Never
    #: admitted: the webhook denies with the cause, the operator writes it as the reason.
    SizingFailed = "SizingFailed"


@dataclass(frozen=True)
class Fix:
    """A computed change that makes the spec fit (or the best it can do).

    ``field`` is the spec path to change (``spec.inference.maxNumSeqs``), ``value`` the new value,
    ``required_bytes_per_gpu`` the re-estimated per-GPU total with the change, ``gpu_class`` the
    class it would then run on (``None`` when it still fits none), ``gpu_count`` GPUs per replica.
    ``str(fix)`` is the human phrase used in messages.
    """

    field: str
    value: Any
    required_bytes_per_gpu: int
    gpu_class: str | None
    gpu_count: int
    text: str

    @property
    def fits(self) -> bool:
        """Whether the change alone makes the spec fit an allowed class."""
        return self.gpu_class is not None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Assessment:
    """Everything decided about one spec before measuring.

    ``message`` is one or two lines, as ``kubectl`` prints an admission denial or a condition.
    ``fixes`` is empty unless the verdict is ``NoSafeHeadroom``. ``recommendation`` is set only
    for ``Fits``; for ``Incomplete``, ``lower_bound`` names the first class the counted components
    fit (where a measurement starts), which is never published as a recommendation.
    """

    estimate: EstimateStatus
    verdict: Verdict
    message: str
    recommendation: RecommendationStatus | None = None
    fixes: list[Fix] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    lower_bound: RecommendationStatus | None = None


def parallel_path(spec: GPUWorkloadSpec) -> str:
    """The spec path that declares ``spec``'s GPU count, for messages about it."""
    if spec.training is not None:
        return "spec.training.parallelism"
    if spec.generation is not None:
        return "spec.generation.parallelism"
    return "spec.inference"


def gib(n: int | float) -> str:
    return f"{n / GIB:.1f} GiB"


def largest_components(est: EstimateStatus, k: int = 3) -> str:
    per = est.per_gpu
    parts = [(getattr(per, attr), label) for attr, label in _COMPONENTS]
    parts = sorted((p for p in parts if p[0] > 0), key=lambda p: -p[0])[:k]
    return ", ".join(f"{label} {gib(n)}" for n, label in parts)


def sizing_failed(spec: GPUWorkloadSpec, exc: Exception) -> Assessment:
    text = str(exc) or "no message"
    message = (
        f"gpu-sizer could not size this spec ({type(exc).__name__}: {text[:300]}); the spec "
        "passed validation, so this is a gpu-sizer bug: please report it with the spec"
    )
    empty = PerGpuBreakdown(
        weights_bytes=0,
        quantization_overhead_bytes=0,
        kv_cache_bytes=0,
        activation_bytes=0,
        gradient_bytes=0,
        optimizer_state_bytes=0,
        master_weight_bytes=0,
        runtime_overhead_bytes=0,
        total_bytes=0,
    )
    est = EstimateStatus(
        parameter_count=spec.model.parameter_count or 0,
        gpu_count=spec.gpu_count,
        kv_cache_bytes_per_token=0,
        per_gpu=empty,
        notes=[message],
    )
    return Assessment(est, Verdict.SizingFailed, message)


def mig_names(catalog: Sequence[GPUClass]) -> str:
    """``; MIG slices: ...`` grouped by whole-GPU class, or nothing without MIG classes."""
    groups: dict[str, list[str]] = {}
    for c in catalog:
        if c.is_mig:
            groups.setdefault(c.parent, []).append(c.mig_profile)
    if not groups:
        return ""
    return "; MIG slices <class>-mig-<profile>: " + "; ".join(
        f"{parent} {', '.join(profiles)}" for parent, profiles in groups.items()
    )


def incomplete_text(est: EstimateStatus) -> str:
    """``incomplete estimate: <what> not counted: needs <fields>; <fix>`` for every missing part."""
    parts = [m.message for m in est.missing_components]
    fixes = list(dict.fromkeys(m.fix for m in est.missing_components if m.fix))
    return "incomplete estimate: " + "; ".join(parts + fixes)


def _over_cap(model: BaseModel) -> bool:
    """Whether an integer of ``model`` or of a model it holds (not in lists, as in
    :func:`cap_figures`) is above :data:`MAX_REPORTED`. Reads the fields without dumping: the common
    case, nothing capped, costs a few microseconds instead of a full ``model_dump``."""
    for value in vars(model).values():
        if isinstance(value, BaseModel):
            if _over_cap(value):
                return True
        elif isinstance(value, int) and not isinstance(value, bool) and value > MAX_REPORTED:
            return True
    return False


def cap_figures(est: EstimateStatus) -> tuple[EstimateStatus, bool]:
    """``est`` with every integer at most :data:`MAX_REPORTED`, and whether any was capped."""
    if not _over_cap(est):
        return est, False
    data = est.model_dump()
    capped = False

    def cap(value: Any) -> Any:
        nonlocal capped
        if isinstance(value, dict):
            return {k: cap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [cap(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_REPORTED:
            capped = True
            return MAX_REPORTED
        return value

    data = cap(data)
    if not capped:
        return est, False
    data.pop("total_gib", None)
    data["per_gpu"].pop("total_gib", None)
    data["notes"] = [
        *est.notes,
        f"figures above {MAX_REPORTED} (1 EiB) are shown at that cap: the architecture and "
        "token counts multiply out beyond any GPU; check them",
    ]
    return EstimateStatus.model_validate(data), True


def room(cls: GPUClass, required: int) -> str:
    room = (cls.usable - required) / cls.usable
    if room >= 0:
        return f"would leave {room:.0%} free"
    return f"is {gib(required - cls.usable)} short"


def spec_warnings(spec: GPUWorkloadSpec) -> list[str]:
    out: list[str] = []
    if not spec.model.revision:
        out.append(
            "spec.model.revision is not set: measurements cannot be tied to the exact weights"
        )
    if spec.measurement.mode is MeasurementMode.Disabled:
        out.append(
            "spec.measurement.mode is Disabled: the recommendation rests on the estimate alone"
        )
    return out


def presence_note(choice: Choice, warnings: list[str]) -> str:
    """The warning when no node has a fitting class, and the message's suffix when the cheapest
    fitting class has none."""
    cls = choice.gpu_class
    if choice.present_in_cluster is False:
        warnings.append(
            f"no node in the cluster has a fitting class; add {cls.name} nodes "
            f"(label {cls.product_label} in {', '.join(cls.products)})"
        )
    if choice.cheapest is not None and choice.cheapest.name != cls.name:
        return f"; cheapest fitting class {choice.cheapest.name} has no nodes in the cluster"
    return ""
