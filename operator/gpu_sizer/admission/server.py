"""The HTTPS server that receives AdmissionReviews for kopf, and its configuration from flags.

:class:`AdmissionServer` implements kopf's public webhook-server protocol
(``kopf.WebhookServerProtocol``: called with kopf's request function, it yields the client
config) and is set as ``settings.admission.server``; kopf still routes each review to the handler
named by the URL path and builds the AdmissionReview response. It is our own rather than
``kopf.WebhookServer`` (kopf 1.45) for three reasons that matter in production:

* request bodies: ``kopf.WebhookServer`` keeps aiohttp's default 1 MiB body limit, but an
  UPDATE review carries the object twice and the API server accepts objects up to about
  1.5 MiB (etcd's request limit), so a legal object could fail admission with HTTP 413;
  this server accepts :data:`MAX_BODY_BYTES`;
* malformed reviews: a structurally wrong AdmissionReview makes kopf raise inside its request
  function and aiohttp answer a bare HTTP 500; this server answers HTTP 400 naming each bad
  field, and so does an unknown webhook path (kopf would run no handler and *allow*);
* certificate renewal: kopf restarts its listener when the files change; this server loads the
  renewed chain into the live ``ssl.SSLContext`` (new handshakes use it, open connections
  finish), so a rotation drops no request.

Certificates come from ``--webhook-cert-dir`` (cert-manager mounts ``tls.crt``, ``tls.key`` and
``ca.crt`` there and renews them) or, without it, from :mod:`gpu_sizer.admission.certs`
(self-signed, in the ``--webhook-tls-secret`` Secret, caBundle patched into
``--webhook-config-name``).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import gc
import hashlib
import json
import logging
import os
import re
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, Literal

import aiohttp.web
import kopf
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpu_sizer.admission import direct
from gpu_sizer.admission.capacity import (
    AdmissionCapacity,
    BodyReceipt,
    Overloaded,
    request_timeout,
)
from gpu_sizer.admission.changes import JUDGED_OPERATIONS
from gpu_sizer.admission.handlers import (
    DIRECT_ROUTES,
    AdmissionConfig,
    DenialLogFilter,
    configure_admission,
)
from gpu_sizer.admission.namespaces import NamespaceLabels, kubernetes_fetcher
from gpu_sizer.admission.workers import PROCESSES
from gpu_sizer.api import GROUP, PLURAL, VERSION, problems_from
from gpu_sizer.catalog import DEFAULT_CATALOG, GPUClass, load_catalog_file
from gpu_sizer.policy.namespace import PolicyError, load_policy, parse_policy

__all__ = [
    "ADMISSION_REVIEW_VERSION",
    "BODY_TIMEOUT",
    "HANDLER_IDS",
    "HANDSHAKE_TIMEOUT",
    "IDLE_TIMEOUT",
    "INLINE_DECODE_BYTES",
    "MAX_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "PATH_RESOURCES",
    "SERVED_RESOURCES",
    "SWITCH_INTERVAL",
    "AdmissionServer",
    "BadReview",
    "ClientErrorLogFilter",
    "ReviewEnvelope",
    "configure",
    "decode_review",
    "read_body",
]

logger = logging.getLogger(__name__)

#: The kopf handler ids, which are also the URL paths the chart's webhook configurations use.
HANDLER_IDS: frozenset[str] = frozenset(
    {"validate-gpuworkload", "mutate-gpuworkload", "mutate-pod"}
)
#: Largest accepted request body, in bytes: two 1.5 MiB objects (UPDATE) plus the envelope,
#: with margin; the API server's own request limit is 3 MiB.
MAX_BODY_BYTES = 8 << 20
#: Seconds a client may take over its TLS handshake (asyncio's default is 60 s). The API server
#: completes one in milliseconds; 150 clients that connect and stall must not hold sockets.
HANDSHAKE_TIMEOUT = 10.0
#: Seconds a connection may stay open without sending a complete request header: after the
#: handshake, and between requests on a kept-alive connection. The API server sends each review
#: in one write; a client trickling its headers byte by byte (slowloris) is closed after this.
#: The API server's HTTP client reconnects transparently when an idle connection was closed.
IDLE_TIMEOUT = 10.0
#: Seconds a client may take to send the body once its headers are in, at most: the review's
#: own deadline (half its timeout, 5 s at the API server's 10 s) is usually shorter.
BODY_TIMEOUT = 10.0
#: Bodies up to this size, in bytes, are decoded on the event loop: a typical review (a few KiB)
#: decodes in tens of microseconds, less than handing it to a worker thread costs. Larger ones
#: (an UPDATE of a large object decodes for tens of milliseconds) go to the worker threads.
INLINE_DECODE_BYTES = 64 << 10
#: The AdmissionReview version accepted (and answered in): the one the chart registers.
ADMISSION_REVIEW_VERSION = "admission.k8s.io/v1"
#: The resources the handlers serve, as (group, version, plural).
SERVED_RESOURCES: frozenset[tuple[str, str, str]] = frozenset(
    {(GROUP, VERSION, PLURAL), ("", "v1", "pods")}
)
#: Which resources each handler path serves: a review of another resource there is a 404 (a
#: misconfigured webhook rule), never a handler run on the wrong kind of object.
PATH_RESOURCES: dict[str, frozenset[tuple[str, str, str]]] = {
    "validate-gpuworkload": frozenset({(GROUP, VERSION, PLURAL)}),
    "mutate-gpuworkload": frozenset({(GROUP, VERSION, PLURAL)}),
    "mutate-pod": frozenset({("", "v1", "pods")}),
}
#: Thread switch interval while serving, in seconds (see ``AdmissionServer(switch_interval=)``).
SWITCH_INTERVAL = 0.001
#: Deepest accepted JSON nesting of a request body, in levels (arrays and objects). A
#: GPUWorkload AdmissionReview nests about 8 levels (annotations and labels are flat string
#: maps; a spec's deepest field is 3 levels under ``spec``); 64 leaves room for any extra
#: structure the API server adds while refusing bodies built to exhaust the parser's recursion.
MAX_JSON_DEPTH = 64

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
#: Every byte but the four brackets (deleted by ``bytes.translate``), and each byte's step.
_NOT_BRACKET_BYTES = bytes(sorted(set(range(256)) - set(b"[]{}")))
_DEPTH_STEPS = tuple((c in b"[{") - (c in b"]}") for c in range(256))


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class _Resource(_Loose):
    group: str
    version: str
    resource: str


class _UserInfo(_Loose):
    username: str = ""


class _ObjectMeta(_Loose):
    """The metadata kopf and the handlers read (kopf keys its memos by ``uid``, logs by name and
    namespace; the policy is looked up by namespace): strings where Kubernetes has strings."""

    name: str | None = None
    generate_name: str | None = Field(None, alias="generateName")
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = Field(None, alias="resourceVersion")
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class _Object(_Loose):
    metadata: _ObjectMeta = Field(default_factory=_ObjectMeta)


class _RequestPayload(_Loose):
    uid: str = Field(min_length=1)
    resource: _Resource
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    user_info: _UserInfo = Field(alias="userInfo")
    object: _Object | None = None
    old_object: _Object | None = Field(None, alias="oldObject")


class ReviewEnvelope(_Loose):
    """The parts of an ``admission.k8s.io/v1`` AdmissionReview request that kopf relies on.

    ``apiVersion`` and ``kind`` are checked by :func:`envelope_problems` itself, which names
    the value sent and the one expected (pydantic would say "Input should be ...")."""

    api_version: object = Field(None, alias="apiVersion")
    kind: object = None
    request: _RequestPayload


def _identity_problems(data: dict[str, Any]) -> list[str]:
    """``apiVersion`` and ``kind`` lines: the value sent, and what this server accepts.

    Only ``admission.k8s.io/v1`` is accepted. The chart registers ``admissionReviewVersions:
    [v1]``, and the API server sends the first version of that list it speaks, so it never sends
    v1beta1 here (v1 has been served since Kubernetes 1.16; the chart's floor is 1.28). A
    v1beta1 review means a configuration made by hand that lists it: a 400 saying so is what
    its author needs to see, rather than answers in a version no test of this server covers.
    """
    problems = []
    for field, expected in (("apiVersion", ADMISSION_REVIEW_VERSION), ("kind", "AdmissionReview")):
        value = data.get(field)
        if value is None:
            problems.append(f"{field}: required field is missing; expected {expected!r}")
        elif value != expected:
            problems.append(f"{field}: {value!r} {_IDENTITY_MISMATCH[field].format(expected)}")
    return problems


_IDENTITY_MISMATCH = {
    "apiVersion": (
        "is not accepted; this webhook accepts {!r} only (list v1 in the webhook "
        "configuration's admissionReviewVersions, as the chart does)"
    ),
    "kind": "is not an AdmissionReview; expected kind {!r}",
}


def envelope_problems(data: Any) -> list[str]:
    """``field: message`` lines for everything wrong with an AdmissionReview; empty if sound."""
    if not isinstance(data, dict):
        return ["(body): must be a JSON object (an AdmissionReview)"]
    problems = _identity_problems(data)
    try:
        review = ReviewEnvelope.model_validate(data)
    except ValidationError as exc:
        return problems + [str(p) for p in problems_from(exc)]
    if problems:
        return problems
    request = review.request
    if request.operation in JUDGED_OPERATIONS and request.object is None:
        return [
            f"request.object: required for a {request.operation} review, which must carry the "
            "object to judge"
        ]
    if request.object is None and request.old_object is None:
        return ["request.object: required field is missing (and so is request.oldObject)"]
    return []


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON ``text`` nests arrays/objects deeper than ``limit`` levels.

    Run before :func:`json.loads`, whose decoder recurses once per level and fails with a
    ``RecursionError`` near the interpreter's recursion limit. String literals are removed first
    (brackets inside strings are not nesting), then the running depth over the remaining
    brackets is computed with C-level iteration (``bytes.translate`` keeps the brackets,
    ``accumulate`` sums their steps). Removing the rest with a regular expression instead cost
    0.6 s for 7 MiB of ``{}``, one match per comma; this way 0.19 s. Malformed text is left to
    the parser to report.

    Nesting ``limit + 1`` levels takes at least ``limit + 1`` opening brackets, so text with
    fewer (inside strings or not) is answered by two ``str.count`` passes: a GPUWorkload review
    has some 20-40, and the full walk above cost more than decoding the JSON.
    """
    if text.count("{") + text.count("[") <= limit:
        return False
    outside = _JSON_STRING.sub("", text).encode("utf-8", "surrogatepass")
    brackets = outside.translate(None, _NOT_BRACKET_BYTES)
    return max(accumulate(map(_DEPTH_STEPS.__getitem__, brackets)), default=0) > limit


class _CollectorPause:
    """Holds the cyclic garbage collector off while JSON is decoded, in any thread.

    The decoder allocates a container per array and object, and the collector runs every 700
    of them, each time traversing the young ones again; a decoded document holds no reference
    cycles, so those runs free nothing. For a 7 MiB body of empty arrays they were 1.5 of the
    1.6 s the decoder held the interpreter lock, the event loop waiting (docs/benchmarks.md).
    Decodes overlap in the worker threads: the first to start pauses the collector, the last to
    finish resumes it, and only if it ran before (a process that turned it off keeps it off).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._holders += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0 and self._resume:
                gc.enable()


_COLLECTOR_PAUSE = _CollectorPause()


class BadReview(ValueError):
    """A request that is not an AdmissionReview this server can answer: ``status`` (400, 404)
    and ``text``, the plain-text answer."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _parse(text: str) -> Any:
    """``json.loads(text)``, or the 400 naming what is wrong with it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadReview(400, f"malformed AdmissionReview: body is not JSON ({exc})") from None
    except ValueError:
        # The one other ValueError of the decoder: an integer longer than the interpreter
        # converts (sys.get_int_max_str_digits, 4300 by default). The text is JSON; its
        # advice to raise that limit is for the server's author, not the client.
        raise BadReview(
            400,
            "malformed AdmissionReview: the body is JSON, but a number in it is too long: more "
            f"than {sys.get_int_max_str_digits()} digits, far beyond any field's range",
        ) from None


def decode_review(
    raw: bytes,
    charset: str | None = None,
    resources: Collection[tuple[str, str, str]] = SERVED_RESOURCES,
) -> Any:
    """The AdmissionReview in a request body, checked as far as kopf and the handlers rely on.

    CPU work proportional to the body (megabytes for an UPDATE of a large object): the server
    runs it in a worker thread (:class:`gpu_sizer.admission.capacity.AdmissionCapacity`).

    :raises BadReview: 400 for a body that is not UTF-8, not JSON, nested too deep or not a
        sound review (one line per problem); 404 for a review of a resource the handlers do not
        serve.
    """
    try:
        text = raw.decode(charset or "utf-8")
    except (UnicodeDecodeError, LookupError) as exc:
        raise BadReview(400, f"malformed AdmissionReview: body is not UTF-8 ({exc})") from None
    if json_depth_exceeds(text):
        raise BadReview(
            400, f"malformed AdmissionReview: JSON nested deeper than {MAX_JSON_DEPTH} levels"
        )
    with _COLLECTOR_PAUSE:  # the envelope's models too: a collection there frees nothing
        data = _parse(text)
        problems = envelope_problems(data)
    if problems:
        raise BadReview(400, "malformed AdmissionReview:\n" + "\n".join(problems))
    resource = data["request"]["resource"]
    key = (resource["group"], resource["version"], resource["resource"])
    # A pod created by a controller (ReplicaSet, Job) arrives without metadata.namespace; the
    # request names it, and the handlers look the policy and the GPUWorkload up by it.
    obj, ns = data["request"].get("object"), data["request"].get("namespace")
    if isinstance(obj, dict) and isinstance(ns, str) and ns:
        meta = obj.setdefault("metadata", {})
        if isinstance(meta, dict) and not meta.get("namespace"):
            meta["namespace"] = ns
    if key not in resources:
        served = ", ".join(f"{p}.{g}/{v}" for g, v, p in sorted(resources))
        logger.warning(
            "Admission request %s is for %s, which this webhook does not serve (%s): "
            "check the webhook configuration's rules",
            data["request"]["uid"],
            "/".join(key),
            served,
        )
        raise BadReview(404, f"no admission handler for resource {'/'.join(key)}; served: {served}")
    return data


async def read_body(
    request: aiohttp.web.Request, limit: int, receipt: BodyReceipt | None = None
) -> bytes:
    """The request body, read as aiohttp's ``BaseRequest.read`` reads it, without keeping it.

    ``read`` keeps the bytes on the request (``_read_bytes``, aiohttp 3.14), and the request
    outlives its answer while the API server keeps the connection alive, so every connection
    that once sent a large review held its body: after 24 reviews of 8 MiB on 24 kept-alive
    connections a bare aiohttp server held 246 MiB, read this way 69 MiB (docs/benchmarks.md).
    ``read`` also raises the connection's read buffer to the body limit; this leaves it at
    aiohttp's 256 KiB chunks. Each chunk is taken on ``receipt`` as it arrives, so the bytes
    of all bodies not yet in room stay bounded however slowly they come.

    :raises aiohttp.web.HTTPRequestEntityTooLarge: more than ``limit`` bytes.
    :raises aiohttp.web.RequestPayloadError: the body is malformed (a bad chunked encoding).
    :raises Overloaded: 429 (``BodyBytes``) from ``receipt``.
    """
    body = bytearray()
    while chunk := await request.content.readany():
        if receipt is not None:
            receipt.take(len(chunk))
        body.extend(chunk)
        if len(body) > limit:
            raise aiohttp.web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(body))
    return bytes(body)


def _digest(paths: Sequence[Path]) -> str:
    hasher = hashlib.sha256()
    for path in paths:
        hasher.update(path.read_bytes())
    return hasher.hexdigest()


def _text(status: int, text: str, **headers: str) -> aiohttp.web.Response:
    return aiohttp.web.Response(
        status=status, text=text + "\n", content_type="text/plain", headers=headers
    )


class ClientErrorLogFilter(logging.Filter):
    """One line, no traceback, for requests that are malformed at the HTTP level.

    aiohttp answers a request it cannot parse (bad headers, an unsupported or corrupt
    ``Content-Encoding``) with HTTP 400 itself, and logs the parser's exception with its
    traceback at ERROR on ``aiohttp.server``. That is the client's fault, not the server's:
    anyone who can reach the port could fill the log with tracebacks. Installed on that logger,
    this keeps the line (at INFO) and drops the traceback; other errors keep theirs.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (HttpProcessingError, aiohttp.web.RequestPayloadError)):
            record.msg = f"{record.getMessage()}: {_one_line(exc)}"
            record.args = ()
            record.exc_info = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class _TLSSite(aiohttp.web.BaseSite):
    """A TCP listener like ``aiohttp.web.TCPSite`` that also bounds the TLS handshake.

    asyncio waits 60 s for a client to finish its handshake and aiohttp's site does not expose
    the setting, so a client that connects and sends nothing would hold a socket that long.
    """

    __slots__ = ("_handshake_timeout", "_host", "_port")

    def __init__(
        self,
        runner: aiohttp.web.BaseRunner,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext,
        handshake_timeout: float,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._host = host
        self._port = port
        self._handshake_timeout = handshake_timeout

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=self._handshake_timeout,
        )


