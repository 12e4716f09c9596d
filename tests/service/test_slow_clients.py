"""Slow and idle clients are bounded, and forwarded addresses come only from named proxies.

Each test serves the app with `writesafe serve`'s own uvicorn configuration (`server_config`) on
a loopback port, with one-second deadlines, and drives it with raw sockets: a trickle of header
bytes, a socket that sends nothing, a body that never completes. Without the deadlines uvicorn
keeps every one of them open (its keep-alive timeout restarts on each byte); each test's last
resort is a generous bound of its own, so a regression fails rather than hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import uvicorn

from tests.conftest import MakeWriteSafe
from tests.loopback import loopback_socket
from tests.service.support import SCOPES, clear_of_a_minute_edge, issue_keys
from writesafe.ledger import Role
from writesafe.service import ServiceSettings, create_app
from writesafe.service._server import server_config

# The server, not the ledger, is under test: one backend is enough.
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)

A = SCOPES[0]
DEADLINE = 1.0
GIVE_UP = 15.0  # far past every deadline: only a connection that is never closed reaches it
SLOW_SOCKETS = 200
UNKNOWN_KEY = "wsk_0123456789ab_" + "x" * 43


@contextlib.asynccontextmanager
async def _serving(
    make_ws: MakeWriteSafe, forwarded_allow_ips: str = "", **settings: Any
) -> AsyncIterator[tuple[int, dict[tuple[str, Role], str]]]:
    ws = make_ws()
    await ws.start()
    tokens = await issue_keys(ws)
    chosen = ServiceSettings(header_timeout=DEADLINE, body_timeout=DEADLINE, **settings)
    with loopback_socket() as sock:
        port = sock.getsockname()[1]
        config = server_config(
            create_app(ws, chosen),
            chosen,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            forwarded_allow_ips=forwarded_allow_ips,
        )
        config.lifespan, config.timeout_graceful_shutdown = "off", 1
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            yield port, tokens
        finally:
            server.should_exit = True
            await task


async def _closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent before it closed the connection."""
    received = b""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(4096):
            received += chunk
    return received


async def _trickle(writer: asyncio.StreamWriter, data: bytes, closed: asyncio.Task[bytes]) -> None:
    """Send `data` one byte every 0.2 s, until it is all sent or the server closed on us."""
    with contextlib.suppress(ConnectionError):
        for byte in data:
            if closed.done():
                return
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.2)


async def _open(port: int) -> tuple[asyncio.StreamWriter, asyncio.Task[bytes]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return writer, asyncio.create_task(_closed(reader))


async def test_slow_headers_and_idle_sockets_are_closed_while_others_get_through(
    make_ws: MakeWriteSafe,
) -> None:
    headers = b"GET /healthz HTTP/1.1\r\nHost: service.test\r\nX-Slow: " + b"z" * 200
    async with _serving(make_ws) as (port, tokens):
        opened = [await _open(port) for _ in range(SLOW_SOCKETS)]
        idle = [await _open(port) for _ in range(5)]  # sends nothing at all
        trickles = [
            asyncio.create_task(_trickle(writer, headers, closed)) for writer, closed in opened
        ]
        url = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {tokens[A, Role.READER]}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=GIVE_UP) as client:
            normal = [await client.get("/v1/operations") for _ in range(20)]
        closings = [closed for _, closed in opened + idle]
        done, pending = await asyncio.wait(closings, timeout=GIVE_UP)
        await asyncio.gather(*trickles)
        for writer, _ in opened + idle:
            writer.close()
    assert [r.status_code for r in normal] == [200] * 20
    assert not pending, f"{len(pending)} of {len(closings)} slow sockets were never closed"
    assert all(closed.result() == b"" for closed in done)  # closed, never answered


async def test_a_body_that_does_not_arrive_in_time_closes_the_connection(
    make_ws: MakeWriteSafe,
) -> None:
    async with _serving(make_ws) as (port, tokens):
        writer, closed = await _open(port)
        writer.write(
            b"POST /v1/reconcile HTTP/1.1\r\nHost: service.test\r\nContent-Type: application/json"
            b"\r\nAuthorization: Bearer " + tokens[A, Role.OPERATOR].encode() + b"\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        await writer.drain()
        trickle = asyncio.create_task(_trickle(writer, b" " * 98, closed))
        received = await asyncio.wait_for(closed, GIVE_UP)
        await trickle
        writer.close()
    assert b"HTTP/1.1 200" not in received  # the request never ran


@pytest.mark.parametrize(
    "authorization", [None, UNKNOWN_KEY, "not-a-key"], ids=["no-key", "unknown", "malformed"]
)
async def test_a_caller_without_a_valid_key_is_refused_before_its_body_is_read(
    make_ws: MakeWriteSafe, authorization: str | None
) -> None:
    auth = b"" if authorization is None else f"Authorization: Bearer {authorization}\r\n".encode()
    async with _serving(make_ws) as (port, _):
        writer, closed = await _open(port)
        writer.write(
            b"POST /v1/reconcile HTTP/1.1\r\nHost: service.test\r\n" + auth + b"Content-Type: "
            b"application/json\r\nContent-Length: 1000\r\n\r\n"  # and never a byte of body
        )
        await writer.drain()
        received = await asyncio.wait_for(closed, GIVE_UP)
        writer.close()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401"), received
    assert b"application/problem+json" in head
    assert b"connection: close" in head.lower()
    assert b'"code":"AUTH_REQUIRED"' in body


async def _client_addresses_seen(port: int) -> list[int]:
    """Statuses of bad-key requests that each claim another forwarded address."""
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {UNKNOWN_KEY}"}
    await clear_of_a_minute_edge()  # the limits counted here are per minute
    async with httpx.AsyncClient(base_url=url, headers=auth, timeout=GIVE_UP) as client:
        return [
            (
                await client.get("/v1/operations", headers={"X-Forwarded-For": f"203.0.113.{n}"})
            ).status_code
            for n in range(6)
        ]


async def test_forwarded_addresses_are_not_trusted_by_default(make_ws: MakeWriteSafe) -> None:
    async with _serving(make_ws, rate_limit_anonymous="3/minute") as (port, _):
        statuses = await _client_addresses_seen(port)
    assert statuses == [401, 401, 401, 429, 429, 429]  # one address: the socket's


async def test_forwarded_addresses_are_trusted_from_named_proxies(make_ws: MakeWriteSafe) -> None:
    settings = {"rate_limit_anonymous": "3/minute"}
    async with _serving(make_ws, forwarded_allow_ips="127.0.0.1", **settings) as (port, _):
        statuses = await _client_addresses_seen(port)
    assert statuses == [401] * 6  # six addresses, each under its limit


async def test_a_bad_header_block_is_refused(make_ws: MakeWriteSafe) -> None:
    # h11 bounds a header block (16 KiB); past it the connection gets 431 and is closed.
    async with _serving(make_ws) as (port, _):
        writer, closed = await _open(port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: service.test\r\nX-Big: " + b"a" * 20_000)
        await writer.drain()
        received = await asyncio.wait_for(closed, GIVE_UP)
        writer.close()
    assert received.startswith(b"HTTP/1.1 4"), received[:100]
