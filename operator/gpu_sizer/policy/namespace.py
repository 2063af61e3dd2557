"""Namespace policy for admission: headroom bounds and allowed GPU classes per namespace label.

The platform team sets it in the chart values; the chart renders it into ``policy.yaml`` in the
``<fullname>-config`` ConfigMap, mounted at ``/etc/gpu-sizer/policy.yaml`` and passed to the
operator as ``--policy``. Shape (every key optional; fractions are 0..1 of a GPU's memory)::

    defaultMinHeadroomFraction: 0.10   # filled into spec.placement.minHeadroomFraction when unset
    minHeadroomFractionFloor: 0.05     # a spec asking for less is rejected
    maxMinHeadroomFraction: 0.5        # a spec asking for more is rejected (it would waste GPUs)
    incompleteEstimates: Warn          # Warn: admit with a warning | Deny: refuse (see below)
    podEnforcement: Warn               # pods labelled gpusizer.dev/workload: Off | Warn | Enforce
    namespaceRules:
      - namespaceSelector: {matchLabels: {team: research}}
        allowedGpuClasses: [nvidia-l4, nvidia-a100-40gb]
        defaultMinHeadroomFraction: 0.15
        minHeadroomFractionFloor: 0.10
        incompleteEstimates: Deny
        maxConcurrentMeasurements: 2   # measurement Jobs at once in each such namespace
        measurementGpuSecondsPerDay: 36000  # measurement GPU-seconds per UTC day, each such ns
        localQueue: research-gpus      # Kueue LocalQueue for their measurement Jobs
        measurementSharing: Disabled   # Enabled (default) | Disabled: no shared records
        podEnforcement: Enforce

Rules are tried in order and the first whose ``namespaceSelector`` matches the namespace's labels
applies (an empty selector matches every namespace, so it makes a catch-all last rule); a
namespace no rule matches gets the top-level settings and every class. A rule's floor can only
raise the top-level floor, never lower it; ``maxMinHeadroomFraction`` is cluster-wide.
``defaultMinHeadroomFraction`` absent or null at the top level means the operator's
``--default-headroom``. ``incompleteEstimates`` says what happens to a spec whose estimate is
``Incomplete`` (a component it needs, such as the KV cache, cannot be counted, so the estimate is
a lower bound): ``Warn`` (default) admits it with an admission warning naming the missing fields,
``Deny`` refuses it with the same text; a rule's value replaces the top-level one.

Measurement (read by the operator, not the webhook): ``maxConcurrentMeasurements``
(top level or per rule; a rule's replaces the top-level one) caps the measurement Jobs running at
once in *each* namespace it applies to, below the cluster-wide ``--max-concurrent-measurements``;
``measurementGpuSecondsPerDay`` (top level or per rule; a rule's replaces the top-level one) is
each namespace's budget of measurement GPU-seconds per UTC day (GPUs x seconds of each Job;
see :mod:`gpu_sizer.measurement.gpu_time`): once used up, new measurements there wait, Queued,
until 00:00 UTC; ``localQueue`` (per rule) names a Kueue LocalQueue: measurement Jobs of those
namespaces carry ``kueue.x-k8s.io/queue-name`` and are created suspended, Kueue admits them
under its quotas, and the operator's own cap and limits do not apply to them (Kueue is the
queue there, the GPU-second budget does not hold its Jobs back either).
``measurementSharing`` (top level or per rule; a rule's replaces the top-level one): ``Enabled``
(default) lets the namespace's workloads reuse a fresh cluster-scoped ``GPUMeasurement`` of the
same measurement key instead of running a Job, wait for another namespace's measurement of that
key already in flight, and publish their own results as records; ``Disabled`` does none of the
three: its workloads always measure in their own Jobs and nothing about them leaves the namespace
(for confidential model configurations).

``podEnforcement`` says what the pod webhook does with a pod labelled ``gpusizer.dev/workload``
whose GPUWorkload is missing, ``Rejected``, not yet ``Ready``, or whose own GPU request
contradicts the recommendation: ``Enforce`` denies it with the reason and the fix, ``Warn``
(default) admits it with admission warnings, ``Off`` admits it silently; in every mode the
recommendation, when there is one, is applied to the pod. Pure: no Kubernetes access here (the
handlers read the labels).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gpu_sizer.api import FieldError, problems_from
from gpu_sizer.api.spec import MAX_MIN_HEADROOM_FRACTION, Fraction
from gpu_sizer.catalog import GPUClass
from gpu_sizer.yamlio import UnreadableFile, YamlError, load, read_text

__all__ = [
    "EffectivePolicy",
    "IncompleteEstimates",
    "NamespaceRule",
    "NamespaceSelector",
    "PodEnforcement",
    "Policy",
    "PolicyError",
    "load_policy",
    "parse_policy",
]


#: apimachinery's DNS-1123 subdomain (``validation.IsDNS1123Subdomain``): a LocalQueue's name.
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class PolicyError(ValueError):
    """The policy file is invalid; ``problems`` holds one ``path: message`` line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: invalid policy:\n" + "\n".join(problems))


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class IncompleteEstimates(StrEnum):
    """What admission does with a spec whose estimate is ``Incomplete`` (a lower bound)."""

    Warn = "Warn"
    Deny = "Deny"