class AdmissionServer:
    """An HTTPS endpoint for kopf's admission handlers (``kopf.WebhookServerProtocol``).

    :param addr: listen address (``--webhook-listen``; ``0.0.0.0`` in a pod).
    :param port: listen port (``--webhook-port``, 9443); 0 picks a free port (tests).
    :param certfile: serving certificate chain, PEM; :param pkeyfile: its key, PEM.
    :param cafile: CA bundle reported in the client config (informational: the chart's
        configurations are patched by :mod:`.certs` or by cert-manager's CA injector).
    :param paths: webhook ids served; any other path is a 404.
    :param resources: (group, version, plural) the handlers serve; a review for another resource
        is a 404 (a webhook configuration that sends what this server does not handle).
    :param handshake_timeout: seconds a client has to complete the TLS handshake.
    :param idle_timeout: seconds a connection may stay open without a complete request header,
        from the handshake or from the previous answer (aiohttp's keep-alive timer).
    :param body_timeout: seconds a client has to send the request body once its headers are in,
        at most (the review's deadline, ``queue_share`` of its timeout, when that is shorter).
    :param capacity: bounds on concurrent work and the workers it runs in (started before the
        server listens, stopped when it stops), shared with
        the handlers (:func:`configure` passes the one it gives them); a new one by default.
    :param routes: paths whose kopf handler the server calls itself (:mod:`.direct`: the same
        handler and answer, without kopf's per-request machinery); every other path goes
        through the function kopf passes in. None by default; :func:`configure` passes
        gpu-sizer's (:data:`gpu_sizer.admission.handlers.DIRECT_ROUTES`).
    :param freeze_heap: once listening, collect garbage and move every object alive then (the
        modules, the API models' validators, the catalog, kopf's registry: some 150,000
        objects) out of the cyclic garbage collector's reach (:func:`gc.freeze`). A full
        collection otherwise traverses all of them: 200-400 ms pauses under load, every
        review in flight waiting (docs/benchmarks.md). Objects made later are collected as
        usual; only reference cycles among the frozen ones would never be freed. Set by
        :func:`configure` for the operator's process; undone (:func:`gc.unfreeze`) when the
        server stops.
    :param switch_interval: seconds the interpreter lets a thread run before handing the lock
        to another that waits (:func:`sys.setswitchinterval`, default 5 ms) while the server
        listens, ``None`` to leave it. A review's verdict computing in a worker thread holds
        the lock, and the event loop, which gives it up at every socket call, then waits up
        to a whole interval each time it wants it back: with two threads busy, a timer of
        the loop ran 25 ms late (median) at 5 ms and 10 ms late at 1 ms (docs/benchmarks.md).
        :func:`configure` sets :data:`SWITCH_INTERVAL`.
    :param file_check_interval: seconds between checks of the certificate files for renewal.
    :param refresh: blocking callable run every ``refresh_interval`` seconds in a worker thread
        (self-signed mode: renew the Secret, rewrite the files, patch caBundles).
    """

    def __init__(
        self,
        *,
        addr: str,
        port: int,
        certfile: Path,
        pkeyfile: Path,
        cafile: Path | None = None,
        paths: Collection[str] = HANDLER_IDS,
        resources: Collection[tuple[str, str, str]] = SERVED_RESOURCES,
        max_body_bytes: int = MAX_BODY_BYTES,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
        body_timeout: float = BODY_TIMEOUT,
        capacity: AdmissionCapacity | None = None,
        routes: Mapping[str, direct.Route] | None = None,
        freeze_heap: bool = False,
        switch_interval: float | None = None,
        file_check_interval: float = 60.0,
        refresh: Callable[[], object] | None = None,
        refresh_interval: float = 3600.0,
    ) -> None:
        self.addr = addr
        self.port = port
        self.certfile = certfile
        self.pkeyfile = pkeyfile
        self.cafile = cafile
        self.paths = frozenset(paths)
        self.resources = frozenset(resources)
        self.max_body_bytes = max_body_bytes
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        self.body_timeout = body_timeout
        self.capacity = AdmissionCapacity() if capacity is None else capacity
        self.routes = dict(routes or {})
        self.freeze_heap = freeze_heap
        self.switch_interval = switch_interval
        self.file_check_interval = file_check_interval
        self.refresh = refresh
        self.refresh_interval = refresh_interval
        #: The bound (address, port) once listening; useful when ``port`` is 0.
        self.bound: tuple[str, int] | None = None

    def _files(self) -> list[Path]:
        return [p for p in (self.certfile, self.pkeyfile, self.cafile) if p is not None]

    def _load(self, context: ssl.SSLContext) -> None:
        context.load_cert_chain(self.certfile, self.pkeyfile)

    async def _handle(
        self, fn: kopf.WebhookFn, request: aiohttp.web.Request
    ) -> aiohttp.web.Response:
        """One review, in this order, and why:

        1. shed what needs no body (the loop running behind, the queue full:
           :meth:`~AdmissionCapacity.shed_unread`), the cheapest answer there is;
        2. receive the body holding no room, only its bytes
           (:meth:`~AdmissionCapacity.receive`), within the review's deadline: the API
           server sends a body in one write, and a sender that trickles one must not hold the
           room the API server's reviews need (200 such senders held all of it for 10 s);
        3. take room for the body as received, sharing that deadline, and decode and judge
           it there: the units bound what decoded bodies hold.
        """
        webhook = request.match_info["id"]
        if webhook not in self.paths:
            return _text(
                404,
                f"no admission webhook at /{webhook}; served: "
                + ", ".join(f"/{p}" for p in sorted(self.paths)),
            )
        size = request.content_length
        if size is not None and size > self.max_body_bytes:
            return _text(413, f"request body exceeds {self.max_body_bytes} bytes")
        timeout = request_timeout(request.query.get("timeout"))
        started = self.capacity.now()
        try:
            self.capacity.shed_unread()
            async with self.capacity.receive() as receipt:
                raw = await self._receive(request, receipt, timeout)
                if isinstance(raw, aiohttp.web.Response):
                    return raw
                async with self.capacity.slot(timeout, len(raw), started=started):
                    receipt.release()  # the room's units account for the body from here
                    data = await self._decode(webhook, raw, request.charset)
                    del raw
                    if isinstance(data, aiohttp.web.Response):
                        return data
                    return await self._answer(fn, webhook, request, data)
        except Overloaded as exc:
            return _text(exc.status, str(exc), **{"Retry-After": "1"})

    async def _receive(
        self, request: aiohttp.web.Request, receipt: BodyReceipt, timeout: float
    ) -> bytes | aiohttp.web.Response:
        """The body, or the answer for one that came too slowly, too large or unreadable."""
        deadline = min(self.body_timeout, timeout * self.capacity.queue_share)
        try:
            if request.content.is_eof():  # received whole (the usual case): nothing to wait for
                return await read_body(request, self.max_body_bytes, receipt)
            async with asyncio.timeout(deadline):
                return await read_body(request, self.max_body_bytes, receipt)
        except TimeoutError:
            # A client trickling its body holds a connection and its bytes: cut it off.
            return _text(408, f"request body not received within {deadline:g} s")
        except aiohttp.web.HTTPRequestEntityTooLarge:
            return _text(413, f"request body exceeds {self.max_body_bytes} bytes")
        except aiohttp.web.RequestPayloadError as exc:  # e.g. Content-Encoding gzip, not gzip
            return _text(400, f"malformed AdmissionReview: body unreadable ({_one_line(exc)})")

    async def _decode(self, webhook: str, raw: bytes, charset: str | None) -> Any:
        """The review in ``raw`` (:func:`decode_review`), or the answer for a bad one."""
        served = self.resources & PATH_RESOURCES.get(webhook, self.resources)
        try:
            if len(raw) <= INLINE_DECODE_BYTES:
                return decode_review(raw, charset, served)
            return await self.capacity.run_here(decode_review, raw, charset, served)
        except BadReview as exc:
            return _text(exc.status, exc.text)

    async def _answer(
        self, fn: kopf.WebhookFn, webhook: str, request: aiohttp.web.Request, data: Any
    ) -> aiohttp.web.Response:
        route = self.routes.get(webhook)
        try:
            if route is not None:
                response = await direct.serve(route, data, webhook=webhook)
            else:
                transport = request.transport
                peer = transport.get_extra_info("peercert") if transport else None
                response = await fn(
                    data, webhook=webhook, headers=dict(request.headers), sslpeer=peer
                )
        except Overloaded:  # shed from inside the handler: answered 429 by _handle
            raise
        except Exception as exc:  # a gpu-sizer or kopf bug: the request passed every check
            logger.exception("Admission request %s failed", data["request"]["uid"])
            return _text(500, f"admission request failed: {type(exc).__name__}: {exc}")
        return aiohttp.web.json_response(response)

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._load(context)
        switch_before = sys.getswitchinterval()
        app = aiohttp.web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/{id}", functools.partial(self._handle, fn))
        runner = aiohttp.web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=self.idle_timeout,
            # No lingering reads of a body the answer did not need (an oversized or corrupt
            # one): close the connection instead of draining it for up to 10 s.
            lingering_time=0,
        )
        await runner.setup()
        try:
            # The verdicts' worker processes before the first review (their fork server imports
            # the memory model once, about half a second): no review waits for that.
            await asyncio.to_thread(self.capacity.start)
            site = _TLSSite(
                runner,
                self.addr,
                self.port,
                ssl_context=context,
                handshake_timeout=self.handshake_timeout,
            )
            await site.start()
            self.capacity.watch_lag()
            host, port = runner.addresses[0][:2]
            if self.freeze_heap:
                gc.collect()
                gc.freeze()
            if self.switch_interval is not None:
                sys.setswitchinterval(self.switch_interval)
            self.bound = (host, port)
            logger.info("Admission webhooks listening at https://%s:%d/", host, port)
            config = kopf.WebhookClientConfig(url=f"https://{host}:{port}")
            if self.cafile is not None and self.cafile.exists():
                config["caBundle"] = base64.b64encode(self.cafile.read_bytes()).decode()
            yield config
            await self._watch(context)
        finally:
            if self.bound is not None:
                if self.switch_interval is not None:
                    sys.setswitchinterval(switch_before)
                if self.freeze_heap:
                    gc.unfreeze()
            await runner.cleanup()
            self.capacity.stop()

    async def _watch(self, context: ssl.SSLContext) -> None:
        """Run the refresh when due and reload the chain whenever the files change."""
        digest = _digest(self._files())
        next_refresh = time.monotonic() + self.refresh_interval
        while True:
            await asyncio.sleep(self.file_check_interval)
            if self.refresh is not None and time.monotonic() >= next_refresh:
                next_refresh = time.monotonic() + self.refresh_interval
                try:
                    await asyncio.to_thread(self.refresh)
                except Exception:  # keep serving on the current chain; retry next interval
                    logger.exception("Webhook certificate refresh failed; retrying later")
            try:
                current = _digest(self._files())
            except OSError as exc:  # mid-rotation by the kubelet: try again next tick
                logger.warning("Webhook certificate files unreadable: %s", exc)
                continue
            if current != digest:
                try:
                    self._load(context)
                except (OSError, ssl.SSLError) as exc:
                    logger.warning("Renewed webhook certificate not loaded yet: %s", exc)
                    continue
                digest = current
                logger.info("Webhook serving certificate reloaded from %s", self.certfile)


