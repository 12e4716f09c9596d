"""SQLite's hot path: each write of a guarded call as one call into a thread of the writer's own.

Through aiosqlite every statement, BEGIN and COMMIT is a hop to the driver's thread and back, with
SQLAlchemy's async layer around each: a claim took 3.2 ms here, and takes 0.7 ms run whole in one
call (docs/performance.md). So the writer runs each write whole, on a blocking connection to the
same file configured as the async engine's (WAL, `synchronous=FULL`, `BEGIN IMMEDIATE`), in one
thread that serialises the process's writes as SQLite's write lock would anyway. Reads and
reconciliation keep the async engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, bindparam, insert, update
from sqlalchemy.dialects import sqlite

from writesafe.ledger._records import AttemptKind, OperationRecord
from writesafe.ledger._states import Status
from writesafe.ledger._writer import (
    FENCED,
    FETCH,
    Change,
    Claim,
    ClosedExecution,
    Moment,
    attempts,
    close_execution_params,
    close_execution_update,
    compare_and_set_params,
    compare_and_set_statement,
    operations,
)

T = TypeVar("T")

# Built once and run with parameters: building a statement costs SQLAlchemy more than SQLite takes
# to run it (a claim that finds its key: 570 µs with the statements built per call, 180 µs so).
_DURABLE, _LAZY = "PRAGMA synchronous=FULL", "PRAGMA synchronous=NORMAL"
_CLAIM = (
    sqlite.insert(operations)
    .on_conflict_do_nothing(index_elements=["scope", "key"])
    .returning(operations.c.id)
)
_START_EXECUTION = insert(attempts)
_CLOSE_EXECUTION = close_execution_update(bindparam("closes_label"))
_RENEW = (
    update(operations)
    .where(
        operations.c.id.in_(bindparam("ids", expanding=True)),
        operations.c.status == Status.IN_FLIGHT.value,
        operations.c.lease_owner.in_(bindparam("owners", expanding=True)),
    )
    .values(lease_expires_at=bindparam("until", type_=operations.c.lease_expires_at.type))
    .returning(operations.c.id)
)


class SqliteWriter:
    """The `Writer` for the embedded ledger: one thread hop per write."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._thread: ThreadPoolExecutor | None = None  # started by the first write, ended by close

    async def claim(self, row: dict[str, Any]) -> Claim | None:
        return await self._run(lambda conn: _claim(conn, row))

    async def fetch(self, scope: str, key: str) -> OperationRecord | None:
        return await self._run(lambda conn: _fetch(conn, scope, key))

    async def change(self, change: Change) -> OperationRecord | None:
        # Only a change that opens an execution is an intent; an outcome may commit lazily.
        return await self._run(lambda conn: _change(conn, change), durable=change.opens)

    async def renew(self, leases: Mapping[int, str], until: Moment) -> set[int]:
        params = {"ids": list(leases), "owners": list(leases.values()), "until": until}
        return await self._run(lambda conn: set(conn.execute(_RENEW, params).scalars()))

    async def close(self) -> None:
        """Close the writer's connection and end its thread; the next write opens both anew."""
        thread, self._thread = self._thread, None
        if thread is not None:
            # A pysqlite connection is closed by the thread that opened it.
            await asyncio.get_running_loop().run_in_executor(thread, self._engine.dispose)
            thread.shutdown(wait=False)

    def forget_loop(self) -> None:
        """Nothing to drop: the writer's thread serves whichever event loop awaits it."""

    async def _run(self, write: Callable[[Connection], T], *, durable: bool = True) -> T:
        """Run `write` as one transaction in the writer's thread; see `_transaction`."""
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="writesafe-sqlite")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._transaction, write, durable)

    def _transaction(self, write: Callable[[Connection], T], durable: bool) -> T:
        """One transaction; a durable one is on disk when it returns (`synchronous=FULL`).

        A lazy one (`synchronous=NORMAL`: the outcome of an execution) skips its own fsync and
        becomes durable with the next durable commit or checkpoint, as WAL frames are synced in
        order. Power loss may take it back: the operation is then `in_flight` again, its lease
        runs out and it is reconciled like any crashed execution, never executed twice. A
        process crash loses nothing. docs/performance.md, "The embedded path".
        """
        with self._engine.connect() as conn:
            # SQLite refuses to change the safety level inside a transaction, so it is set on
            # the driver's connection before SQLAlchemy begins one.
            driver = conn.connection.dbapi_connection
            assert driver is not None
            driver.cursor().execute(_DURABLE if durable else _LAZY)
            with conn.begin():
                return write(conn)


def _claim(conn: Connection, row: dict[str, Any]) -> Claim | None:
    """Insert `row` with its first execution attempt; else the row holding the key, read in the
    same transaction (so it cannot be pruned in between, as on PostgreSQL)."""
    operation_id: int | None = conn.execute(_CLAIM, row).scalar()
    if operation_id is None:
        existing = _fetch(conn, row["scope"], row["key"])
        return None if existing is None else Claim(existing, created=False)
    created = OperationRecord(id=operation_id, **row)
    _start_execution(conn, created)
    return Claim(created, created=True)


def _fetch(conn: Connection, scope: str, key: str) -> OperationRecord | None:
    row = conn.execute(FETCH, {"scope": scope, "key": key}).mappings().first()
    return None if row is None else OperationRecord.from_row(row)


def _change(conn: Connection, change: Change) -> OperationRecord | None:
    current = change.current
    statement = compare_and_set_statement(tuple(change.values), fenced=change.owner is not None)
    params = compare_and_set_params(current, change.values, change.now, change.owner)
    row = conn.execute(statement, params).mappings().first()
    changed = None if row is None else OperationRecord.from_row(row)
    if change.closes is not None:
        _close_execution(conn, current, change.closes, landed=changed is not None)
    if change.opens and changed is not None:
        _start_execution(conn, changed)
    return changed


def _start_execution(conn: Connection, operation: OperationRecord) -> None:
    """Open the execution attempt of `operation`'s current execution, for its lease owner."""
    conn.execute(
        _START_EXECUTION,
        {
            "operation_id": operation.id,
            "kind": AttemptKind.EXECUTION.value,
            "execution": operation.executions,
            "owner": operation.lease_owner,
            "fingerprint": operation.fingerprint,
            "outcome": Status.IN_FLIGHT.value,
            "started_at": operation.last_sent_at,
        },
    )


def _close_execution(
    conn: Connection, operation: OperationRecord, closed: ClosedExecution, *, landed: bool
) -> None:
    """Record how the owner's execution attempt ended: its label if the change landed."""
    params = close_execution_params(operation, closed)
    if not landed:
        params["closes_label"] = FENCED
    conn.execute(_CLOSE_EXECUTION, params)
