"""How the guard's ledger writes reach the database: each one atomic, whatever the backend.

A guarded call writes an operation row and an attempt row together, twice: the intent (claim)
and the outcome (change). `Ledger` decides *what* to write (the state machine, the values);
a writer decides *how*, atomically and in one call into the driver: `ledger._sqlite_writer` runs
each write as one transaction in a thread of its own, `ledger._pg_writer` as one statement.
A time given as a `StoreTime` is written as the database's own `now()` (plus its offset). A write
returns only what the database decided itself (the new id, the times it took from its clock):
the writer has every other value already, so the row it answers with is built from those
(`inserted`, `Change.landed`) instead of being sent back whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, Protocol, cast

from sqlalchemy import (
    Column,
    ColumnElement,
    Interval,
    Table,
    Update,
    bindparam,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from writesafe.ledger._clock import StoreTime
from writesafe.ledger._models import Attempt, Operation, UTCDateTime
from writesafe.ledger._records import AttemptKind, OperationRecord
from writesafe.ledger._states import Status

operations = cast(Table, Operation.__table__)
attempts = cast(Table, Attempt.__table__)

FENCED = "fenced"
"""An execution attempt's outcome when its owner had lost the lease before recording."""

UNSETTLED_EXECUTION = (Status.IN_FLIGHT.value, Status.OUTCOME_UNKNOWN.value, FENCED)
"""An execution attempt's outcomes while nobody knows yet whether it had an effect."""

ATTEMPT_VALUES = ("code", "envelope", "evidence")
"""What a closed execution attempt records of how it ended."""

Moment = datetime | StoreTime
"""A time a write records: a value, or the store's own clock at the write."""


@dataclass(frozen=True, slots=True)
class Claim:
    """The row after a claim; `created` is True when this caller's intent became the operation."""

    operation: OperationRecord
    created: bool


@dataclass(frozen=True, slots=True)
class ClosedExecution:
    """The owner's execution attempt that a change closes, and what it records there."""

    owner: str
    label: str  # the attempt's outcome if the change lands; `FENCED` if it does not
    values: dict[str, str | None]  # ATTEMPT_VALUES
    finished_at: Moment


def returned_names(store_times: frozenset[str]) -> tuple[str, ...]:
    """What a hot write's statement returns: the row's id (for a change, a row returned says it
    landed) and the columns it wrote from the store's clock."""
    return ("id", *sorted(store_times))


def operation_columns(*names: str) -> list[Column[Any]]:
    """The operations columns named, each once, in table order (for a `RETURNING`)."""
    return [column for column in operations.columns if column.name in names]


def inserted(row: Mapping[str, Any], returned: Mapping[str, Any]) -> OperationRecord:
    """The operation a claim inserted: `row`, with the columns the store wrote (`returned`)."""
    return OperationRecord.from_row({**row, **returned})


@dataclass(frozen=True, slots=True)
class Change:
    """A compare-and-set on one operation that either closes its owner's execution attempt or
    opens the next one.

    The change lands only on the `version` it was read with. With `closes` it records how the
    execution ended: it lands only while the execution's owner still holds the lease, and the
    attempt is closed either way (it is the owner's own evidence). Without, it is the intent of
    the next execution, whose attempt it opens if it lands.

    Every change sets the lease (`lease_expires_at`): a renewal moves it without a new version,
    so it is the one column the version match does not prove is still as `current` holds it.
    """

    current: OperationRecord
    values: dict[str, Any]
    now: Moment
    closes: ClosedExecution | None = None

    def __post_init__(self) -> None:
        if "lease_expires_at" not in self.values:
            raise ValueError("a change sets the lease: a renewal may have moved it")

    @property
    def opens(self) -> bool:
        return self.closes is None

    @property
    def owner(self) -> str | None:
        """The lease owner the change is fenced by."""
        return None if self.closes is None else self.closes.owner

    @property
    def store_times(self) -> frozenset[str]:
        """The columns this change sets from the store's clock (`updated_at` with `now`)."""
        return store_time_names({**self.values, "updated_at": self.now})

    def landed(self, returned: dict[str, Any]) -> OperationRecord:
        """The operation as this change left it, from `current`, the change's values and what
        its statement `returned`. The version match proves the columns the change does not set
        are still as `current` holds them."""
        return self.current.with_values(
            **(
                {"version": self.current.version + 1, "updated_at": self.now}
                | self.values
                | returned
            )
        )