class PodEnforcement(StrEnum):
    """What the pod webhook does when a labelled pod cannot follow its recommendation."""

    Off = "Off"
    Warn = "Warn"
    Enforce = "Enforce"


class MeasurementSharing(StrEnum):
    """Whether a namespace takes part in shared measurement records (``GPUMeasurement``)."""

    Enabled = "Enabled"
    Disabled = "Disabled"


class NamespaceSelector(_Model):
    """A Kubernetes label selector on the Namespace object (``matchLabels`` only)."""

    match_labels: dict[str, str] = Field(default_factory=dict)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Every ``matchLabels`` pair is present; an empty selector matches every namespace."""
        return all(labels.get(k) == v for k, v in self.match_labels.items())


class NamespaceRule(_Model):
    """Settings for the namespaces whose labels match ``namespaceSelector``."""

    namespace_selector: NamespaceSelector = Field(default_factory=NamespaceSelector)
    allowed_gpu_classes: list[str] | None = Field(
        None, description="Classes workloads in these namespaces may use; unset allows all."
    )
    default_min_headroom_fraction: Fraction | None = Field(
        None, ge=0.0, le=MAX_MIN_HEADROOM_FRACTION
    )
    min_headroom_fraction_floor: Fraction | None = Field(None, ge=0.0, le=MAX_MIN_HEADROOM_FRACTION)
    incomplete_estimates: IncompleteEstimates | None = Field(
        None, description="Warn or Deny for Incomplete estimates; unset takes the top level's."
    )
    max_concurrent_measurements: int | None = Field(
        None, ge=1, description="Measurement Jobs at once per namespace; unset: the top level's."
    )
    measurement_gpu_seconds_per_day: int | None = Field(
        None,
        ge=1,
        description="GPU-seconds of measurement Jobs per UTC day per namespace; unset: the top "
        "level's.",
    )
    local_queue: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        description="Kueue LocalQueue for measurement Jobs (kueue.x-k8s.io/queue-name).",
    )
    measurement_sharing: MeasurementSharing | None = Field(
        None, description="Enabled or Disabled shared measurement records; unset: top level's."
    )
    pod_enforcement: PodEnforcement | None = Field(
        None, description="Off, Warn or Enforce for labelled pods; unset takes the top level's."
    )

    @field_validator("local_queue")
    @classmethod
    def _local_queue_name(cls, value: str | None) -> str | None:
        """A LocalQueue is a Kubernetes object name (apimachinery ``IsDNS1123Subdomain``), and
        its name becomes a label value (at most 63 characters, checked by the field)."""
        if value is not None and not _DNS1123_SUBDOMAIN.fullmatch(value):
            raise ValueError(
                f"must be a Kubernetes object name (DNS-1123: lowercase letters, digits, '-' "
                f"and '.', starting and ending with a letter or digit), not {value!r}"
            )
        return value


class Policy(_Model):
    """The whole policy file. Without one, the webhook applies exactly the API's own rules: 10 %
    headroom by default, anything from 0 to the API's maximum
    (:data:`gpu_sizer.api.spec.MAX_MIN_HEADROOM_FRACTION`, which a policy can only lower), so
    the webhook and ``gpu-sizer estimate`` accept the same values."""

    default_min_headroom_fraction: Fraction = Field(0.10, ge=0.0, le=MAX_MIN_HEADROOM_FRACTION)
    min_headroom_fraction_floor: Fraction = Field(0.0, ge=0.0, le=MAX_MIN_HEADROOM_FRACTION)
    max_min_headroom_fraction: Fraction = Field(
        MAX_MIN_HEADROOM_FRACTION, gt=0.0, le=MAX_MIN_HEADROOM_FRACTION
    )
    incomplete_estimates: IncompleteEstimates = IncompleteEstimates.Warn
    max_concurrent_measurements: int | None = Field(None, ge=1)
    measurement_gpu_seconds_per_day: int | None = Field(None, ge=1)
    measurement_sharing: MeasurementSharing = MeasurementSharing.Enabled
    pod_enforcement: PodEnforcement = PodEnforcement.Warn
    namespace_rules: list[NamespaceRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Policy:
        lo, hi = self.min_headroom_fraction_floor, self.max_min_headroom_fraction
        bad: list[tuple[str, str]] = []
        if lo > hi:
            bad.append(
                (
                    "minHeadroomFractionFloor",
                    f"{lo} exceeds maxMinHeadroomFraction ({hi})",
                )
            )
        if not lo <= self.default_min_headroom_fraction <= hi:
            bad.append(
                (
                    "defaultMinHeadroomFraction",
                    f"{self.default_min_headroom_fraction} must lie between "
                    f"minHeadroomFractionFloor ({lo}) and maxMinHeadroomFraction ({hi})",
                )
            )
        for i, rule in enumerate(self.namespace_rules):
            floor = max(lo, rule.min_headroom_fraction_floor or 0.0)
            default = rule.default_min_headroom_fraction
            if default is not None and not floor <= default <= hi:
                bad.append(
                    (
                        f"namespaceRules.{i}.defaultMinHeadroomFraction",
                        f"{default} must lie between the floor ({floor}) and "
                        f"maxMinHeadroomFraction ({hi})",
                    )
                )
            if floor > hi:
                bad.append(
                    (
                        f"namespaceRules.{i}.minHeadroomFractionFloor",
                        f"{floor} exceeds maxMinHeadroomFraction ({hi})",
                    )
                )
            if rule.allowed_gpu_classes == []:
                bad.append(
                    (
                        f"namespaceRules.{i}.allowedGpuClasses",
                        "an empty list would reject every workload; omit the key to allow "
                        "every class",
                    )
                )
        if bad:
            raise FieldError(bad)
        return self

    @property
    def uses_labels(self) -> bool:
        """Whether any rule looks at namespace labels (else no Namespace read is needed)."""
        return any(r.namespace_selector.match_labels for r in self.namespace_rules)

    def unknown_classes(self, catalog: Iterable[GPUClass]) -> list[str]:
        """``namespaceRules[i].allowedGpuClasses: unknown class X`` lines, for startup checks."""
        known = {c.name for c in catalog}
        return [
            f"namespaceRules[{i}].allowedGpuClasses: unknown class {name!r}; known: "
            + ", ".join(sorted(known))
            for i, rule in enumerate(self.namespace_rules)
            for name in rule.allowed_gpu_classes or []
            if name not in known
        ]

    def for_namespace(self, labels: Mapping[str, str]) -> EffectivePolicy:
        """The settings for a namespace with ``labels``: the first matching rule's, else the
        top-level ones (see the module docstring)."""
        for i, rule in enumerate(self.namespace_rules):
            if not rule.namespace_selector.matches(labels):
                continue
            floor = max(self.min_headroom_fraction_floor, rule.min_headroom_fraction_floor or 0.0)
            default = rule.default_min_headroom_fraction
            if default is None:
                default = self.default_min_headroom_fraction
            allowed = rule.allowed_gpu_classes
            return EffectivePolicy(
                allowed_classes=None if allowed is None else frozenset(allowed),
                default_min_headroom_fraction=max(default, floor),
                min_headroom_fraction_floor=floor,
                max_min_headroom_fraction=self.max_min_headroom_fraction,
                matched_rule=i,
                incomplete_estimates=rule.incomplete_estimates or self.incomplete_estimates,
                max_concurrent_measurements=(
                    rule.max_concurrent_measurements or self.max_concurrent_measurements
                ),
                measurement_gpu_seconds_per_day=(
                    rule.measurement_gpu_seconds_per_day or self.measurement_gpu_seconds_per_day
                ),
                local_queue=rule.local_queue,
                measurement_sharing=rule.measurement_sharing or self.measurement_sharing,
                pod_enforcement=rule.pod_enforcement or self.pod_enforcement,
            )
        return EffectivePolicy(
            allowed_classes=None,
            default_min_headroom_fraction=self.default_min_headroom_fraction,
            min_headroom_fraction_floor=self.min_headroom_fraction_floor,
            max_min_headroom_fraction=self.max_min_headroom_fraction,
            incomplete_estimates=self.incomplete_estimates,
            max_concurrent_measurements=self.max_concurrent_measurements,
            measurement_gpu_seconds_per_day=self.measurement_gpu_seconds_per_day,
            measurement_sharing=self.measurement_sharing,
            pod_enforcement=self.pod_enforcement,
        )


@dataclass(frozen=True)
class EffectivePolicy:
    """What applies to one namespace. ``allowed_classes`` ``None`` means every catalog class."""

    allowed_classes: frozenset[str] | None
    default_min_headroom_fraction: float
    min_headroom_fraction_floor: float
    max_min_headroom_fraction: float
    matched_rule: int | None = None
    incomplete_estimates: IncompleteEstimates = IncompleteEstimates.Warn
    #: Measurement Jobs at once in this namespace (None: only the cluster-wide cap).
    max_concurrent_measurements: int | None = None
    #: Measurement GPU-seconds per UTC day in this namespace (None: no budget).
    measurement_gpu_seconds_per_day: int | None = None
    #: Kueue LocalQueue of this namespace's measurement Jobs (None: no Kueue).
    local_queue: str | None = None
    #: Shared measurement records (GPUMeasurement): reuse, wait for and publish them.
    measurement_sharing: MeasurementSharing = MeasurementSharing.Enabled
    pod_enforcement: PodEnforcement = PodEnforcement.Warn


def parse_policy(data: Any, source: str = "policy", *, default_headroom: float = 0.10) -> Policy:
    """Validate policy data (the YAML document as plain data; ``None`` is the default policy).

    ``default_headroom`` (``--default-headroom``) stands in for an absent or null top-level
    ``defaultMinHeadroomFraction``.

    :raises PolicyError: one line per problem, each naming its key path.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(source, ["(document): must be a mapping"])
    if data.get("defaultMinHeadroomFraction") is None:
        data = {**data, "defaultMinHeadroomFraction": default_headroom}
    try:
        return Policy.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise PolicyError(source, [str(p) for p in problems_from(exc, model=Policy)]) from None


def load_policy(path: str | Path, *, default_headroom: float = 0.10) -> Policy:
    """Read and validate a policy YAML file (see :func:`parse_policy`).

    :raises PolicyError: the file is unreadable, not YAML, or invalid (with every key path).
    """
    try:
        data = load(read_text(path))
    except UnreadableFile as exc:
        raise PolicyError(str(path), [f"cannot read: {exc}"]) from None
    except YamlError as exc:
        raise PolicyError(str(path), [f"invalid YAML: {exc}"]) from None
    return parse_policy(data, str(path), default_headroom=default_headroom)
