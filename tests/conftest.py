"""Shared fixtures: real PostgreSQL and Redis, isolated per test, left clean afterwards.

Every PostgreSQL test gets its own schema (`ws_test_<run>_<n>`, dropped afterwards) and every Redis
test its own key prefix (deleted afterwards). SQLite tests use a file under pytest's tmp_path.
Override the servers with WRITESAFE_TEST_DATABASE_URL / WRITESAFE_TEST_REDIS_URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
from redis.asyncio import Redis

from writesafe import WriteSafe

PG_URL = os.environ.get(
    "WRITESAFE_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("WRITESAFE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
RUN_ID = uuid.uuid4().hex[:8]
_numbers = itertools.count()
T = TypeVar("T")

BACKENDS = ["sqlite", "postgres", "postgres+redis"]
# What reaches a server, by fixture name and by backend parameter: a test that asks for one is
# marked with it, so `-m "not postgres and not redis"` runs without servers. Backend parameters
# are recognised by value, so other files' own backend fixtures are marked too.
SERVER_FIXTURES = {"pg_schema": "postgres", "redis_prefix": "redis"}
SERVER_PARAMETERS = {"postgres": {"postgres"}, "postgres+redis": {"postgres", "redis"}}
# PostgreSQL connections the whole run (all xdist workers together) may hold at once: the shared
# server's max_connections has other clients. A PostgreSQL test holds PG_DEFAULT_SLOTS of them
# while it runs, or as many as its `pg_connections(n)` mark says.
PG_BUDGET = 40
PG_DEFAULT_SLOTS = 8


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marks = {
            mark
            for name, mark in SERVER_FIXTURES.items()
            if name in getattr(item, "fixturenames", ())
        }
        callspec = getattr(item, "callspec", None)
        for value in callspec.params.values() if callspec else ():
            if isinstance(value, str):
                marks |= SERVER_PARAMETERS.get(value, set())
        for mark in sorted(marks):
            item.add_marker(mark)


def asyncpg_dsn(url: str = PG_URL) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on a private event loop in a worker thread (for sync fixtures)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def _pg_execute(statement: str) -> None:
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def _redis_delete(prefix: str) -> None:
    client = Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


async def _drop_schema(name: str) -> None:
    """Drop a test's schema, first ending sessions that still hold locks in it.

    A failed test can leave a task mid-transaction on a connection of its own; without this the
    DROP would wait for it forever.
    """
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        await connection.execute(
            """
            SELECT pg_terminate_backend(l.pid)
            FROM pg_locks l
            JOIN pg_class c ON c.oid = l.relation
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = $1 AND l.pid <> pg_backend_pid()
            """,
            name,
        )
        await connection.execute(f'DROP SCHEMA "{name}" CASCADE')
    finally:
        await connection.close()


class ConnectionBudget:
    """PG_BUDGET slots, one lock file each, shared by every process of the run (xdist workers).

    A test takes its slots under one mutex, so a test that needs many waits its turn instead of
    being starved by small ones, and two tests never each hold half of what the other needs.
    The locks are flock()s, released by the kernel even when a worker dies.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def hold(self, count: int) -> Iterator[None]:
        held: list[Any] = []
        try:
            with open(self.folder / "mutex", "w") as mutex:
                fcntl.flock(mutex, fcntl.LOCK_EX)
                while len(held) < count:
                    for slot in range(PG_BUDGET):
                        if len(held) == count:
                            break
                        handle = open(self.folder / f"slot-{slot}", "w")  # noqa: SIM115
                        try:
                            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except BlockingIOError:
                            handle.close()
                        else:
                            held.append(handle)
                    if len(held) < count:
                        time.sleep(0.05)
            yield
        finally:
            for handle in held:
                handle.close()


@pytest.fixture(scope="session")
def connection_budget(tmp_path_factory: pytest.TempPathFactory) -> ConnectionBudget:
    # Under xdist each worker's basetemp is a child of the run's one shared folder.
    root = tmp_path_factory.getbasetemp()
    shared = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    return ConnectionBudget(shared / "pg-budget")


@pytest.fixture(autouse=True)
def pg_slots(request: pytest.FixtureRequest) -> Iterator[None]:
    """A PostgreSQL test's share of PG_BUDGET (its `pg_connections` mark), held to its teardown.

    Autouse, so the slots are taken before any fixture opens a connection.
    """
    if request.node.get_closest_marker("postgres") is None:
        yield
        return
    mark = request.node.get_closest_marker("pg_connections")
    count = int(mark.args[0]) if mark else PG_DEFAULT_SLOTS
    budget: ConnectionBudget = request.getfixturevalue("connection_budget")
    with budget.hold(min(count, PG_BUDGET)):
        yield


@contextlib.contextmanager
def fresh_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema, dropped afterwards."""
    name = f"ws_test_{RUN_ID}_{next(_numbers)}"
    run_sync(_pg_execute(f'CREATE SCHEMA "{name}"'))
    try:
        yield name
    finally:
        run_sync(_drop_schema(name))


@contextlib.contextmanager
def fresh_prefix() -> Iterator[str]:
    """A Redis key prefix of its own; its keys are deleted afterwards."""
    prefix = f"wstest:{RUN_ID}:{next(_numbers)}"
    try:
        yield prefix
    finally:
        run_sync(_redis_delete(prefix))


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh, empty PostgreSQL schema for this test, dropped afterwards."""
    with fresh_schema() as name:
        yield name


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A Redis key prefix for this test; its keys are deleted afterwards."""
    with fresh_prefix() as prefix:
        yield prefix


MakeWriteSafe = Callable[..., WriteSafe]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def store_arguments(
    backend: str, folder: Path, schema: Callable[[], str], prefix: Callable[[], str]
) -> dict[str, Any]:
    """`WriteSafe` arguments for isolated stores of `backend`: a SQLite file in `folder`, or the
    PostgreSQL schema and Redis prefix that `schema()` and `prefix()` make."""
    if backend == "sqlite":
        return {"database_url": f"sqlite+aiosqlite:///{folder / 'ledger.db'}"}
    options: dict[str, Any] = {"database_url": PG_URL, "schema": schema(), "auto_migrate": True}
    if backend == "postgres+redis":
        options["redis_url"] = REDIS_URL
        options["redis_prefix"] = prefix()
    return options


@pytest.fixture
def store_options(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """`WriteSafe` arguments for this test's isolated stores of `backend`."""
    return store_arguments(
        backend,
        tmp_path,
        lambda: str(request.getfixturevalue("pg_schema")),
        lambda: str(request.getfixturevalue("redis_prefix")),
    )


@pytest.fixture
async def make_ws(store_options: dict[str, Any]) -> AsyncIterator[MakeWriteSafe]:
    """A factory of `WriteSafe` instances that share one isolated ledger (and Redis prefix).

    Several instances stand in for several workers: each has its own pools and no shared
    in-process state, so they meet only in the stores.
    """
    made: list[WriteSafe] = []

    def make(**overrides: Any) -> WriteSafe:
        ws = WriteSafe(**{**store_options, **overrides})
        made.append(ws)
        return ws

    yield make
    for ws in made:
        await ws.close()
