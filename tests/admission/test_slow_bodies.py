"""Request bodies that arrive slowly, or are held, must not take the room real reviews need.

A tester's finding: room (the working and waiting slots of ``AdmissionCapacity``) was taken
before the body was read, so 200 connections trickling their bodies at 1 byte/s held all
32 + 128 slots for 10 s each and the API server's reviews were answered 429. The API server
sends a review's body in one write: the body is read first, under its own bounds (the time the
review has, and the bytes all bodies not yet in room may hold), and room is taken after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from gpu_sizer.admission.capacity import AdmissionCapacity
from gpu_sizer.admission.server import AdmissionServer

from .conftest import admission_review, workload
from .test_webhook import inference

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Answering:
    """A kopf webhook function that allows every review at once."""

    async def __call__(self, request: Any, **_: Any) -> Any:
        return {"response": {"uid": request["request"]["uid"], "allowed": True}}


@pytest_asyncio.fixture(loop_scope="module")
async def server(cert_dir: Path) -> AsyncIterator[AdmissionServer]:
    """Room for 2 reviews and 3 waiting, at most 256 KiB of bodies not yet in room."""
    server = AdmissionServer(
        addr="127.0.0.1",
        port=0,
        certfile=cert_dir / "tls.crt",
        pkeyfile=cert_dir / "tls.key",
        capacity=AdmissionCapacity(
            units=2,
            max_queued=3,
            unit_bytes=1 << 20,
            body_bytes=256 << 10,
            processes=0,
            budget=3600.0,  # about bodies, not the workers' pace
            lag_budget=3600.0,  # the test's clients share the loop: no LoopLag here
        ),
    )
    serving = server(Answering())  # type: ignore[arg-type]
    await serving.__anext__()
    try:
        yield server
    finally:
        await serving.aclose()


async def wait_for(condition: Any, what: str) -> None:
    """Wait until ``condition()`` holds (a generous deadline, never a fixed sleep)."""
    try:
        async with asyncio.timeout(60):
            while not condition():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"not reached within 60 s: {what}") from None


@contextlib.asynccontextmanager
async def stalled(
    port: int, context: ssl.SSLContext, sent: bytes, length: int, query: str = ""
) -> AsyncIterator[asyncio.StreamReader]:
    """A connection that sent its headers and ``sent`` of a ``length``-byte body, then stalls."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="localhost"
    )
    try:
        writer.write(
            f"POST /validate-gpuworkload{query} HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n".encode()
            + sent
        )
        await writer.drain()
        yield reader
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def post(
    server: AdmissionServer, context: ssl.SSLContext, body: bytes
) -> tuple[int, str, str | None]:
    assert server.bound is not None
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"https://127.0.0.1:{server.bound[1]}/validate-gpuworkload",
            data=body,
            headers={"Content-Type": "application/json"},
            ssl=context,
            server_hostname="localhost",
        ) as resp,
    ):
        return resp.status, await resp.text(), resp.headers.get("Retry-After")


def review(pad: int = 0) -> bytes:
    doc = workload(inference())
    if pad:
        doc["metadata"]["annotations"] = {"example.com/pad": "x" * pad}
    return json.dumps(admission_review(doc)).encode()


async def test_bodies_being_received_hold_no_room(server: AdmissionServer, cert_dir: Path) -> None:
    assert server.bound is not None
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    capacity = server.capacity
    # More stalled senders than the room and the queue together (2 + 3).
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(8):
            await stack.enter_async_context(stalled(server.bound[1], context, b"{", 100_000))
        await wait_for(lambda: capacity.receiving == 8, "eight bodies being received")
        assert capacity.waiting == 0 and capacity.free == capacity.units
        # A review sent whole, as the API server sends it, is answered meanwhile.
        for _ in range(6):
            status, _, _ = await post(server, context, review())
            assert status == 200
        assert capacity.receiving == 8
    await wait_for(lambda: capacity.receiving == 0, "the stalled senders gone")
    assert capacity.held_body_bytes == 0


async def test_bytes_of_bodies_not_yet_in_room_are_bounded(
    server: AdmissionServer, cert_dir: Path
) -> None:
    """Bodies no longer hold room while they are read, so the bytes they hold have a bound of
    their own: a sender that sent most of a large body and stalls holds its bytes, and a
    review that would take the total past the bound is answered 429 with a Retry-After."""
    assert server.bound is not None
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    capacity = server.capacity
    async with stalled(server.bound[1], context, b"{" + b" " * (200 << 10), 1 << 20):
        await wait_for(
            lambda: capacity.held_body_bytes > 200 << 10, "the stalled body's bytes received"
        )
        status, text, retry = await post(server, context, review(pad=100 << 10))
        assert (status, retry) == (429, "1")
        assert text.startswith(
            "webhook overloaded: request bodies being received or waiting for room would hold"
        )
        assert text.endswith("(budget 256 KiB); retry shortly\n")
        # A small review still fits beside the stalled one.
        status, _, _ = await post(server, context, review())
        assert status == 200
    await wait_for(lambda: capacity.held_body_bytes == 0, "the stalled sender gone")
    status, _, _ = await post(server, context, review(pad=100 << 10))
    assert status == 200


async def test_a_body_must_arrive_within_half_the_reviews_timeout(
    server: AdmissionServer, cert_dir: Path
) -> None:
    """The body is read within the review's own deadline, half its timeout (the room's wait
    shares it): at ``?timeout=2s`` a stalled body is cut off with 408 after 1 s, not 10 s."""
    assert server.bound is not None
    context = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    async with stalled(server.bound[1], context, b"{", 100, "?timeout=2s") as reader:
        async with asyncio.timeout(60):
            answer = await reader.read()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert answer.endswith(b"\r\n\r\nrequest body not received within 1 s\n")
    assert server.capacity.receiving == 0