class Writer(Protocol):
    """The guard's hot ledger writes; each is atomic. What differs between the backends beyond
    them, the writer answers too: `Ledger` asks it, never which backend it is."""

    @property
    def file(self) -> Path | None:
        """The database's file, absolute (`_engine.sqlite_file`); None for a server's."""

    @property
    def in_process(self) -> bool:
        """The database runs inside this process (SQLite): a statement is a call, not a round
        trip, so a read needs no event loop (`peek`), batching statements saves nothing, and a
        connection is no socket of an event loop (it closes from any loop). PostgreSQL: False."""

    @property
    def shared_clock(self) -> bool:
        """The store has a clock every process shares (PostgreSQL's `now()`), on which leases
        are judged. SQLite has none: a lease is judged by watching it (`ledger._lease_watch`)."""

    def hours(self, column: ColumnElement[datetime]) -> ColumnElement[Any]:
        """`column`'s time as whole hours since the epoch, whatever the session's time zone."""

    def serve_blocking_callers(self, alone: Callable[[], bool]) -> None:
        """The event loop serves callers that block on it anyway, `alone()` while it serves one
        (`Ledger.serve_blocking_callers`): a writer may then write on the loop's thread."""

    def serve_async_callers(self, alone: Callable[[], bool]) -> None:
        """The guard's event loop runs `alone()` one guarded call (`Ledger.serve_async_callers`):
        a writer may then commit the call's intent on the loop's thread, where that is brief."""

    async def claim(self, row: dict[str, Any]) -> Claim | None:
        """Insert `row` as a new operation with its first execution attempt. When `(scope, key)`
        is taken: the row holding it if the writer read it in the same call, else None (the
        ledger reads it)."""

    async def fetch(self, scope: str, key: str) -> OperationRecord | None:
        """The operation holding `(scope, key)`, if any."""

    def peek(self, scope: str, key: str) -> OperationRecord | None:
        """The operation holding `(scope, key)` as last committed, if the writer can read it on
        the calling thread, any thread, without waiting on I/O (SQLite's local read); None when
        there is none or the writer cannot tell so (PostgreSQL: a read is a round trip)."""

    async def change(self, change: Change) -> OperationRecord | None:
        """Apply `change`: the row it made; None when another actor changed the row first."""

    async def renew(self, leases: Mapping[int, str], until: Moment) -> set[int]:
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


def moment_value(column: Column[Any], param: str, *, store_time: bool) -> ColumnElement[Any]:
    """What a statement writes into `column` from parameter `param`: the value, or (a
    `StoreTime`'s offset) the store's `now()` plus that interval."""
    if store_time:
        return func.now() + bindparam(param, type_=Interval())
    return bindparam(param, type_=column.type)


MOMENT_COLUMNS = tuple(
    column.name for column in operations.columns if isinstance(column.type, UTCDateTime)
)
"""The operation's columns that hold a time: the only ones a `StoreTime` is written to. A write
has up to twenty values and five of them are times, so the functions below look at these alone."""


def store_time_names(values: Mapping[str, Any]) -> frozenset[str]:
    """The names of `values` (the operation's columns) that are `StoreTime`s: a statement
    writes them as `now()`."""
    return frozenset([name for name in MOMENT_COLUMNS if isinstance(values.get(name), StoreTime)])


def param_value(value: Any) -> Any:
    """A value as its statement parameter: a `StoreTime` is sent as its offset."""
    return value.interval if isinstance(value, StoreTime) else value


def param_values(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`param_value` of each of `values` (the operation's columns), named `prefix` + its name."""
    params = {prefix + name: value for name, value in values.items()} if prefix else dict(values)
    for name in store_time_names(values):
        params[prefix + name] = values[name].interval
    return params


def compare_and_set_update(
    names: tuple[str, ...], *, fenced: bool, store_times: frozenset[str] = frozenset()
) -> Update:
    """`UPDATE … SET version, updated_at, <names> WHERE id AND version [AND lease_owner]`, with
    the parameters of `compare_and_set_params`; the caller chooses what it returns. The
    `store_times` columns are written from the store's clock."""
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
            **{
                name: moment_value(
                    operations.c[name], f"new_{name}", store_time=name in store_times
                )
                for name in ("updated_at", *names)
            },
        )
    )


@cache
def compare_and_set_statement(names: tuple[str, ...], *, fenced: bool) -> Update:
    """The compare-and-set returning the new row (none if the row moved on), built once per
    shape: building a statement costs SQLAlchemy more than SQLite takes to run it."""
    return compare_and_set_update(names, fenced=fenced).returning(operations)


def compare_and_set_params(
    current: OperationRecord, values: Mapping[str, Any], now: Moment, owner: str | None
) -> dict[str, Any]:
    params = {
        "current_id": current.id,
        "current_version": current.version,
        "new_version": current.version + 1,
        "new_updated_at": param_value(now),
        **param_values(values, "new_"),
    }
    if owner is not None:
        params["current_owner"] = owner
    return params


def close_execution_update(outcome: ColumnElement[str], *, store_time: bool = False) -> Update:
    """Close the owner's execution attempt of operation `CURRENT_ID` with `outcome`, and the
    parameters of `close_execution_params` (`store_time`: its end is the store's clock). An
    attempt a lookup or an operator has since settled (`succeeded`, `failed`) keeps that: a
    late report of its fenced-off owner does not undo what was established."""
    return (
        update(attempts)
        .where(
            attempts.c.operation_id == CURRENT_ID,
            attempts.c.kind == AttemptKind.EXECUTION.value,
            attempts.c.execution == bindparam("closes_execution"),
            attempts.c.owner == bindparam("closes_owner"),
            # Inline constants: the writers compile this statement once, without expanding IN.
            attempts.c.outcome.in_([literal_column(f"'{name}'") for name in UNSETTLED_EXECUTION]),
        )
        .values(
            outcome=outcome,
            finished_at=moment_value(
                attempts.c.finished_at, "closes_finished_at", store_time=store_time
            ),
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
        "closes_finished_at": param_value(closed.finished_at),
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
