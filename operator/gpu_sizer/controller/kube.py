"""The operator's own API writes, through kopf's authenticated aiohttp session.

kopf watches with aiohttp and keeps its credentials fresh (re-login on 401); the operator's
writes (status patches, Job creation and deletion, Events) use the same session instead of a
second, blocking client in worker threads: the official ``kubernetes`` client serialises the
request and deserialises every response into its models, which cost a fifth of the operator's
CPU when profiled over hundreds of workloads, and its thread pool bounds
concurrency. kopf has no public client API, so this module is the one place that reaches into
``kopf._cogs.clients``; everything else sees :class:`Client` and the exceptions below. kopf is
pinned to the 1.45 minor, and tests/controller/test_kopf_upstream.py fails when the functions
called here change.

Each call is one attempt. kopf's own retries are switched off (``backoffs=()``) because the
caller decides: a status patch that meets a conflict must be re-decided from fresh state, not
re-sent (see :mod:`gpu_sizer.controller.reconciler`).

Errors: :class:`NotFound` (404), :class:`Conflict` (409: already exists, or a stale
``resourceVersion`` / uid precondition), :class:`Unavailable` (5xx, 429, timeouts, connection
errors: retry later), :class:`ApiError` for the rest (4xx: the request itself is wrong).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from typing import Any

import aiohttp
import kopf
from kopf._cogs.clients import api as kopf_api  # no public client in kopf
from kopf._cogs.clients import errors as kopf_errors

from gpu_sizer.api.times import now_rfc3339
from gpu_sizer.measurement.backends import BackendError, JobExists, QuotaExceeded

__all__ = [
    "ApiError",
    "Client",
    "Conflict",
    "JobClient",
    "NotFound",
    "Unavailable",
    "collection_path",
    "object_path",
]

log = logging.getLogger("gpu_sizer.controller")


class _Quiet(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kopf logs a failed single attempt at ERROR ("escalating"); the caller decides what a
    failure means and says so itself, so kopf's own line goes to DEBUG."""

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self.debug(msg, *args, **kwargs)


_kopf_log = _Quiet(logging.getLogger("gpu_sizer.api"), {})


class ApiError(Exception):
    """An API request failed; ``status`` is the HTTP status (0 without a response)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status


class NotFound(ApiError):
    """404: the object (or its namespace) does not exist."""


class Conflict(ApiError):
    """409: the object already exists, or a precondition (resourceVersion, uid) failed."""


class Unavailable(ApiError):
    """The API server could not answer now (5xx, 429, timeout, connection): retry later."""


def collection_path(group: str, version: str, plural: str, namespace: str | None) -> str:
    """The REST path of a (namespaced) collection."""
    base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}"


def object_path(
    group: str, version: str, plural: str, namespace: str | None, name: str, sub: str = ""
) -> str:
    """The REST path of an object, or of its subresource ``sub``."""
    path = f"{collection_path(group, version, plural, namespace)}/{name}"
    return f"{path}/{sub}" if sub else path


def _message(exc: kopf_errors.APIError) -> str:
    return exc.message or str(exc) or type(exc).__name__


class Client:
    """One-attempt API calls on kopf's session (inside the running operator only: kopf's
    credentials vault lives in a context variable that the operator's tasks inherit)."""

    def __init__(self, settings: kopf.OperatorSettings, component: str = "gpu-sizer") -> None:
        self._settings = settings
        self._component = component
        self._instance = socket.gethostname()

    async def call(
        self,
        method: str,
        path: str,
        payload: Any = None,
        *,
        content_type: str | None = None,
    ) -> Any:
        """Send one request; the decoded JSON answer.

        :raises NotFound, Conflict, Unavailable, ApiError: as the module says.
        """
        headers = {"Content-Type": content_type} if content_type else None
        try:
            response = await kopf_api.request(
                method=method,
                url=path,
                payload=payload,
                headers=headers,
                settings=self._settings,
                backoffs=(),
                logger=_kopf_log,
            )
            async with response:
                return await response.json()
        except kopf_errors.APINotFoundError as exc:
            raise NotFound(404, _message(exc)) from exc
        except kopf_errors.APIConflictError as exc:
            raise Conflict(409, _message(exc)) from exc
        except (kopf_errors.APIServerError, kopf_errors.APITooManyRequestsError) as exc:
            raise Unavailable(exc.status, _message(exc)) from exc
        except kopf_errors.APIError as exc:
            raise ApiError(exc.status, _message(exc)) from exc
        except (aiohttp.ClientError, TimeoutError, kopf_errors.APISessionClosed) as exc:
            raise Unavailable(0, f"{method} {path}: {exc!r}") from exc

    async def get(self, path: str) -> Any:
        return await self.call("GET", path)

    async def create(self, path: str, body: Mapping[str, Any]) -> Any:
        return await self.call("POST", path, dict(body))

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> Any:
        return await self.call(
            "PATCH", path, dict(patch), content_type="application/merge-patch+json"
        )

    async def delete(
        self, path: str, *, uid: str | None = None, propagation: str = "Background"
    ) -> Any:
        """DELETE with ``propagationPolicy``; with ``uid``, only that incarnation of the object
        (``preconditions.uid``): a successor of the same name is never deleted by mistake."""
        options: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": propagation,
        }
        if uid:
            options["preconditions"] = {"uid": uid}
        return await self.call("DELETE", path, options)

    async def post_event(
        self,
        involved: Mapping[str, Any],
        *,
        type_: str,
        reason: str,
        message: str,
    ) -> None:
        """Post a core/v1 Event about ``involved`` (apiVersion, kind, name, namespace, uid)."""
        now = now_rfc3339()
        namespace = str(involved.get("namespace") or "default")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{involved.get('name') or 'gpu-sizer'}.",
                "namespace": namespace,
            },
            "involvedObject": dict(involved),
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.create(collection_path("", "v1", "events", namespace), body)


class JobClient:
    """The Kubernetes backend's Job calls (:class:`gpu_sizer.measurement.backends.JobApi`) on
    :class:`Client`, with the backend's errors."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def create_job(self, namespace: str, manifest: Mapping[str, Any]) -> Mapping[str, Any]:
        path = collection_path("batch", "v1", "jobs", namespace)
        try:
            created = await self._client.create(path, manifest)
        except Conflict as exc:
            raise JobExists(str(exc)) from exc
        except ApiError as exc:
            if exc.status == 403 and "exceeded quota" in str(exc):
                # The API server's ResourceQuota admission ("exceeded quota: NAME, requested:
                # ..., used: ..., limited: ..."): the Job waits for quota, it has not failed.
                raise QuotaExceeded(str(exc)) from exc
            raise BackendError(f"creating Job {manifest['metadata']['name']}: {exc}") from exc
        return created if isinstance(created, Mapping) else {}

    async def read_job(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            found = await self._client.get(object_path("batch", "v1", "jobs", namespace, name))
        except NotFound:
            return None
        except ApiError as exc:
            raise BackendError(f"reading Job {name}: {exc}") from exc
        return found if isinstance(found, Mapping) else None

    async def delete_job(self, namespace: str, name: str, uid: str) -> None:
        path = object_path("batch", "v1", "jobs", namespace, name)
        try:
            await self._client.delete(path, uid=uid or None)
        except (NotFound, Conflict):
            return  # gone already, or the name now belongs to a newer Job (uid precondition)
        except ApiError as exc:
            raise BackendError(f"deleting Job {name}: {exc}") from exc
