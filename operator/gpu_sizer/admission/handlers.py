"""kopf admission handlers for GPUWorkloads: thin adapters around :mod:`.verdict`.

kopf serves each handler at ``/<handler id>`` on the webhook server that
:func:`gpu_sizer.admission.server.configure` sets up; the chart's webhook configurations point at
``/validate-gpuworkload`` and ``/mutate-gpuworkload`` for ``gpuworkloads`` CREATE and UPDATE.
Importing this module registers the handlers in kopf's default registry.

Pods labelled ``gpusizer.dev/workload`` are served at ``/mutate-pod`` (CREATE only):
:mod:`.pods` decides, this handler reads the GPUWorkload and applies the answer.

Only new specs are judged (:func:`gpu_sizer.admission.changes.judged`): CREATE, and an UPDATE
that changes ``spec``. kopf dispatches every operation to these handlers whatever their
``operations=`` says (it uses that list only for webhook configurations it manages, which this
operator does not), so the handlers themselves allow anything else (DELETE, CONNECT, metadata-only
and status updates, updates of an object being deleted) untouched: the server must not deny what
it does not judge, whichever rules the chart registers. Neither handler ever touches ``status``.

The webhook server calls these same functions itself for its three paths (:mod:`.direct`,
:data:`DIRECT_ROUTES`), so they read their bodies only as mappings: kopf passes a
:class:`kopf.Body`, the direct dispatch a read-only view of the decoded object.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from gpu_sizer.admission.answers import AnswerCache, spec_key
from gpu_sizer.admission.capacity import AdmissionCapacity, Overloaded
from gpu_sizer.admission.changes import judged
from gpu_sizer.admission.direct import Route
from gpu_sizer.admission.namespaces import (
    NamespaceLabels,
    NamespaceLookupError,
    describe,
    kubernetes_fetcher,
)
from gpu_sizer.admission.pod_gpus import ClaimGpus, claim_gpus
from gpu_sizer.admission.pods import (
    ClaimFetcher,
    WorkloadFetcher,
    is_measurement_pod,
    kubernetes_claim_fetcher,
    kubernetes_workload_fetcher,
    workload_label,
)
from gpu_sizer.admission.verdict import Answer, Outcome, bounded, defaulted_spec
from gpu_sizer.admission.workers import Shipped, review, review_pod
from gpu_sizer.api import GROUP, PLURAL, VERSION
from gpu_sizer.api.workload import validate_name
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass
from gpu_sizer.metrics import ADMISSION_VERDICTS
from gpu_sizer.policy.namespace import EffectivePolicy, PodEnforcement, Policy

__all__ = [
    "DIRECT_ROUTES",
    "AdmissionConfig",
    "DenialLogFilter",
    "configure_admission",
    "mutate_gpuworkload",
    "mutate_pod",
    "validate_gpuworkload",
]


@dataclass
class AdmissionConfig:
    """What the handlers decide with; replaced as a whole by :func:`configure_admission`."""

    policy: Policy = field(default_factory=Policy)
    catalog: Sequence[GPUClass] = DEFAULT_CATALOG
    namespaces: NamespaceLabels = field(
        default_factory=lambda: NamespaceLabels(kubernetes_fetcher())
    )
    #: Where the CPU work of a review runs (worker processes and threads, off the event loop).
    capacity: AdmissionCapacity = field(default_factory=AdmissionCapacity)
    #: Reads the GPUWorkload a labelled pod names (blocking; run in a worker thread).
    workloads: WorkloadFetcher = field(default_factory=kubernetes_workload_fetcher)
    #: Seconds a pod review waits for that read (the webhook's timeoutSeconds is 10 by default).
    workload_timeout: float = 4.0
    #: Reads the DRA ResourceClaims and ResourceClaimTemplates a labelled pod names (blocking).
    claims: ClaimFetcher = field(default_factory=kubernetes_claim_fetcher)
    #: Validation answers already given, by spec, namespace and policy (see :mod:`.answers`);
    #: not an argument, so that a config made with other settings starts without them.
    answers: AnswerCache = field(default_factory=AnswerCache, init=False, repr=False)
    _effective: dict[frozenset[tuple[str, str]], EffectivePolicy] = field(
        default_factory=dict, init=False, repr=False
    )
    _uses_labels: bool = field(default=False, init=False, repr=False)
    #: The catalog as sent to the verdicts' worker processes (pickled once, not per review).
    shipped: Shipped[Sequence[GPUClass]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._uses_labels = self.policy.uses_labels
        self.shipped = Shipped.of(tuple(self.catalog))

    def effective_policy(self, labels: Mapping[str, str]) -> EffectivePolicy:
        """``policy.for_namespace(labels)``, worked out once per label set (at most
        :data:`MAX_LABEL_SETS` kept: namespaces of a cluster share a few label sets)."""
        key = frozenset(labels.items())
        found = self._effective.get(key)
        if found is None:
            if len(self._effective) >= MAX_LABEL_SETS:
                self._effective.clear()
            found = self._effective[key] = self.policy.for_namespace(labels)
        return found


#: Distinct namespace label sets whose effective policy is kept (then the memo starts over).
MAX_LABEL_SETS = 1024

_config = AdmissionConfig()

#: Longest denial logged, in characters: enough for the first problems of a spec; a log line
#: per denial must not let one client fill the operator's log.
MAX_LOGGED_DENIAL_CHARS = 2048


class DenialLogFilter(logging.Filter):
    """Log admission denials at INFO instead of kopf's ERROR.

    kopf logs every :class:`kopf.AdmissionError` as "<handler> failed permanently" at ERROR; for
    this webhook a denial is the expected answer to a user's bad spec, not an operator fault, and
    alerting on ERROR logs must not page anyone for a typo in a GPUWorkload. Install it on the
    ``kopf.objects`` logger; genuine handler crashes keep kopf's own messages and levels.
    The logged denial is cut at :data:`MAX_LOGGED_DENIAL_CHARS` (the user gets all of it).
    """

    #: The handlers that deny: GPUWorkload specs, and labelled pods under podEnforcement Enforce.
    _prefixes = tuple(
        f"Webhook '{hook}' failed permanently: " for hook in ("validate-gpuworkload", "mutate-pod")
    )

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.ERROR:
            return True
        message = record.getMessage()
        for prefix in self._prefixes:
            if message.startswith(prefix):
                denial = message.removeprefix(prefix)
                record.msg = "Admission denied: " + bounded(denial, MAX_LOGGED_DENIAL_CHARS)
                record.args = ()
                record.levelno, record.levelname = logging.INFO, "INFO"
                break
        return True


def configure_admission(config: AdmissionConfig) -> None:
    """Set the policy, catalog and namespace-label source the handlers use."""
    global _config
    _config = config


async def _policy_for(namespace: str | None) -> tuple[EffectivePolicy, str | None]:
    """The namespace's effective policy and a warning when it rests on stale labels.

    :raises NamespaceLookupError: the policy depends on labels that could not be read.
    """
    config = _config
    if not config._uses_labels or not namespace:
        return config.effective_policy({}), None
    labels, warning = await config.namespaces.get(namespace)
    return config.effective_policy(labels), warning


@kopf.on.validate(
    GROUP, VERSION, PLURAL, id="validate-gpuworkload", operations=["CREATE", "UPDATE"]
)
async def validate_gpuworkload(
    *,
    body: Mapping[str, Any],
    subresource: str | None,
    warnings: list[str],
    operation: str | None = None,
    old: Mapping[str, Any] | None = None,
    new: Mapping[str, Any] | None = None,
    **_: Any,
) -> None:
    """Deny specs that are invalid, break the namespace policy or have no safe headroom.

    :raises kopf.AdmissionError: the denial, with the message ``kubectl`` prints.
    """
    op = operation or "UNKNOWN"
    if not judged(op, subresource, old, new):
        ADMISSION_VERDICTS.labels(op, Outcome.Allowed.value).inc()
        return
    namespace = body.get("metadata", {}).get("namespace")
    try:
        policy, stale = await _policy_for(namespace)
    except NamespaceLookupError as exc:
        answer = Answer(Outcome.PolicyUnavailable, f"{exc}; retry shortly")
    else:
        config = _config
        spec = body.get("spec")
        text = spec_key(spec)
        key = None if text is None else (text, namespace or "", policy)

        def judge() -> Awaitable[Answer]:
            return config.capacity.run(
                review, spec, namespace=namespace or "", policy=policy, catalog=config.shipped
            )

        answer = await config.answers.answer(key, judge)
        if stale and answer.allowed:
            answer = Answer(Outcome.AllowedWithWarnings, "", (*answer.warnings, stale))
    ADMISSION_VERDICTS.labels(op, answer.outcome.value).inc()
    warnings.extend(answer.warnings)
    if not answer.allowed:
        raise kopf.AdmissionError(answer.message, code=answer.code)


@kopf.on.mutate(GROUP, VERSION, PLURAL, id="mutate-gpuworkload", operations=["CREATE", "UPDATE"])
async def mutate_gpuworkload(
    *,
    body: Mapping[str, Any],
    patch: kopf.Patch,
    subresource: str | None,
    warnings: list[str],
    operation: str | None = None,
    old: Mapping[str, Any] | None = None,
    new: Mapping[str, Any] | None = None,
    **_: Any,
) -> None:
    """Write every default into ``spec`` (a JSONPatch of additions) so the stored object is
    explicit. Invalid specs are left alone for the validating webhook to reject."""
    if not judged(operation, subresource, old, new):
        return
    namespace = body.get("metadata", {}).get("namespace")
    try:
        policy, stale = await _policy_for(namespace)
    except NamespaceLookupError:
        # The default headroom depends on the namespace's policy: fill nothing; the validating
        # webhook refuses the request with the lookup error (fail safe, and says so).
        return
    if stale:
        warnings.append(stale)
    wire = await _config.capacity.run(defaulted_spec, body.get("spec"), policy=policy)
    if wire is not None:
        patch["spec"] = wire


async def _pod_claims(body: Any, namespace: str) -> list[ClaimGpus]:
    """The GPU devices of each DRA resource claim of a pod (``spec.resourceClaims``), read
    through :attr:`AdmissionConfig.claims`; a claim that cannot be read counts as unknown."""
    spec = body.get("spec")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    out: list[ClaimGpus] = []
    config = _config
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping):
            continue  # a malformed pod: review_pod says so
        claim = str(entry.get("name") or "?")
        if entry.get("resourceClaimTemplateName"):
            kind, ref = "ResourceClaimTemplate", str(entry["resourceClaimTemplateName"])
        elif entry.get("resourceClaimName"):
            kind, ref = "ResourceClaim", str(entry["resourceClaimName"])
        else:
            out.append(ClaimGpus(claim, None, "it names neither a claim nor a template"))
            continue
        if validate_name(ref) is not None:
            out.append(ClaimGpus(claim, None, f"{kind} name {ref!r} is not an object name"))
            continue
        try:
            found = await asyncio.wait_for(
                asyncio.to_thread(config.claims, namespace, kind, ref), config.workload_timeout
            )
        except Exception as exc:  # API error, timeout: unknown, never zero
            out.append(ClaimGpus(claim, None, f"{kind} {ref} could not be read: {describe(exc)}"))
            continue
        if found is None:
            out.append(ClaimGpus(claim, None, f"{kind} {namespace}/{ref} not found"))
            continue
        out.append(claim_gpus(claim, found))
    return out


@kopf.on.mutate("", "v1", "pods", id="mutate-pod", operations=["CREATE"])
async def mutate_pod(
    *,
    body: Mapping[str, Any],
    patch: kopf.Patch,
    subresource: str | None,
    warnings: list[str],
    operation: str | None = None,
    **_: Any,
) -> None:
    """Apply the recommendation of the GPUWorkload a pod names in ``gpusizer.dev/workload``, or
    deny the pod under ``podEnforcement: Enforce`` (see :mod:`.pods`).

    :raises kopf.AdmissionError: the denial, with the problems and their fixes.
    """
    if operation != "CREATE" or subresource:
        return
    meta = body.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if isinstance(labels, Mapping) and is_measurement_pod(labels):
        return  # the operator's own measurement pods are never placed nor refused (.pods)
    name, label_problem = workload_label(body)
    if name is None and label_problem is None:
        return  # the pod does not opt in
    namespace = str((meta.get("namespace") if isinstance(meta, Mapping) else None) or "")
    config = _config
    try:
        policy, stale = await _policy_for(namespace)
    except NamespaceLookupError as exc:
        # The pod webhook's failurePolicy is Ignore: fail open, and say so.
        warnings.append(f"gpu-sizer did not apply GPUWorkload {namespace}/{name}: {exc}")
        return
    workload: Any = None
    error: str | None = None
    claims: list[ClaimGpus] = []
    if name is not None:  # a GPUWorkload name: safe in an API path
        try:
            workload = await asyncio.wait_for(
                asyncio.to_thread(config.workloads, namespace, name), config.workload_timeout
            )
        except Exception as exc:  # API error, timeout, configuration: said, never a crash
            error = describe(exc)
        claims = await _pod_claims(body, namespace)
    try:
        answer = await config.capacity.run(
            review_pod,
            dict(body),
            namespace,
            workload,
            enforcement=policy.pod_enforcement,
            catalog=config.shipped,
            lookup_error=error,
            claims=claims,
        )
    except Overloaded:  # shed: the server answers 429/503, which the API server retries
        raise
    except Exception as exc:  # a review must never fail open by crashing (nor deny under Warn)
        logging.getLogger(__name__).exception("pod review of %s/%s failed", namespace, name)
        if policy.pod_enforcement is PodEnforcement.Enforce:
            raise kopf.AdmissionError(
                f"pod denied by gpu-sizer (podEnforcement Enforce): the pod could not be "
                f"reviewed ({type(exc).__name__}: {exc})",
                code=403,
            ) from None
        if policy.pod_enforcement is PodEnforcement.Warn:
            warnings.append(f"gpu-sizer could not review the pod: {type(exc).__name__}: {exc}")
        return
    outcome = "Denied" if not answer.allowed else ("Applied" if answer.pod else "Allowed")
    ADMISSION_VERDICTS.labels("CREATE", f"Pod{outcome}").inc()
    warnings.extend(answer.warnings)
    if stale:
        warnings.append(stale)
    if not answer.allowed:
        raise kopf.AdmissionError(answer.message, code=403)
    if answer.pod is not None:
        mutated = answer.pod

        def apply(target: Any) -> None:  # kopf's RawBody: the object the JSONPatch is diffed to
            target["metadata"] = mutated.get("metadata", {})
            target["spec"] = mutated.get("spec", {})

        patch.fns.append(apply)


#: The handlers the webhook server calls itself, by path (:mod:`.direct`), rather than through
#: kopf's dispatch; the same functions kopf calls.
DIRECT_ROUTES: dict[str, Route] = {
    "validate-gpuworkload": Route(validate_gpuworkload),
    "mutate-gpuworkload": Route(mutate_gpuworkload, mutating=True),
    "mutate-pod": Route(mutate_pod, mutating=True),
}
