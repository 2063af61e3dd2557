"""The floor of the webhook benchmark: what any Python admission webhook pays per review.

A bare aiohttp HTTPS server with the TLS set-up of gpu-sizer's
:class:`gpu_sizer.admission.server.AdmissionServer` (a ``Purpose.CLIENT_AUTH`` default context
over the same certificate chain, keep-alive 10 s, no access log): it reads the body, decodes
its JSON and answers an allowed AdmissionReview with the request's ``uid`` (which the API server
requires of any webhook), nothing else. ``hack/bench-webhook.py`` runs it beside gpu-sizer and
drives both with the same open-loop client, alternating, so that gpu-sizer's figures can be read
as ratios to it on a machine whose absolute speed changes by the minute.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
from pathlib import Path

import aiohttp.web

from gpu_sizer.admission import certs


async def _answer(request: aiohttp.web.Request) -> aiohttp.web.Response:
    review = json.loads(await request.read())
    return aiohttp.web.json_response(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": review["request"]["uid"], "allowed": True},
        }
    )


async def serve_floor(workdir: Path) -> None:
    """Listen on 127.0.0.1 (a free port); print ``READY <port>``; serve until killed."""
    certs.write_files(certs.generate_bundle(["localhost"], dt.datetime.now(dt.UTC)), workdir)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(workdir / "tls.crt", workdir / "tls.key")
    app = aiohttp.web.Application(client_max_size=8 << 20)
    app.router.add_post("/{id}", _answer)
    runner = aiohttp.web.AppRunner(
        app, handle_signals=False, access_log=None, keepalive_timeout=10.0, lingering_time=0
    )
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    print(f"READY {port}", flush=True)
    await asyncio.Event().wait()