def _opt(options: Any, name: str, default: Any = None) -> Any:
    value = getattr(options, name, None)
    return default if value is None else value


def configure(
    settings: kopf.OperatorSettings,
    options: Any,
    *,
    catalog: Sequence[GPUClass] | None = None,
) -> AdmissionServer | None:
    """Set ``settings.admission.server`` from the ``gpu-sizer operator`` options.

    ``options`` is the parsed argparse namespace (attributes ``no_webhook``, ``webhook_port``,
    ``webhook_listen``, ``webhook_workers``, ``webhook_cert_dir``, ``webhook_tls_secret``,
    ``webhook_config_name``, ``webhook_service``, ``webhook_cert_san``, ``policy``,
    ``default_headroom``, ``catalog``).
    ``catalog`` overrides the GPU catalog (else ``--catalog`` is loaded, else the built-in
    catalog is used). Self-signed mode reads the operator's namespace from ``POD_NAMESPACE``
    and provisions the certificate before returning (blocking API calls: call it from the
    startup handler, once).
    kopf's managed webhook configuration is switched off: the chart owns those objects.

    Returns the server, or ``None`` with ``--no-webhook``.

    :raises PolicyError: the policy file is invalid or names classes the catalog lacks.
    :raises gpu_sizer.catalog.InvalidCatalog: the ``--catalog`` file is invalid.
    :raises ValueError: self-signed mode without its flags or ``POD_NAMESPACE``.
    """
    settings.admission.managed = None
    if _opt(options, "no_webhook", False):
        settings.admission.server = None
        return None
    catalog_file = _opt(options, "catalog")
    if catalog is None:
        catalog = load_catalog_file(catalog_file) if catalog_file else DEFAULT_CATALOG
    catalog = tuple(catalog)
    policy_file = _opt(options, "policy")
    default_headroom = float(_opt(options, "default_headroom", 0.10))
    policy = (
        load_policy(policy_file, default_headroom=default_headroom)
        if policy_file
        else parse_policy(None, default_headroom=default_headroom)
    )
    unknown = policy.unknown_classes(catalog)
    if unknown:
        raise PolicyError(str(policy_file), unknown)
    for name, log_filter in (
        ("kopf.objects", DenialLogFilter),
        ("aiohttp.server", ClientErrorLogFilter),
    ):
        target = logging.getLogger(name)
        if not any(isinstance(f, log_filter) for f in target.filters):
            target.addFilter(log_filter())
    capacity = AdmissionCapacity(processes=int(_opt(options, "webhook_workers", PROCESSES)))
    from gpu_sizer.kube.client import import_client

    import_client()
    configure_admission(
        AdmissionConfig(
            policy=policy,
            catalog=catalog,
            namespaces=NamespaceLabels(kubernetes_fetcher()),
            capacity=capacity,
        )
    )

    refresh: Callable[[], object] | None = None
    cert_dir = _opt(options, "webhook_cert_dir")
    if cert_dir:
        directory = Path(cert_dir)
        cafile: Path | None = directory / "ca.crt"
    else:
        from gpu_sizer.admission import certs
        from gpu_sizer.kube.client import api_client

        namespace = os.environ.get("POD_NAMESPACE")
        secret = _opt(options, "webhook_tls_secret")
        service = _opt(options, "webhook_service")
        missing = [
            what
            for what, value in (
                ("--webhook-tls-secret", secret),
                ("--webhook-service", service),
                ("env POD_NAMESPACE", namespace),
            )
            if not value
        ]
        if missing or namespace is None:
            raise ValueError(
                "self-signed webhook certificates need "
                + ", ".join(missing)
                + " (or pass --webhook-cert-dir for cert-manager, or --no-webhook)"
            )
        directory = Path(tempfile.mkdtemp(prefix="gpu-sizer-webhook-"))
        cafile = directory / "ca.crt"
        refresh = functools.partial(
            certs.ensure_bundle,
            api_client(),
            namespace=namespace,
            secret_name=secret,
            service=service,
            config_name=_opt(options, "webhook_config_name"),
            directory=directory,
            extra_names=tuple(_opt(options, "webhook_cert_san", ())),
            listen=_opt(options, "webhook_listen", "0.0.0.0"),
        )
        refresh()
    server = AdmissionServer(
        addr=_opt(options, "webhook_listen", "0.0.0.0"),
        port=int(_opt(options, "webhook_port", 9443)),
        certfile=directory / "tls.crt",
        pkeyfile=directory / "tls.key",
        cafile=cafile,
        capacity=capacity,
        routes=DIRECT_ROUTES,
        freeze_heap=True,
        switch_interval=SWITCH_INTERVAL,
        refresh=refresh,
    )
    settings.admission.server = server
    return server
