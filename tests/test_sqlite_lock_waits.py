"""The engine's waits for the embedded ledger's write lock: over soon after their caller is gone,
and failing, when the lock stays taken, as any statement of the ledger fails.

A thread in SQLite's busy handler waits out its busy timeout (30 s) whatever its caller does:
neither a cancelled task nor `sqlite3`'s interrupt() ends it. So a write transaction's BEGIN
IMMEDIATE waits in short tries (`ledger._engine._TRY_MS`), each one SQLite's own busy wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from writesafe.idempotency._recording import LEDGER_ERRORS
from writesafe.ledger import Ledger
from writesafe.ledger._api_keys import Role
from writesafe.ledger._engine import (
    _TRY_MS,
    SQLITE_BUSY_TIMEOUT,
    create_engine,
    reader,
    with_lock_wait,
)
from writesafe.reconciler._causes import LedgerCause
from writesafe.reconciler._ledger_causes import ledger_failure


@contextlib.contextmanager
def write_lock_held(file: Path) -> Iterator[None]:
    """The embedded ledger's write lock, held by a connection of another "process"."""
    holder = sqlite3.connect(file, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        yield
        holder.execute("COMMIT")
    finally:
        holder.close()


async def test_a_write_cancelled_while_another_process_holds_the_lock_leaves_no_thread_waiting(
    tmp_path: Path,
) -> None:
    """Any write of the engine (here an API key's, as the service's admin route makes it) stops
    waiting within a try when its task is cancelled (a shutdown, a client gone), and the ledger
    then closes as quickly, leaving no driver thread: one in SQLite's busy handler waited on for
    30 s (and a cancelled write with it), to answer a loop that might have ended by then."""
    file = tmp_path / "ledger.db"
    threads_before = set(threading.enumerate())
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{file}")
    await ledger.migrate()
    with write_lock_held(file):
        adding = asyncio.create_task(
            ledger.api_keys().add(
                key_id="k1", secret_hash="h" * 64, scope="default", role=Role.ADMIN, name="ops"
            )
        )
        await asyncio.sleep(0.5)  # it waits for the lock now, past its first try
        adding.cancel()
        # Both end within a try (`_TRY_MS`); the bound is a third of SQLite's busy wait, which
        # they waited out before. (The close does not end at a timeout's cancel: timed here.)
        bound = SQLITE_BUSY_TIMEOUT / 3
        await asyncio.wait({adding}, timeout=bound)
        assert adding.cancelled()
        closing = time.monotonic()
        await ledger.close()
        assert time.monotonic() - closing < bound
        # A driver thread told to stop ends a moment after the close: give it that moment, with
        # the lock still held, which one stuck in SQLite's busy wait could not use.
        for thread in set(threading.enumerate()) - threads_before:
            thread.join(timeout=bound)
        assert set(threading.enumerate()) <= threads_before
    assert await ledger.api_keys().list() == []
    await ledger.close()


async def test_a_write_waits_for_the_lock_in_short_tries_and_a_read_keeps_the_long_wait(
    tmp_path: Path,
) -> None:
    """A pooled connection's busy wait is one try's while it writes; a read on it gets SQLite's
    busy wait back, for the brief locks a WAL reader can meet (a recovery, a last close)."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")

    async def busy_wait(conn: AsyncConnection) -> tuple[object, int]:
        driver = (await conn.get_raw_connection()).driver_connection
        return driver, int((await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar_one())

    try:
        async with engine.begin() as conn:
            writing = await busy_wait(conn)
        async with reader(engine).begin() as conn:
            reading = await busy_wait(conn)
        assert writing[0] is reading[0]
        assert (writing[1], reading[1]) == (_TRY_MS, SQLITE_BUSY_TIMEOUT * 1000)
    finally:
        await engine.dispose()


async def test_a_write_that_waited_out_its_lock_wait_fails_as_the_ledger_s_callers_expect(
    tmp_path: Path,
) -> None:
    """SQLAlchemy's OperationalError, as any statement's, so that every `except` of a ledger
    failure takes it (`LEDGER_ERRORS`) and calls it busy: the driver's own error, escaping from
    the tries, was none of those and reached callers unclassified."""
    file = tmp_path / "ledger.db"
    engine = create_engine(f"sqlite+aiosqlite:///{file}")
    try:
        async with engine.begin():
            pass  # the file, in WAL
        with write_lock_held(file), pytest.raises(LEDGER_ERRORS) as refused:
            async with with_lock_wait(engine, 2 * _TRY_MS / 1000).begin():
                pass
        assert ledger_failure(refused.value).cause is LedgerCause.BUSY
    finally:
        await engine.dispose()
