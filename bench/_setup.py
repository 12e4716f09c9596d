"""Isolated stores for a benchmark run: own PostgreSQL schema, Redis prefix and SQLite directory.

The machine's servers are shared with other work, so a benchmark never flushes or restarts them:
it creates `bench_<name>_<id>` and `bench:<name>:<id>:*` and removes exactly those afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiosqlite
import asyncpg
from redis.asyncio import Redis

PG_URL = os.environ.get(
    "WRITESAFE_BENCH_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1/test"
)
REDIS_URL = os.environ.get("WRITESAFE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def asyncpg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def create_sqlite_floor(path: Path) -> None:
    """The table of the committed-INSERT floor, in the SQLite file at `path`."""
    async with aiosqlite.connect(path) as lite:
        await lite.execute("CREATE TABLE bench_floor (id INTEGER PRIMARY KEY, k TEXT)")
        await lite.commit()


async def create_postgres_floor(database_url: str, schema: str) -> None:
    """The table of the committed-INSERT floor, in the run's own PostgreSQL schema."""
    connection = await asyncpg.connect(asyncpg_dsn(database_url))
    try:
        await connection.execute(
            f'CREATE TABLE "{schema}".bench_floor (id bigserial PRIMARY KEY, k text)'
        )
    finally:
        await connection.close()


@dataclass(frozen=True)
class Isolation:
    schema: str
    redis_prefix: str
    workdir: Path  # for SQLite files; removed with the rest


@asynccontextmanager
async def isolated(
    name: str, pg_url: str = PG_URL, redis_url: str = REDIS_URL
) -> AsyncIterator[Isolation]:
    """A fresh schema and key prefix for one run; both are dropped on the way out."""
    run = uuid.uuid4().hex[:8]
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    isolation = Isolation(f"bench_{name}_{run}", f"bench:{name}:{run}", workdir)
    connection = await asyncpg.connect(asyncpg_dsn(pg_url))
    try:
        await connection.execute(f'CREATE SCHEMA "{isolation.schema}"')
    finally:
        await connection.close()
    try:
        yield isolation
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        connection = await asyncpg.connect(asyncpg_dsn(pg_url))
        try:
            await connection.execute(f'DROP SCHEMA "{isolation.schema}" CASCADE')
        finally:
            await connection.close()
        redis = Redis.from_url(redis_url)
        try:
            keys = [
                k async for k in redis.scan_iter(match=f"{isolation.redis_prefix}:*", count=1000)
            ]
            for start in range(0, len(keys), 1000):
                await redis.delete(*keys[start : start + 1000])
        finally:
            await redis.aclose()
