"""How the guard's ledger writes reach the database: each one atomic, whatever the backend.

A guarded call writes an operation row and an attempt row together, twice: the intent (claim)
and the outcome (change). `Ledger` decides *what* to write (the state machine, the values);
a writer decides *how*, atomically and in one call into the driver: `ledger._sqlite_writer` runs
each write as one transaction in a thread of its own, `ledger._pg_writer` as one statement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, Protocol, cast

from sqlalchemy import ColumnElement, Table, Update, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger._models import Attempt, Operation
from ledger._records import AttemptKind, OperationRecord

operations = cast(Table, Operation.__table__)
attempts = cast(Table, Attempt.__table__)

FENCED = "fenced"
"""An execution attempt's outcome when its owner had lost the lease before recording."""

ATTEMPT_VALUES = ("code", "envelope", "evidence")
"""What a closed execution attempt records of how it ended."""


@dataclass(frozen=True, slots=True)
class ClosedExecution:
    """The owner's execution attempt that a change closes, and what it records there."""

    owner: str
    label: str  # the attempt's outcome if the change lands; `FENCED` if it does not
    values: dict[str, str | None]  # ATTEMPT_VALUES
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

    async def claim(self, row: dict[str, Any]) -> int | OperationRecord | None:
        """Insert `row` as a new operation with its first execution attempt: the new id. When
        `(scope, key)` is taken: the row holding it if the writer read it in the same call, else
        None (the ledger reads it)."""

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


# The statements below name their parameters alike, so that the PostgreSQL writer can join them
# into one statement. A parameter two parts of one statement share is one object: one placeholder.
CURRENT_ID = bindparam("current_id", type_=operations.c.id.type)

FETCH = select(operations).where(
    operations.c.scope == bindparam("scope"), operations.c.key == bindparam("key")
)


def compare_and_set_update(names: tuple[str, ...], *, fenced: bool) -> Update:
    """`UPDATE … SET version, updated_at, <names> WHERE id AND version [AND lease_owner]`, with
    the parameters of `compare_and_set_params`; the caller chooses what it returns."""
    conditions = [
        operations.c.id == CURRENT_ID,
        operations.c.version == bindparam("current_version"),
    ]
    if fenced:
        conditions.append(operations.c.lease_owner == bindparam("current_owner"))
    return (
        update(operations)
        .where(*conditions)
        .values(
            version=bindparam("new_version"),
            updated_at=bindparam("new_updated_at", type_=operations.c.updated_at.type),
            **{name: bindparam(f"new_{name}", type_=operations.c[name].type) for name in names},
        )
    )


@cache
def compare_and_set_statement(names: tuple[str, ...], *, fenced: bool) -> Update:
    """The compare-and-set returning the new row (none if the row moved on), built once per
    shape: building a statement costs SQLAlchemy more than SQLite takes to run it."""
    return compare_and_set_update(names, fenced=fenced).returning(operations)


def compare_and_set_params(
    current: OperationRecord, values: Mapping[str, Any], now: datetime, owner: str | None
) -> dict[str, Any]:
    params = {
        "current_id": current.id,
        "current_version": current.version,
        "new_version": current.version + 1,
        "new_updated_at": now,
        **{f"new_{name}": value for name, value in values.items()},
    }
    if owner is not None:
        params["current_owner"] = owner
    return params


def close_execution_update(outcome: ColumnElement[str]) -> Update:
    """Close the owner's execution attempt of operation `CURRENT_ID` with `outcome`, and the
    parameters of `close_execution_params`."""
    return (
        update(attempts)
        .where(
            attempts.c.operation_id == CURRENT_ID,
            attempts.c.kind == AttemptKind.EXECUTION.value,
            attempts.c.execution == bindparam("closes_execution"),
            attempts.c.owner == bindparam("closes_owner"),
        )
        .values(
            outcome=outcome,
            finished_at=bindparam("closes_finished_at", type_=attempts.c.finished_at.type),
            **{
                name: bindparam(f"closes_{name}", type_=attempts.c[name].type)
                for name in ATTEMPT_VALUES
            },
        )
    )


def close_execution_params(current: OperationRecord, closed: ClosedExecution) -> dict[str, Any]:
    """`closes_label` is the label the attempt gets if the change lands."""
    return {
        "current_id": current.id,
        "closes_execution": current.executions,
        "closes_owner": closed.owner,
        "closes_label": closed.label,
        "closes_finished_at": closed.finished_at,
        **{f"closes_{name}": closed.values[name] for name in ATTEMPT_VALUES},
    }


async def compare_and_set(
    conn: AsyncConnection,
    current: OperationRecord,
    values: dict[str, Any],
    now: datetime,
    *,
    owner: str | None = None,
) -> OperationRecord | None:
    """The compare-and-set inside a transaction of the caller's: the new row, or None."""
    statement = compare_and_set_statement(tuple(values), fenced=owner is not None)
    params = compare_and_set_params(current, values, now, owner)
    row = (await conn.execute(statement, params)).mappings().first()
    return None if row is None else OperationRecord.from_row(row)
