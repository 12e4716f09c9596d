"""How the guard's ledger writes reach the database: each one atomic, whatever the backend.

A guarded call writes an operation row and an attempt row together, twice: the intent (claim)
and the outcome (change). `Ledger` decides *what* to write (the state machine, the values);
a writer decides *how*, atomically. `TransactionWriter` runs each write as a SQLAlchemy
transaction of several statements (the embedded SQLite default, where a statement is an
in-process call); PostgreSQL gets the one-statement writer in `ledger._pg_writer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import Table, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger._engine import is_sqlite
from ledger._models import Attempt, Operation
from ledger._records import AttemptKind, OperationRecord
from ledger._states import Status

operations = cast(Table, Operation.__table__)
attempts = cast(Table, Attempt.__table__)

FENCED = "fenced"
"""An execution attempt's outcome when its owner had lost the lease before recording."""


@dataclass(frozen=True, slots=True)
class ClosedExecution:
    """The owner's execution attempt that a change closes, and what it records there."""

    owner: str
    label: str  # the attempt's outcome if the change lands; `FENCED` if it does not
    values: dict[str, str | None]  # code, envelope, evidence
    finished_at: datetime


@dataclass(frozen=True, slots=True)
class Change:
    """A compare-and-set on one operation and the execution attempts it closes or opens.

    The change lands only on the `version` it was read with (and the lease `owner`, if given).
    `closes` is recorded either way: it is the owner's own evidence. `opens` starts the next
    execution attempt, only when the change lands.
    """

    current: OperationRecord
    values: dict[str, Any]
    now: datetime
    owner: str | None = None
    closes: ClosedExecution | None = None
    opens: bool = False

    def landed(self) -> OperationRecord:
        """The operation as this change leaves it, once it has landed."""
        return self.current.with_values(
            version=self.current.version + 1, updated_at=self.now, **self.values
        )


class Writer(Protocol):
    """The guard's hot ledger writes; each is atomic."""

    async def claim(self, row: dict[str, Any]) -> int | None:
        """Insert `row` as a new operation with its first execution attempt: the new id, or None
        when `(scope, key)` is taken."""

    async def fetch(self, scope: str, key: str) -> OperationRecord | None:
        """The operation holding `(scope, key)`, if any."""

    async def change(self, change: Change) -> bool:
        """Apply `change`; False when another actor changed the row first."""

    async def renew(self, leases: Mapping[int, str], until: datetime) -> set[int]:
        """Extend the `in_flight` leases `{operation id: owner}`; the ids whose owner still holds
        theirs. Owner tokens are random per guarded call, so `id IN … AND owner IN …` matches only
        the given pairs."""

    async def close(self) -> None:
        """Release what the writer holds beyond the engine."""

    def forget_loop(self) -> None:
        """Drop connections of the event loop the process has left (see `Ledger.forget_loop`)."""


class TransactionWriter:
    """Each write as one SQLAlchemy transaction of a few statements."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._insert: Any = sqlite.insert if is_sqlite(engine) else postgresql.insert

    async def claim(self, row: dict[str, Any]) -> int | None:
        statement = (
            self._insert(operations)
            .values(**row)
            .on_conflict_do_nothing(index_elements=["scope", "key"])
            .returning(operations.c.id)
        )
        async with self.engine.begin() as conn:
            operation_id: int | None = (await conn.execute(statement)).scalar()
            if operation_id is None:
                return None
            await start_execution(conn, OperationRecord(id=operation_id, **row))
        return operation_id

    async def fetch(self, scope: str, key: str) -> OperationRecord | None:
        async with self.engine.connect() as conn:
            return await fetch(conn, scope, key)

    async def change(self, change: Change) -> bool:
        async with self.engine.begin() as conn:
            row = await compare_and_set(
                conn, change.current, change.values, change.now, owner=change.owner
            )
            if change.closes is not None:
                await _close_execution(conn, change.current, change.closes, landed=row is not None)
            if change.opens and row is not None:
                await start_execution(conn, row)
        return row is not None

    async def renew(self, leases: Mapping[int, str], until: datetime) -> set[int]:
        statement = (
            update(operations)
            .where(
                operations.c.id.in_(list(leases)),
                operations.c.status == Status.IN_FLIGHT.value,
                operations.c.lease_owner.in_(list(leases.values())),
            )
            .values(lease_expires_at=until)
            .returning(operations.c.id)
        )
        async with self.engine.begin() as conn:
            return set((await conn.execute(statement)).scalars())

    async def close(self) -> None:
        """Nothing beyond the engine, which the ledger disposes of."""

    def forget_loop(self) -> None:
        """Nothing beyond the engine, which the ledger replaces."""


async def fetch(conn: AsyncConnection, scope: str, key: str) -> OperationRecord | None:
    query = select(operations).where(operations.c.scope == scope, operations.c.key == key)
    row = (await conn.execute(query)).mappings().first()
    return None if row is None else OperationRecord.from_row(row)


async def start_execution(conn: AsyncConnection, operation: OperationRecord) -> None:
    """Open the execution attempt of `operation`'s current execution, for its lease owner."""
    await conn.execute(
        insert(attempts).values(
            operation_id=operation.id,
            kind=AttemptKind.EXECUTION.value,
            execution=operation.executions,
            owner=operation.lease_owner,
            fingerprint=operation.fingerprint,
            outcome=Status.IN_FLIGHT.value,
            started_at=operation.last_sent_at,
        )
    )


async def _close_execution(
    conn: AsyncConnection, operation: OperationRecord, closed: ClosedExecution, *, landed: bool
) -> None:
    await conn.execute(
        update(attempts)
        .where(
            attempts.c.operation_id == operation.id,
            attempts.c.kind == AttemptKind.EXECUTION.value,
            attempts.c.execution == operation.executions,
            attempts.c.owner == closed.owner,
        )
        .values(
            outcome=closed.label if landed else FENCED,
            finished_at=closed.finished_at,
            **closed.values,
        )
    )


async def compare_and_set(
    conn: AsyncConnection,
    current: OperationRecord,
    values: dict[str, Any],
    now: datetime,
    *,
    owner: str | None = None,
) -> OperationRecord | None:
    """`UPDATE … WHERE id AND version [AND lease_owner]`; the new row, or None if it moved on."""
    conditions = [operations.c.id == current.id, operations.c.version == current.version]
    if owner is not None:
        conditions.append(operations.c.lease_owner == owner)
    statement = (
        update(operations)
        .where(*conditions)
        .values(version=current.version + 1, updated_at=now, **values)
        .returning(operations)
    )
    row = (await conn.execute(statement)).mappings().first()
    return None if row is None else OperationRecord.from_row(row)
