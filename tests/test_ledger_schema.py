"""The schema: migrations match the models, upgrade is repeatable, a stale schema is refused."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from typer.testing import CliRunner

from tests.conftest import PG_URL, asyncpg_dsn, fresh_schema
from tests.test_sqlite_lock_waits import write_lock_held
from writesafe import WriteSafe
from writesafe.cli import app
from writesafe.ledger import Base, Ledger, LedgerNotMigrated, head_revision
from writesafe.ledger._engine import connect_sqlite
from writesafe.ledger._migrations import _LOCK_SCHEMA, _MIGRATION_LOCK, in_ledger_schema


def _differences(connection: Connection) -> list[object]:
    context = MigrationContext.configure(
        connection,
        opts={"include_name": lambda name, kind, _parent: name != "writesafe_alembic_version"},
    )
    return list(compare_metadata(context, Base.metadata))


async def _migrated_differences(ledger: Ledger) -> list[object]:
    await ledger.migrate()
    await ledger.migrate()  # a second upgrade is a no-op
    async with ledger.engine.connect() as connection:
        await in_ledger_schema(connection)  # Alembic's comparison reflects through search_path
        return await connection.run_sync(_differences)


async def test_sqlite_migrations_match_the_models(tmp_path: Path) -> None:
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{tmp_path / 'l.db'}")
    try:
        assert await _migrated_differences(ledger) == []
    finally:
        await ledger.close()


async def test_postgres_migrations_match_the_models(pg_schema: str) -> None:
    ledger = Ledger.from_url(PG_URL, schema=pg_schema)
    try:
        assert await _migrated_differences(ledger) == []
    finally:
        await ledger.close()


async def test_embedded_default_creates_its_wal_file_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "embedded.db"
    async with WriteSafe(f"sqlite+aiosqlite:///{path}") as ws:

        @ws.tool("noop")
        async def noop() -> int:
            return 1

        assert await noop(idempotency_key="k") == 1
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


async def _loop_turns(seconds: float) -> int:
    """How many times a task sleeping 1 ms at a time woke in `seconds`."""
    turns, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.sleep(0.001)
        turns += 1
    return turns


def _journal_mode(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as connection:
        mode: str = connection.execute("PRAGMA journal_mode").fetchone()[0]
        return mode


async def test_a_ledger_opening_a_file_another_is_switching_to_wal_waits_on_the_loop(
    tmp_path: Path,
) -> None:
    """A new file, not in WAL yet, whose write lock another connection holds, as an instance
    does for a moment while it puts the file into WAL. SQLite refuses the switch at once then:
    instances
    starting together on a new file refused one another (TEMP_UNAVAILABLE at start). The wait
    is made on the event loop and leaves it free: sleeping in the driver's connect hook would
    hold it for up to 50 ms a try (then it turned about every 20 ms; now every 1-2 ms)."""
    path = tmp_path / "new.db"
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
    try:
        with write_lock_held(path):
            migrating = asyncio.create_task(ledger.migrate())
            turns = await _loop_turns(seconds=1.0)
            assert not migrating.done()
            assert turns >= 200  # a turn every 5 ms at the slowest
        await migrating
        assert _journal_mode(path) == "wal"
    finally:
        await ledger.close()


def test_a_driver_connection_opening_a_file_another_is_switching_to_wal_waits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.db"
    modes: list[str] = []

    def open_the_file() -> None:
        with contextlib.closing(connect_sqlite(path)) as connection:
            modes.append(connection.execute("PRAGMA journal_mode").fetchone()[0])

    with write_lock_held(path):
        opening = threading.Thread(target=open_the_file)
        opening.start()
        opening.join(timeout=0.2)
        assert opening.is_alive()
    opening.join()
    assert modes == ["wal"]


async def test_postgres_refuses_an_unmigrated_schema(pg_schema: str) -> None:
    ws = WriteSafe(PG_URL, schema=pg_schema)

    @ws.tool("noop")
    async def noop() -> int:
        raise AssertionError("must not execute")

    try:
        with pytest.raises(LedgerNotMigrated, match="writesafe db upgrade"):
            await noop(idempotency_key="k")
    finally:
        await ws.close()


def test_db_upgrade_command_migrates_postgres(pg_schema: str) -> None:
    runner = CliRunner()
    arguments = ["db", "upgrade", "--database-url", PG_URL, "--schema", pg_schema]
    first = runner.invoke(app, arguments)
    assert first.exit_code == 0, first.output
    assert head_revision() in first.output
    again = runner.invoke(app, arguments)
    assert again.exit_code == 0, again.output


async def test_workers_starting_at_once_create_a_schema_that_does_not_exist(
    pg_schema: str,
) -> None:
    """`auto_migrate=True` with a schema not created yet creates it, as `writesafe db upgrade`
    does; four workers starting at once all start (one creates it, under the migration lock:
    two CREATE SCHEMA IF NOT EXISTS at once collide) and find it at head."""
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        await connection.execute(f'DROP SCHEMA "{pg_schema}"')
    finally:
        await connection.close()
    workers = [WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True) for _ in range(4)]
    try:
        await asyncio.wait_for(asyncio.gather(*(ws.start() for ws in workers)), 60)
        assert {await ws.ledger.revision() for ws in workers} == {head_revision()}
    finally:
        for ws in workers:
            await ws.close()


def test_db_upgrade_reports_an_unreachable_database() -> None:
    url = "postgresql+asyncpg://postgres@127.0.0.1:1/test"
    result = CliRunner().invoke(app, ["db", "upgrade", "--database-url", url])
    assert result.exit_code == 3
    assert "could not be reached" in result.output


@pytest.fixture
def other_pg_schema(pg_schema: str) -> Iterator[str]:
    """A second empty schema beside `pg_schema`, dropped afterwards."""
    with fresh_schema() as name:
        yield name


async def test_an_upgrade_waits_only_for_upgrades_of_its_own_schema(
    pg_schema: str, other_pg_schema: str
) -> None:
    """Workers starting at once on one schema migrate one at a time; a ledger in another
    schema (another tenant, another test) does not queue behind them."""
    busy = Ledger.from_url(PG_URL, schema=other_pg_schema)
    same = Ledger.from_url(PG_URL, schema=other_pg_schema)
    elsewhere = Ledger.from_url(PG_URL, schema=pg_schema)
    try:
        async with busy.engine.begin() as upgrading:  # an upgrade of the other schema runs
            await in_ledger_schema(upgrading)
            await upgrading.execute(_LOCK_SCHEMA, {"key": _MIGRATION_LOCK})
            await asyncio.wait_for(elsewhere.migrate(), 30)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(same.migrate(), 1.0)
        await asyncio.wait_for(same.migrate(), 30)  # its turn, once the first is done
    finally:
        for ledger in (busy, same, elsewhere):
            await ledger.close()


async def test_a_worker_finding_its_schema_current_does_not_queue_for_the_lock(
    pg_schema: str,
) -> None:
    """Eight workers starting at once on a migrated schema each only read its revision: under
    load, queueing each behind the others' upgrade transactions ran past the command timeout."""
    busy, starting = (
        Ledger.from_url(PG_URL, schema=pg_schema),
        Ledger.from_url(PG_URL, schema=pg_schema),
    )
    try:
        await busy.migrate()
        async with busy.engine.begin() as upgrading:  # another worker's upgrade holds the lock
            await in_ledger_schema(upgrading)
            await upgrading.execute(_LOCK_SCHEMA, {"key": _MIGRATION_LOCK})
            await asyncio.wait_for(starting.migrate(), 30)
    finally:
        for ledger in (busy, starting):
            await ledger.close()
