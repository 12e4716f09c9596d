"""PostgreSQL's hot path: each write of a guarded call as one statement, straight on asyncpg.

Through SQLAlchemy's async connection layer a guard write (an operation row and an attempt row)
is BEGIN, two statements and COMMIT: four round trips and about a millisecond of client CPU.
Here each write is one data-modifying CTE, atomic because it is one statement, compiled once by
SQLAlchemy from the same table definitions and run in autocommit on connections of its own
(`ledger._pg_connections`): one round trip. Times given as `StoreTime` are the server's own
`now()`, so that leases and settle windows are judged on one clock whatever the clients' clocks
say; a statement returns those and the row's id, not the row (whose other values the writer sent:
`ledger._writer`). A claim of a key that is taken returns the row holding it in the same
statement, so a replay without Redis is one round trip too. Driver errors are raised as
SQLAlchemy's, like every other ledger error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import (
    CTE,
    BindParameter,
    ClauseElement,
    ColumnElement,
    CompoundSelect,
    Select,
    any_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    insert,
    null,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.sql.compiler import SQLCompiler

from writesafe.ledger._clock import StoreTime
from writesafe.ledger._engine import ConnectionBudget, schema_map
from writesafe.ledger._pg_connections import ConnectionPool
from writesafe.ledger._records import AttemptKind, OperationRecord
from writesafe.ledger._states import Status
from writesafe.ledger._writer import (
    FENCED,
    FETCH,
    Change,
    Claim,
    Moment,
    attempts,
    close_execution_params,
    close_execution_update,
    compare_and_set_params,
    compare_and_set_update,
    inserted,
    moment_value,
    operation_columns,
    operations,
    param_value,
    param_values,
    returned_names,
    store_time_names,
)

T = TypeVar("T")

_DIALECT = PGDialect_asyncpg()  # type: ignore[no-untyped-call]

# What asyncpg raises besides integrity violations: the server's errors and the client's own.
_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)

# The kind of the execution attempt a statement opens: a parameter with its value fixed.
_EXECUTION_KIND: BindParameter[str] = bindparam("execution_kind", AttemptKind.EXECUTION.value)


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement compiled for asyncpg: its SQL, and its `$n` parameters' values in order."""

    sql: str
    fixed: Mapping[str, Any]  # parameters whose value the statement carries itself
    pick: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # the `$n` values, in order

    @classmethod
    def of(cls, statement: ClauseElement, schema: str | None) -> _Compiled:
        # The schema is written into the statement: a `search_path` set when the connection
        # starts is refused or dropped by a pooler (`ledger._engine`).
        translate = schema_map(schema)
        compiled = statement.compile(
            dialect=_DIALECT,
            schema_translate_map=translate,
            render_schema_translate=translate is not None,
        )
        assert isinstance(compiled, SQLCompiler)
        assert compiled.positiontup is not None
        names = tuple(compiled.positiontup)
        values = {name: compiled.binds[name].value for name in names}
        fixed = {name: value for name, value in values.items() if value is not None}

        def few(params: Mapping[str, Any]) -> tuple[Any, ...]:  # itemgetter of one: no tuple
            return tuple(params[name] for name in names)

        # One C call picks every value of a statement (it has up to thirty).
        return cls(str(compiled), fixed, itemgetter(*names) if len(names) > 1 else few)

    def arguments(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        """The `$n` values: from `params`, else the statement's own."""
        return self.pick({**self.fixed, **params} if self.fixed else params)


class PostgresWriter:
    """The `Writer` for PostgreSQL: one round trip per write."""

    def __init__(
        self, connect: Mapping[str, Any], schema: str | None, budget: ConnectionBudget
    ) -> None:
        self._connect, self._schema, self._budget = connect, schema, budget
        self._pool = self._new_pool()
        self._statements: dict[tuple[Any, ...], _Compiled] = {}

    async def claim(self, row: dict[str, Any]) -> Claim | None:
        names = tuple(row)
        store_times = store_time_names(row)
        shape = ("claim", names, store_times)
        statement = self._compiled(shape, lambda: _claim(names, store_times))
        params = param_values(row)
        returned = await self._run(statement, params, asyncpg.Connection.fetchrow)
        if returned is None:
            # The row holding the key was committed after this statement's snapshot (the insert
            # waited for it), or deleted since: the ledger reads it, or claims the key anew.
            return None
        if returned[_CREATED]:
            written = {name: returned[name] for name in returned_names(store_times)}
            return Claim(inserted(row, written), created=True)
        return Claim(OperationRecord.from_row(returned), created=False)

    async def fetch(self, scope: str, key: str) -> OperationRecord | None:
        statement = self._compiled(("fetch",), lambda: FETCH)
        row = await self._run(statement, {"scope": scope, "key": key}, asyncpg.Connection.fetchrow)
        return None if row is None else OperationRecord.from_row(row)

    def peek(self, scope: str, key: str) -> OperationRecord | None:
        return None  # every read is a round trip: the claim reads the row it conflicts with

    @property
    def file(self) -> None:
        return None  # a server's

    in_process = False
    shared_clock = True

    def hours(self, column: ColumnElement[datetime]) -> ColumnElement[Any]:
        return func.floor(func.extract("epoch", column) / 3600)  # PostgreSQL's epoch is fractional

    def serve_blocking_callers(self, alone: Callable[[], bool]) -> None:
        """Nothing to do: each write is a round trip on the loop already."""

    def serve_async_callers(self, alone: Callable[[], bool]) -> None:
        """Nothing to do: each write is a round trip on the loop already."""

    async def change(self, change: Change) -> OperationRecord | None:
        closes = change.closes
        shape = _ChangeShape(
            names=tuple(change.values),
            closes=closes is not None,
            store_times=change.store_times,
            closed_at_store_time=closes is not None and isinstance(closes.finished_at, StoreTime),
        )
        statement = self._compiled(("change", shape), lambda: _change(shape))
        params = compare_and_set_params(change.current, change.values, change.now, change.owner)
        if closes is not None:
            params |= close_execution_params(change.current, closes)
        returned = await self._run(statement, params, asyncpg.Connection.fetchrow)
        if returned is None:
            return None
        return change.landed({name: returned[name] for name in shape.returns})

    async def renew(self, leases: Mapping[int, str], until: Moment) -> set[int]:
        store_time = isinstance(until, StoreTime)
        statement = self._compiled(("renew", store_time), lambda: _renew(store_time=store_time))
        params = {"ids": list(leases), "owners": list(leases.values()), "until": param_value(until)}
        rows = await self._run(statement, params, asyncpg.Connection.fetch)
        return {row["id"] for row in rows}

    async def close(self) -> None:
        await self._pool.close()

    def forget_loop(self) -> None:
        # asyncpg connections cannot be closed, or used, from another event loop.
        self._pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool:
        budget = self._budget
        return ConnectionPool(
            self._connect, budget.writer_size, budget.idle_seconds, budget.wait_seconds
        )

    def _compiled(self, shape: tuple[Any, ...], build: Callable[[], ClauseElement]) -> _Compiled:
        compiled = self._statements.get(shape)
        if compiled is None:
            compiled = self._statements[shape] = _Compiled.of(build(), self._schema)
        return compiled

    async def _run(
        self, statement: _Compiled, params: Mapping[str, Any], fetch: Callable[..., Awaitable[T]]
    ) -> T:
        """Run `statement` on a pooled connection, raising driver errors as SQLAlchemy's (those
        of opening a connection too: a refused or exhausted server is a ledger outage)."""
        pool = self._pool  # the connection goes back to its own pool, even after `forget_loop`
        try:
            connection = await pool.acquire()
            try:
                result = await fetch(connection, statement.sql, *statement.arguments(params))
            except BaseException as error:
                timed_out = pool.discard(connection, error)
                if timed_out is None:
                    raise
                raise timed_out from error
        except asyncpg.IntegrityConstraintViolationError as error:
            raise IntegrityError(statement.sql, None, error) from error
        except _DRIVER_ERRORS as error:
            raise OperationalError(statement.sql, None, error) from error
        pool.release(connection)
        return result


@dataclass(frozen=True, slots=True)
class _ChangeShape:
    """What a change's statement is built from; one statement is compiled per shape."""

    names: tuple[str, ...]
    closes: bool  # else it opens the next execution
    store_times: frozenset[str]
    closed_at_store_time: bool

    @property
    def returns(self) -> tuple[str, ...]:
        return returned_names(self.store_times)


# The claim's first column: whether the row it answers with is the one it inserted.
_CREATED = "claim_created"


def _claim(names: tuple[str, ...], store_times: frozenset[str]) -> CompoundSelect[Any]:
    """Insert the operation and its first execution attempt, or read the row holding the key.

    Both halves are one statement, so a replay without Redis is one round trip. The read sees
    the statement's snapshot (READ COMMITTED takes it as the statement starts): a row committed
    by a concurrent claim after that, which the insert waited for and then conflicted with, is
    not in it, and the statement returns no row at all (the ledger then reads it apart), never
    a wrong one. The inserted half returns the id and the store's times, NULL for the columns
    the writer sent itself (`inserted`).
    """
    values = {
        name: moment_value(operations.c[name], name, store_time=name in store_times)
        for name in names
    }
    returns = returned_names(store_times)
    claimed = (
        pg_insert(operations)
        .values(values)
        .on_conflict_do_nothing(index_elements=["scope", "key"])
        .returning(*operation_columns(*returns, *_OPENED_FROM.values()))
        .cte("claimed")
    )
    created = select(
        true().label(_CREATED),
        *(
            claimed.c[column.name]
            if column.name in returns
            else cast(null(), column.type).label(column.name)
            for column in operations.columns
        ),
    )
    held = select(false(), *operations.columns).where(
        operations.c.scope == values["scope"],
        operations.c.key == values["key"],
        ~exists(select(claimed.c.id)),
    )
    return union_all(created, held).add_cte(_open_execution(claimed))


def _change(shape: _ChangeShape) -> Select[Any]:
    returns = shape.returns
    cas = compare_and_set_update(shape.names, fenced=shape.closes, store_times=shape.store_times)
    if not shape.closes:
        changed = cas.returning(*operation_columns(*returns, *_OPENED_FROM.values())).cte("changed")
        return select(*(changed.c[name] for name in returns)).add_cte(_open_execution(changed))
    changed = cas.returning(*operation_columns(*returns)).cte("changed")
    closed = _close_execution(changed, store_time=shape.closed_at_store_time)
    # Only a change that opens an execution is an intent; an outcome commits without waiting for
    # its WAL flush (`synchronous_commit` off for this transaction alone). A server crash may
    # take it back: the operation is then `in_flight` again, its lease runs out and it is
    # reconciled like any crashed execution, never executed twice (docs/operations.md).
    lazy = func.set_config("synchronous_commit", "off", True).label("lazy_commit")
    return select(*(changed.c[name] for name in returns), lazy).add_cte(closed)


# An opened execution attempt's columns taken from the operation row its statement wrote.
_OPENED_FROM = {
    "operation_id": "id",
    "execution": "executions",
    "owner": "lease_owner",
    "fingerprint": "fingerprint",
    "outcome": "status",
    "started_at": "last_sent_at",
}


def _open_execution(row: CTE) -> CTE:
    """The next execution attempt of `row` (none if `row` is empty: the write did not land)."""
    source = select(_EXECUTION_KIND, *(row.c[name] for name in _OPENED_FROM.values()))
    return insert(attempts).from_select(["kind", *_OPENED_FROM], source).cte("opened")


def _close_execution(changed: CTE, *, store_time: bool) -> CTE:
    """The owner's execution attempt, labelled `fenced` when the change did not land."""
    landed = exists(select(changed.c.id))
    label = bindparam("closes_label", type_=attempts.c.outcome.type)
    outcome = case((landed, label), else_=FENCED)
    return close_execution_update(outcome, store_time=store_time).cte("closed")


def _renew(*, store_time: bool) -> ClauseElement:
    ids = bindparam("ids", type_=ARRAY(operations.c.id.type))
    owners = bindparam("owners", type_=ARRAY(operations.c.lease_owner.type))
    return (
        update(operations)
        .where(
            operations.c.id == any_(ids),
            operations.c.status == Status.IN_FLIGHT.value,
            operations.c.lease_owner == any_(owners),
        )
        .values(
            lease_expires_at=moment_value(
                operations.c.lease_expires_at, "until", store_time=store_time
            )
        )
        .returning(operations.c.id)
    )
