"""The namespace policy's measurement settings per namespace, from the Namespace's labels.

The policy file (:mod:`gpu_sizer.policy.namespace`) gives each namespace its measurement
settings by label selector: a cap on concurrent measurement Jobs, a Kueue LocalQueue, a daily
GPU-second budget, whether its measurements are shared. The labels are read at most every
:data:`NAMESPACE_LABELS_TTL` seconds; the decisions that follow within that time read the
settings from here without an API call.

This is not the webhook's label cache (:class:`gpu_sizer.admission.namespaces.NamespaceLabels`):
a webhook must answer within the API server's ``timeoutSeconds``, so that one bounds each read,
shares one read between concurrent reviews, and refuses when no labels were ever read; the
operator reads from its own decisions (one per workload at a time), caches the settings rather
than the labels, and falls back to the settings of a namespace without labels, since a
measurement setting is never a reason to stop deciding.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpu_sizer.controller import kube
from gpu_sizer.controller.events import Said
from gpu_sizer.controller.options import Options
from gpu_sizer.policy.namespace import (
    EffectivePolicy,
    MeasurementSharing,
    Policy,
    PolicyError,
    load_policy,
)

__all__ = ["NAMESPACE_LABELS_TTL", "PolicyCache"]

log = logging.getLogger("gpu_sizer.controller")

#: Seconds the labels of a namespace (for the namespace policy's measurement settings) are reused.
NAMESPACE_LABELS_TTL = 30.0


class PolicyCache:
    """Each namespace's effective policy, as last read.

    :param client: the API client once the operator is connected (None before).
    :param said: where a failed label read is said once per namespace.
    """

    def __init__(self, opts: Options, client: Callable[[], kube.Client | None], said: Said) -> None:
        self._opts = opts
        self._client = client
        self._said = said
        self._policy = _load_policy(opts)
        #: namespace -> (its effective policy, monotonic time read).
        self._known: dict[str, tuple[EffectivePolicy, float]] = {}

    async def read(self, namespace: str) -> EffectivePolicy | None:
        """The namespace policy's settings for ``namespace`` (None without a policy file),
        from its labels read at most every :data:`NAMESPACE_LABELS_TTL` seconds; when a read
        fails, the last settings known (else those of a namespace without labels) apply."""
        policy = self._policy
        if policy is None:
            return None
        known = self._known.get(namespace)
        now = time.monotonic()
        if known is not None and now - known[1] < NAMESPACE_LABELS_TTL:
            return known[0]
        labels: Mapping[str, str] = {}
        if policy.uses_labels:
            client = self._client()
            assert client is not None
            try:
                ns = await client.get(kube.object_path("", "v1", "namespaces", None, namespace))
                labels = _labels_of(ns)
                self._said.unsay((namespace, ""), "labels")
            except kube.ApiError as exc:
                if self._said.say((namespace, ""), "labels", str(exc)):
                    log.warning(
                        "namespace %s: labels unreadable (%s); its measurement policy is %s",
                        namespace,
                        exc,
                        "the last one known" if known else "that of a namespace without labels",
                    )
                if known is not None:
                    self._known[namespace] = (known[0], now)
                    return known[0]
        effective = policy.for_namespace(labels)
        self._known[namespace] = (effective, now)
        return effective

    def known(self, namespace: str) -> EffectivePolicy | None:
        """The settings last read for ``namespace`` (None: not read yet, or no policy)."""
        entry = self._known.get(namespace)
        return entry[0] if entry is not None else None

    def limit_of(self, namespace: str) -> int | None:
        """The namespace's cap on concurrent measurement Jobs (None: none known)."""
        known = self.known(namespace)
        return known.max_concurrent_measurements if known is not None else None

    def kueue_queue(self, namespace: str) -> str | None:
        """The Kueue LocalQueue the namespace's measurement Jobs go through (None: none)."""
        known = self.known(namespace)
        return known.local_queue if known is not None else None

    def gpu_seconds_limit(self, namespace: str) -> int | None:
        """The namespace's daily measurement GPU-second budget (None: none known)."""
        known = self.known(namespace)
        return known.measurement_gpu_seconds_per_day if known is not None else None

    def sharing(self, namespace: str) -> bool:
        """Whether the namespace takes part in shared measurement records (its policy read by
        :meth:`read` before; no policy: yes, when ``--measurement-sharing`` is on)."""
        if not self._opts.measurement_sharing:
            return False
        known = self.known(namespace)
        return known is None or known.measurement_sharing is MeasurementSharing.Enabled


def _load_policy(opts: Options) -> Policy | None:
    """The namespace policy file, for its measurement settings; None without one. An invalid
    file stops ``gpu-sizer operator`` before it starts (``options_from``), with or without the
    webhook; here (a file changed since) it only means no per-namespace measurement settings."""
    if not opts.policy_file:
        return None
    try:
        return load_policy(opts.policy_file, default_headroom=opts.default_headroom)
    except PolicyError as exc:
        log.error("namespace policy ignored for measurements: %s", exc)
        return None


def _labels_of(obj: Any) -> dict[str, str]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items()}
