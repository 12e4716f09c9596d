"""A tenant at its bound on work in flight is refused (429) while another tenant is admitted,
and a key the bound knows is refused before its lookup takes a database connection.

The work is held in flight without a clock: a second connection locks the operations table, so
the listing that fills tenant A's bound waits inside the database, and the test waits for what
PostgreSQL reports as waiting (`pg_locks`), not for a time to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx

from tests.conftest import PG_URL, asyncpg_dsn
from tests.service.support import assert_problem, issue_keys, served
from writesafe import WriteSafe
from writesafe.ledger import Role
from writesafe.service import ServiceSettings, create_app

A, B = "tenant-a", "tenant-b"
LISTING = {"limit": 500}  # costs 11 units: the whole bound below


@asynccontextmanager
async def _locked(schema: str, *tables: str) -> AsyncIterator[asyncpg.Connection]:
    """A transaction holding `tables` of the ledger locked (ACCESS EXCLUSIVE) until the block ends;
    it can lock more in the block (`_lock`)."""
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        async with connection.transaction():
            await _lock(connection, schema, *tables)
            yield connection
    finally:
        await connection.close()


@asynccontextmanager
async def _watching() -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own for `pg_locks`: the watch may be cancelled mid-query."""
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        yield connection
    finally:
        connection.terminate()


async def _lock(connection: asyncpg.Connection, schema: str, *tables: str) -> None:
    for table in tables:
        await connection.execute(f'LOCK TABLE "{schema}".{table} IN ACCESS EXCLUSIVE MODE')


async def _waiting_on(connection: asyncpg.Connection, schema: str, table: str) -> int:
    """How many sessions wait for a lock on `table` (the requests stuck behind ours)."""
    count = await connection.fetchval(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass",
        f'"{schema}".{table}',
    )
    return int(count)


async def _until_waiting(
    connection: asyncpg.Connection, schema: str, table: str, count: int
) -> None:
    while await _waiting_on(connection, schema, table) < count:  # noqa: ASYNC110 (the server)
        await asyncio.sleep(0.01)


async def test_a_tenant_at_its_bound_is_refused_while_another_is_admitted(
    pg_schema: str,
) -> None:
    async with WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True) as ws:

        @ws.tool("noop")
        async def noop(n: int) -> int:
            return n

        for scope in (A, B):
            await noop(1, idempotency_key="k1", scope=scope)
        tokens = await issue_keys(ws, (A, B))
        settings = ServiceSettings(rate_limit_per_key="100000/minute", tenant_work_units=11)
        async with served(create_app(ws, settings), "asgi") as (url, transport):

            def client(scope: str) -> httpx.AsyncClient:
                headers = {"Authorization": f"Bearer {tokens[scope, Role.READER]}"}
                return httpx.AsyncClient(base_url=url, transport=transport, headers=headers)

            async with client(A) as a, client(B) as b, _watching() as watch:
                assert (await a.get("/v1/operations", params=LISTING)).status_code == 200
                async with _locked(pg_schema, "writesafe_operations") as lock:
                    # A's listing fills A's bound and waits in the database, holding it.
                    listing = asyncio.create_task(a.get("/v1/operations", params=LISTING))
                    await _until_waiting(watch, pg_schema, "writesafe_operations", 1)
                    # B is admitted beside it: its status read reaches the database too.
                    status = asyncio.create_task(b.get("/v1/operations/k1"))
                    await _until_waiting(watch, pg_schema, "writesafe_operations", 2)
                    # With the keys locked as well, A's next request is refused without a
                    # lookup: had it looked its key up, it would wait here behind the lock.
                    await _lock(lock, pg_schema, "writesafe_api_keys")
                    refused = asyncio.create_task(a.get("/v1/operations/k1"))
                    looked_up = asyncio.create_task(
                        _until_waiting(watch, pg_schema, "writesafe_api_keys", 1)
                    )
                    done, _ = await asyncio.wait(
                        {refused, looked_up}, return_when=asyncio.FIRST_COMPLETED
                    )
                    looked_up.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await looked_up
                    assert refused in done, "A's refusal waited for its key's lookup"
                body = assert_problem(refused.result(), 429, "RATE_LIMITED")
                assert "units of work in flight" in body["detail"]
                assert refused.result().headers["Retry-After"] == "1"
                assert (await listing).status_code == 200
                assert (await status).status_code == 200
                # The bound is whole again once A's listing is answered.
                assert (await a.get("/v1/operations/k1")).status_code == 200
