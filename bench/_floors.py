"""The committed-write floor: what a durable first execution must write, on raw connections.

A first execution commits twice, its intent before the function runs and its outcome after, so
the floor of one call is two committed INSERTs, one after the other, with nothing of ours
around them: PostgreSQL in autocommit on `asyncpg` (a round trip each, with its WAL flush),
SQLite on one `aiosqlite` connection with the ledger's PRAGMAs (a transaction and an fsync
each). Its client CPU per call is what those two writes cost the calling process on these
drivers: the part of a first execution's cost that is not the guard's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import aiosqlite
import asyncpg

from bench._setup import asyncpg_dsn

FLOOR_WRITES = 2  # the intent and the outcome

Call = Callable[[str], Awaitable[None]]
Close = Callable[[], Awaitable[None]]


async def sqlite_floor(path: str) -> tuple[Call, Close]:
    """Two committed INSERTs per call into `bench_floor` of the SQLite file at `path`."""
    lite = await aiosqlite.connect(path, isolation_level=None, timeout=30)
    await lite.execute("PRAGMA journal_mode=WAL")
    await lite.execute("PRAGMA synchronous=FULL")
    lock = asyncio.Lock()  # one connection, like the ledger's one writer

    async def one(key: str) -> None:
        for _ in range(FLOOR_WRITES):
            async with lock:
                await lite.execute("INSERT INTO bench_floor (k) VALUES (?)", (key,))

    return one, lite.close


async def _keep(connection: asyncpg.Connection) -> None:
    """Give a connection back as it is. asyncpg's default reset sends `RESET ALL; UNLISTEN *; …`
    at every release, a second round trip per statement that no ledger write pays (ad hoc, 8 in
    flight: 1,818 calls per second with it, 2,863 on raw connections)."""


async def postgres_floor(database_url: str, schema: str, connections: int) -> tuple[Call, Close]:
    """Two committed INSERTs per call into `bench_floor` of `schema`, on up to `connections`."""
    pool = await asyncpg.create_pool(
        asyncpg_dsn(database_url),
        min_size=1,
        max_size=connections,
        server_settings={"search_path": schema},
        reset=_keep,
    )

    async def one(key: str) -> None:
        for _ in range(FLOOR_WRITES):
            await pool.execute("INSERT INTO bench_floor (k) VALUES ($1)", key)

    return one, pool.close
