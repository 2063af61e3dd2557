"""kopf's admission dispatch for gpu-sizer's own handlers, without its per-request machinery.

For every review kopf 1.45 (``kopf/_core/engines/admission.py``, ``serve_admission_request``)
looks the resource up among its insights, recalls a memo for the object (and keeps one per
object uid for every UPDATE), builds a cause with a logger, a diff and a patch, selects the
handlers from its registry, runs them through the same state machine as its resource handlers
(``execute_handlers_once``: handler state, retry and timeout bookkeeping), deep-copies the body
to diff it against the patch even when the patch is empty, and builds the response
(``build_response``). Measured under load (docs/benchmarks.md) that was about a quarter of the
webhook's CPU per review, far more than the estimate itself.

A webhook path served here maps to one handler (the chart points each path at one handler id,
a :class:`Route`), so :func:`serve` selects it as kopf's registry would (no handler for a
subresource review, since gpu-sizer's handlers declare none; none of a mutating path for a
DELETE) and calls it with the arguments gpu-sizer's handlers take (``body``, ``patch``,
``warnings``, ``operation``, ``subresource``, ``old``, ``new``). The bodies are read-only views
of the objects as decoded (:class:`types.MappingProxyType`): what the handlers read of kopf's
:class:`kopf.Body` is its mapping interface, and building a ``Body`` (a dozen nested views of
metadata, labels, annotations, spec and status, for the object and again for ``new``) cost
more than the rest of a review answered from memory. The patch is kopf's :class:`kopf.Patch`,
so the JSONPatch is kopf's own. It answers exactly as kopf would: the same
response document (``allowed``, ``warnings``, the JSONPatch, ``status`` from an
:class:`kopf.AdmissionError` or 500 for any other exception) and the same log records on the
``kopf.objects`` logger (``Webhook '<id>' succeeded.``, ``... failed permanently: ...``, which
:class:`gpu_sizer.admission.handlers.DenialLogFilter` turns into the INFO denial line). The
kopf handlers stay registered, so any other server or tunnel kopf runs still reaches them.
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import kopf

from gpu_sizer.admission.capacity import Overloaded

__all__ = ["DirectHandler", "Route", "serve"]

#: The logger kopf's object loggers write to; records carry the object reference it formats.
_objects = logging.getLogger("kopf.objects")

#: An async kopf admission handler (as ``@kopf.on.validate`` / ``@kopf.on.mutate`` return it).
DirectHandler = Callable[..., Any]


@dataclass(frozen=True)
class Route:
    """The kopf handler behind a webhook path, and whether it is a mutating one."""

    handler: DirectHandler
    mutating: bool = False


def _log(level: int, body: Mapping[str, Any], message: str, *, exc_info: bool = False) -> None:
    """A record as kopf's ``LocalObjectLogger`` writes it (prefixed ``[namespace/name]`` by
    kopf's formatter, never posted as an Event)."""
    if not _objects.isEnabledFor(level):
        return
    meta = body.get("metadata") or {}
    ref = {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "namespace": meta.get("namespace"),
    }
    _objects.log(level, message, exc_info=exc_info, extra={"k8s_skip": True, "k8s_ref": ref})


async def serve(route: Route, request: Mapping[str, Any], *, webhook: str) -> Any:
    """Run ``route``'s handler (the kopf handler with id ``webhook``) on a checked
    AdmissionReview (:func:`gpu_sizer.admission.server.decode_review`) and return kopf's
    response to it."""
    payload = request["request"]
    new_raw, old_raw = payload.get("object"), payload.get("oldObject")
    raw = new_raw if new_raw is not None else old_raw
    body = MappingProxyType(raw)
    # gpu-sizer's validating handler writes no patch: none to build (and to diff) for it.
    patch = kopf.Patch(body=kopf.Body(raw)) if route.mutating else None
    warnings: list[str] = []
    name = f"Webhook {webhook!r}"
    error: BaseException | None = None
    # kopf's WebhooksRegistry.iter_handlers and registries.match: a handler declared without a
    # subresource serves none; mutating handlers are not run for a deletion.
    selected = not payload.get("subResource") and not (
        route.mutating and payload.get("operation") == "DELETE"
    )
    try:
        if selected:
            _log(logging.DEBUG, body, f"{name} is invoked.")
            result = route.handler(
                body=body,
                patch=patch,
                warnings=warnings,
                operation=payload.get("operation"),
                subresource=payload.get("subResource"),
                old=MappingProxyType(old_raw) if old_raw is not None else None,
                new=MappingProxyType(new_raw) if new_raw is not None else None,
            )
            if inspect.isawaitable(result):
                await result
    except Overloaded:  # shed: the server answers 429, as it does before any handler runs
        raise
    except kopf.PermanentError as exc:  # kopf.AdmissionError: the denial
        error = exc
        _log(logging.ERROR, body, f"{name} failed permanently: {str(exc) or repr(exc)}")
    except Exception as exc:  # a bug: kopf's errors mode for webhooks is PERMANENT
        error = exc
        _log(
            logging.ERROR,
            body,
            f"{name} failed with an exception and will stop now: {str(exc) or repr(exc)}",
            exc_info=True,
        )
    else:
        if selected:
            _log(logging.INFO, body, f"{name} succeeded.")
    # kopf's build_response, for one handler's outcome.
    response: dict[str, Any] = {
        "apiVersion": request.get("apiVersion", "admission.k8s.io/v1"),
        "kind": request.get("kind", "AdmissionReview"),
        "response": {"uid": payload.get("uid", ""), "allowed": error is None},
    }
    answer = response["response"]
    if warnings:
        answer["warnings"] = [str(w) for w in warnings]
    # An empty patch diffs to nothing: skip kopf's deep copy of the body to find that out.
    jsonpatch = patch.as_json_patch() if patch else []  # (kopf.Patch is falsy when empty)
    if jsonpatch:
        answer["patch"] = base64.b64encode(json.dumps(jsonpatch).encode("utf-8")).decode("ascii")
        answer["patchType"] = "JSONPatch"
    if error is not None:
        code = error.code if isinstance(error, kopf.AdmissionError) else None
        answer["status"] = {"message": str(error) or repr(error), "code": code or 500}
    return response
