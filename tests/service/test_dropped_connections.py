"""Reads survive PostgreSQL dropping the service's connections: no 503, and the log says so.

The test terminates only backends of connections this test process opened: those whose client
port is one of this process's own TCP sockets to the server (never anyone else's backends).
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import httpx
import psutil
import pytest

from tests.conftest import PG_URL, MakeWriteSafe, asyncpg_dsn
from tests.service.support import SCOPES, issue_keys, seed, served
from writesafe import WriteSafeSettings
from writesafe.ledger import Role
from writesafe.service import ServiceSettings, create_app

A = SCOPES[0]
_PG_PORT = 5432


def _own_client_ports() -> list[int]:
    """Local ports of this process's TCP connections to the PostgreSQL server."""
    return [
        conn.laddr.port
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == _PG_PORT and conn.status == psutil.CONN_ESTABLISHED
    ]


async def _drop_own_connections() -> int:
    """Terminate the backends of this process's connections; how many there were."""
    killer = await asyncpg.connect(asyncpg_dsn(PG_URL))
    try:
        ports = _own_client_ports()
        pids = await killer.fetch(
            "SELECT pid FROM pg_stat_activity WHERE client_port = ANY($1::int[])"
            " AND client_addr IN ('127.0.0.1', '::1') AND pid <> pg_backend_pid()",
            ports,
        )
        victims = [row["pid"] for row in pids]
        await killer.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", victims
        )
        for _ in range(100):  # until the server has really let go of them
            left = await killer.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])", victims
            )
            if left == 0:
                break
            await asyncio.sleep(0.05)
        return len(victims)
    finally:
        await killer.close()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_reads_survive_dropped_connections(
    make_ws: MakeWriteSafe, caplog: pytest.LogCaptureFixture
) -> None:
    ws = make_ws(settings=WriteSafeSettings(pool_size=3))  # ≤ 9 connections of the shared server
    await ws.start()
    tokens = await issue_keys(ws)
    await seed(ws, A)
    app = create_app(ws, ServiceSettings(rate_limits=False))
    headers = {"Authorization": f"Bearer {tokens[A, Role.READER]}"}
    paths = ["/v1/operations/ok", "/v1/operations/lost/attempts", "/v1/operations", "/readyz"]
    async with (
        served(app, "asgi") as (base_url, transport),
        httpx.AsyncClient(base_url=base_url, transport=transport, headers=headers) as client,
    ):
        # Several concurrent requests first, so that both pools hold several connections.
        await asyncio.gather(*(client.get(path) for path in paths * 3))
        assert await _drop_own_connections() >= 2
        caplog.set_level(logging.WARNING, logger="writesafe.service")
        answers = [await client.get(path) for path in paths * 3]
    assert [r.status_code for r in answers] == [200] * len(answers), [
        (r.request.url.path, r.status_code) for r in answers if r.status_code != 200
    ]
    retried = [r for r in caplog.records if "connection had been dropped" in r.getMessage()]
    assert retried, "the retried reads were not logged"
