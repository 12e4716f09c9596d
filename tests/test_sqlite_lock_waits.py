"""Waits for the embedded ledger's write lock are made on the event loop, where a cancel ends them.

A thread in SQLite's busy handler waits out its busy timeout (30 s) whatever its caller does:
neither a cancelled task nor `sqlite3`'s interrupt() ends it. So the engine's write transactions
try BEGIN IMMEDIATE with no busy wait and sleep on the loop between tries (`ledger._engine`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from writesafe.ledger import Ledger
from writesafe.ledger._api_keys import Role
from writesafe.ledger._engine import SQLITE_BUSY_TIMEOUT, create_engine, reader


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
    waiting when its task is cancelled (a shutdown, a client gone), and the ledger then closes at
    once: in SQLite's busy handler, the driver's thread went on waiting for 30 s, and the close
    waited for it."""
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
        await asyncio.sleep(0.2)  # it waits for the lock now
        adding.cancel()
        async with asyncio.timeout(SQLITE_BUSY_TIMEOUT / 3):
            with pytest.raises(asyncio.CancelledError):
                await adding
            await ledger.close()
        assert set(threading.enumerate()) <= threads_before
    assert await ledger.api_keys().list() == []
    await ledger.close()


async def test_writes_wait_for_the_lock_on_the_loop_and_reads_keep_sqlite_s_busy_wait(
    tmp_path: Path,
) -> None:
    """A write transaction waits for SQLite's lock on the event loop, with no busy wait in the
    driver; a read on the same pooled connection gets SQLite's busy wait back, for the brief
    locks a WAL reader can meet."""
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
        assert (writing[1], reading[1]) == (0, SQLITE_BUSY_TIMEOUT * 1000)
    finally:
        await engine.dispose()
