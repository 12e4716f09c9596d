"""The PostgreSQL writer bounds each statement: one that runs past its deadline is stopped in the
server and raised as a `TimeoutError`, and its caller's own cancellation is never taken for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest
from asyncpg.transaction import Transaction

from tests.conftest import PG_URL, asyncpg_dsn
from writesafe import WriteSafe
from writesafe.ledger._engine import ConnectionBudget, postgres_connect_options
from writesafe.ledger._pg_writer import PostgresWriter

DEADLINE = 0.3  # seconds a statement may run


@pytest.fixture
async def writer(pg_schema: str) -> AsyncIterator[PostgresWriter]:
    async with WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True):
        pass  # the ledger's tables
    options = postgres_connect_options(PG_URL, statement_timeout=DEADLINE)
    budget = ConnectionBudget(max_connections=2, writer=1)
    writer = PostgresWriter(options, pg_schema, budget)
    yield writer
    await writer.close()


@dataclass(frozen=True)
class Locked:
    """Another session's transaction holding the operations table: every statement on it waits
    until `transaction` is rolled back."""

    connection: asyncpg.Connection
    transaction: Transaction
    table: str

    async def waiting(self) -> int:
        """How many sessions wait for the table."""
        query = "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass"
        return int(await self.connection.fetchval(query, self.table))


@pytest.fixture
async def locked(pg_schema: str) -> AsyncIterator[Locked]:
    connection = await asyncpg.connect(asyncpg_dsn())
    table = f'"{pg_schema}".writesafe_operations'
    try:
        transaction = connection.transaction()
        await transaction.start()
        await connection.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        yield Locked(connection, transaction, table)
    finally:
        await connection.close()  # ends the transaction, if the test has not


async def test_a_statement_past_its_deadline_is_stopped_raises_a_timeout_and_gives_its_slot_back(
    writer: PostgresWriter, locked: Locked
) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ran past 0\.3s"):
        async with asyncio.timeout(5):  # without its deadline, the statement waits on the lock
            await writer.fetch("default", "k")
    assert DEADLINE <= time.monotonic() - started < 2
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # the deadline's cancel is taken back
    async with asyncio.timeout(3):  # the server was asked to stop the statement
        while await locked.waiting():  # noqa: ASYNC110 (the server)
            await asyncio.sleep(0.05)
    await locked.transaction.rollback()  # the lock is gone: the slot serves the next statement
    async with asyncio.timeout(5):
        assert await writer.fetch("default", "k") is None


async def test_a_caller_cancelled_as_its_statement_runs_out_is_cancelled_not_timed_out(
    writer: PostgresWriter, locked: Locked
) -> None:
    fetching = asyncio.create_task(writer.fetch("default", "k"))
    await asyncio.sleep(0.05)  # the statement is lent, and waits on the lock
    loop = asyncio.get_running_loop()
    # The deadline (0.25 s from now) and the caller's cancel (0.35 s) come due while the loop
    # is held (0.1 s to 0.7 s), so they run in one turn: the deadline first.
    loop.call_later(0.1, time.sleep, 2 * DEADLINE)
    loop.call_later(0.1 + DEADLINE / 2 + DEADLINE / 3, fetching.cancel)
    with pytest.raises(asyncio.CancelledError):
        await fetching
    assert fetching.cancelled()
