"""The admission answer for one GPUWorkload spec: allowed or denied, why, and with what warnings.

Pure: plain data in (the ``.spec`` mapping as the API server sent it, the namespace's effective
policy, the GPU catalog), a plain :class:`Answer` out. The kopf handlers in
:mod:`gpu_sizer.admission.handlers` only move data in and out of this module.

The sizing verdict itself comes from :func:`gpu_sizer.sizing.verdict.assess`, the one code path
shared with ``gpu-sizer estimate`` and the controller: for the same spec and catalog the webhook
denies with exactly the message ``gpu-sizer estimate`` prints. Spec errors are the lines
:func:`gpu_sizer.api.parse_spec` gives, one per problem, each naming its field path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpu_sizer.api import GPUWorkloadSpec, InvalidWorkload, parse_spec
from gpu_sizer.api.spec import spec_to_wire
from gpu_sizer.catalog import GPUClass
from gpu_sizer.policy.namespace import EffectivePolicy, IncompleteEstimates
from gpu_sizer.sizing.assessment import Verdict
from gpu_sizer.sizing.verdict import assess

__all__ = ["MAX_MESSAGE_CHARS", "Answer", "Outcome", "bounded", "defaulted_spec", "review"]

logger = logging.getLogger(__name__)


class Outcome(StrEnum):
    """Label values of ``gpusizer_admission_verdicts_total{verdict}``."""

    Allowed = "Allowed"
    AllowedWithWarnings = "AllowedWithWarnings"
    Invalid = "Invalid"
    NoSafeHeadroom = "NoSafeHeadroom"
    AllowedIncomplete = "AllowedIncomplete"
    Incomplete = "Incomplete"
    UnknownGpuClass = "UnknownGpuClass"
    PolicyViolation = "PolicyViolation"
    PolicyUnavailable = "PolicyUnavailable"
    SizingFailed = "SizingFailed"


#: HTTP status codes put in the AdmissionReview's ``response.status.code``: 422 for a spec that
#: cannot be sized as written (an incomplete estimate under ``incompleteEstimates: Deny``
#: included), 403 for one the namespace policy forbids, 503 (retry) when the
#: namespace's labels, and so its policy, could not be read; 422 too when sizing a valid spec
#: failed (a gpu-sizer bug: a denial whose message names the cause, never an HTTP 500).
_CODES: dict[Outcome, int] = {
    Outcome.Invalid: 422,
    Outcome.NoSafeHeadroom: 422,
    Outcome.Incomplete: 422,
    Outcome.UnknownGpuClass: 422,
    Outcome.PolicyViolation: 403,
    Outcome.PolicyUnavailable: 503,
    Outcome.SizingFailed: 422,
}


#: Longest denial message, in characters. Messages are short by construction (the problem list
#: is cut at :data:`gpu_sizer.api.errors.MAX_PROBLEMS` lines, lists and names are bounded by the
#: API); this is the backstop for whatever a future message forgets, since the API server stores
#: the text in its audit log and kubectl prints it whole.
MAX_MESSAGE_CHARS = 16_384


def bounded(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    note = f" ... ({len(text) - limit} more characters not shown)"
    return text[: max(0, limit - len(note))] + note


@dataclass(frozen=True)
class Answer:
    """What the webhook tells the API server. ``message`` is empty when allowed."""

    outcome: Outcome
    message: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.outcome in (
            Outcome.Allowed,
            Outcome.AllowedWithWarnings,
            Outcome.AllowedIncomplete,
        )

    @property
    def code(self) -> int:
        """HTTP status code for a denial (200 when allowed)."""
        return _CODES.get(self.outcome, 200)


def _policy_problems(
    spec: GPUWorkloadSpec, policy: EffectivePolicy, namespace: str, catalog_names: set[str]
) -> list[str]:
    problems: list[str] = []
    room = spec.placement.min_headroom_fraction
    if room < policy.min_headroom_fraction_floor:
        problems.append(
            f"spec.placement.minHeadroomFraction: {room:g} is below the floor of "
            f"{policy.min_headroom_fraction_floor:g} that the policy sets for namespace "
            f"{namespace!r}; raise it to at least {policy.min_headroom_fraction_floor:g}"
        )
    if room > policy.max_min_headroom_fraction:
        problems.append(
            f"spec.placement.minHeadroomFraction: {room:g} exceeds the policy maximum of "
            f"{policy.max_min_headroom_fraction:g}; a margin that large leaves most of the GPU "
            "idle"
        )
    if policy.allowed_classes is not None:
        denied = [
            name
            for name in spec.placement.gpu_classes
            if name in catalog_names and name not in policy.allowed_classes
        ]
        if denied:
            problems.append(
                f"spec.placement.gpuClasses: namespace {namespace!r} allows only "
                + ", ".join(sorted(policy.allowed_classes))
                + "; remove "
                + ", ".join(denied)
            )
    return problems


def _with_placement(spec: GPUWorkloadSpec, **changes: Any) -> GPUWorkloadSpec:
    return spec.model_copy(update={"placement": spec.placement.model_copy(update=changes)})


def review(
    spec_doc: Any,
    *,
    namespace: str,
    policy: EffectivePolicy,
    catalog: Sequence[GPUClass],
) -> Answer:
    """Decide on a GPUWorkload's ``.spec`` (the raw mapping) in ``namespace``.

    Order: spec errors (every one, up to :data:`gpu_sizer.api.errors.MAX_PROBLEMS`), then the
    namespace policy (headroom floor and maximum,
    allowed classes), then :func:`gpu_sizer.sizing.verdict.assess`, where a spec that allows every
    class is limited to the classes its namespace allows. Allowed answers carry the assessment's
    warnings (headroom under twice the minimum, revision unpinned, measurement disabled), as
    ``gpu-sizer estimate`` prints them. An ``Incomplete`` assessment is denied or admitted with
    its message as the first warning, as the namespace's ``incompleteEstimates`` says. The
    message is at most :data:`MAX_MESSAGE_CHARS` long.
    """
    answer = _review(spec_doc, namespace=namespace, policy=policy, catalog=catalog)
    return Answer(answer.outcome, bounded(answer.message), answer.warnings)


def _review(
    spec_doc: Any,
    *,
    namespace: str,
    policy: EffectivePolicy,
    catalog: Sequence[GPUClass],
) -> Answer:
    try:
        spec = parse_spec(spec_doc)
    except InvalidWorkload as exc:
        return Answer(Outcome.Invalid, "\n".join(str(p) for p in exc.problems))
    if "minHeadroomFraction" not in (spec_doc.get("placement") or {}):
        # Unset (the mutating webhook was bypassed): the namespace's default applies, as the
        # mutating webhook would have written it.
        spec = _with_placement(spec, min_headroom_fraction=policy.default_min_headroom_fraction)

    problems = _policy_problems(spec, policy, namespace, {c.name for c in catalog})
    if problems:
        return Answer(Outcome.PolicyViolation, "\n".join(problems))

    if policy.allowed_classes is not None and not spec.placement.gpu_classes:
        # The namespace's classes stand in for an empty list ("every class"), so the message
        # speaks of "the largest allowed class" and the fixes stay within what may be used.
        allowed = [c.name for c in catalog if c.name in policy.allowed_classes]
        spec = _with_placement(spec, gpu_classes=allowed)
    assessment = assess(spec, catalog)
    if assessment.verdict is Verdict.SizingFailed:
        # The memory model raised on a valid spec (a gpu-sizer bug): deny (fail safe) with
        # the cause, never an HTTP 500 from the webhook.
        logger.error("Sizing failed for a valid spec in namespace %r: %s", namespace,
                     assessment.message)  # fmt: skip
        return Answer(Outcome.SizingFailed, assessment.message)
    if assessment.verdict is Verdict.UnknownGpuClass:
        return Answer(Outcome.UnknownGpuClass, assessment.message)
    if assessment.verdict is Verdict.NoSafeHeadroom:
        return Answer(Outcome.NoSafeHeadroom, assessment.message)
    if assessment.verdict is Verdict.Incomplete:
        if policy.incomplete_estimates is IncompleteEstimates.Deny:
            return Answer(
                Outcome.Incomplete,
                f"{assessment.message}\nnamespace {namespace!r} admits only complete estimates "
                "(policy incompleteEstimates: Deny)",
            )
        return Answer(Outcome.AllowedIncomplete, "", (assessment.message, *assessment.warnings))

    warnings = assessment.warnings
    outcome = Outcome.AllowedWithWarnings if warnings else Outcome.Allowed
    return Answer(outcome, "", tuple(warnings))


def defaulted_spec(spec_doc: Any, *, policy: EffectivePolicy) -> dict[str, Any] | None:
    """The spec with every default written out, for the mutating webhook; ``None`` if invalid.

    Fills what pydantic defaults (measurement mode and timeout, engine, parallel sizes,
    ``targetConcurrency``, ...) and the namespace's default ``minHeadroomFraction`` when the spec
    gives none. Values the spec sets are never changed, and the result gets exactly the verdict,
    message and warnings of the spec as written (``tests/admission/test_mutation_agreement.py``
    checks both over generated specs and policies). An invalid spec is left alone: the validating
    webhook rejects it with the field paths.

    Defaults *derived from other fields* are not written: the engine's ``maxNumBatchedTokens``
    (:func:`gpu_sizer.budget.activations.prefill_tokens`: vLLM ``max(8192, maxNumSeqs)``, TGI
    ``maxModelLen + 50``) stays implicit and is recomputed by the budget from the spec as it is
    at every estimate. Written once, it would be frozen: a later ``kubectl apply`` raising
    ``maxNumSeqs`` above it would be denied for a field the user never set, TGI's figure can be
    below ``maxNumSeqs`` (which the API refuses as an explicit value), and the fixes in a denial
    would be computed with the frozen figure, so the webhook and ``gpu-sizer estimate`` would
    name different fixes for the same file. The same holds for defaults that depend on the GPU
    class (vLLM's and SGLang's batched-token budget, TGI's ``--max-batch-prefill-tokens``, the
    engine's memory fraction): the recommendation's ``engineArgs`` carry them for the class it
    names.
    """
    try:
        spec = parse_spec(spec_doc)
    except InvalidWorkload:
        return None
    wire = spec_to_wire(spec)
    given: Mapping[str, Any] = spec_doc.get("placement") or {}
    if "minHeadroomFraction" not in given:
        wire["placement"]["minHeadroomFraction"] = policy.default_min_headroom_fraction
    return wire
