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

from sqlalchemy import Table, Update, bindparam, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ledger._models import Attempt, Operation
from ledger._records import OperationRecord

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


@cache
def compare_and_set_statement(names: tuple[str, ...], *, fenced: bool) -> Update:
    """`UPDATE … SET version, updated_at, <names> WHERE id AND version [AND lease_owner]
    RETURNING *`, built once per shape: on SQLite, building a statement costs more than running
    it. Its parameters come from `compare_and_set_params`; no row comes back if it moved on."""
    conditions = [
        operations.c.id == bindparam("current_id"),
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
        .returning(operations)
    )


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
