"""PostgreSQL's hot path: each write of a guarded call as one statement, straight on asyncpg.

Through SQLAlchemy's async connection layer a guard write (an operation row and an attempt row)
is BEGIN, two statements and COMMIT: four round trips and about a millisecond of client CPU.
Here each write is one data-modifying CTE, atomic because it is one statement, compiled once by
SQLAlchemy from the same table definitions and run in autocommit on connections of its own
(`ledger._pg_connections`): one round trip. Driver errors are raised as SQLAlchemy's, like every
other ledger error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import (
    CTE,
    BindParameter,
    ClauseElement,
    Select,
    any_,
    bindparam,
    case,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.sql.compiler import SQLCompiler

from ledger._pg_connections import ConnectionPool
from ledger._records import AttemptKind, OperationRecord
from ledger._states import Status
from ledger._writer import (
    FENCED,
    FETCH,
    Change,
    attempts,
    close_execution_params,
    close_execution_update,
    compare_and_set_params,
    compare_and_set_update,
    operations,
)

T = TypeVar("T")

_DIALECT = PGDialect_asyncpg()  # type: ignore[no-untyped-call]

# What asyncpg raises besides integrity violations: the server's errors and the client's own.
_DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)

# The kind of the execution attempt a statement opens: a parameter with its value fixed.
_EXECUTION_KIND: BindParameter[str] = bindparam("execution_kind", AttemptKind.EXECUTION.value)


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A statement compiled for asyncpg: its SQL and the order of its `$n` parameters."""

    sql: str
    names: tuple[str, ...]
    fixed: Mapping[str, Any]  # parameters whose value the statement carries itself

    @classmethod
    def of(cls, statement: ClauseElement) -> _Compiled:
        compiled = statement.compile(dialect=_DIALECT)
        assert isinstance(compiled, SQLCompiler)
        assert compiled.positiontup is not None
        names = tuple(compiled.positiontup)
        values = {name: compiled.binds[name].value for name in names}
        fixed = {name: value for name, value in values.items() if value is not None}
        return cls(str(compiled), names, fixed)

    def arguments(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] if name in params else self.fixed[name] for name in self.names]


class PostgresWriter:
    """The `Writer` for PostgreSQL: one round trip per write."""

    def __init__(self, connect: Mapping[str, Any], pool_size: int) -> None:
        self._connect, self._pool_size = connect, pool_size
        self._pool = ConnectionPool(connect, pool_size)
        self._statements: dict[tuple[Any, ...], _Compiled] = {}

    async def claim(self, row: dict[str, Any]) -> int | None:
        names = tuple(row)
        statement = self._compiled(("claim", names), lambda: _claim(names))
        operation_id: int | None = await self._value(statement, row)
        return operation_id

    async def fetch(self, scope: str, key: str) -> OperationRecord | None:
        statement = self._compiled(("fetch",), lambda: FETCH)
        return await self._row(statement, {"scope": scope, "key": key})

    async def change(self, change: Change) -> bool:
        names = tuple(change.values)
        shape = ("change", names, change.owner is not None, change.closes is not None, change.opens)
        statement = self._compiled(shape, lambda: _change(*shape[1:]))
        params = compare_and_set_params(change.current, change.values, change.now, change.owner)
        if change.closes is not None:
            params |= close_execution_params(change.current, change.closes)
        return await self._value(statement, params) is not None

    async def renew(self, leases: Mapping[int, str], until: datetime) -> set[int]:
        statement = self._compiled(("renew",), _renew)
        params = {"ids": list(leases), "owners": list(leases.values()), "until": until}
        rows = await self._run(statement, params, asyncpg.Connection.fetch)
        return {row["id"] for row in rows}

    async def close(self) -> None:
        await self._pool.close()

    def forget_loop(self) -> None:
        # asyncpg connections cannot be closed, or used, from another event loop.
        self._pool = ConnectionPool(self._connect, self._pool_size)

    def _compiled(self, shape: tuple[Any, ...], build: Callable[[], ClauseElement]) -> _Compiled:
        compiled = self._statements.get(shape)
        if compiled is None:
            compiled = self._statements[shape] = _Compiled.of(build())
        return compiled

    async def _value(self, statement: _Compiled, params: Mapping[str, Any]) -> Any:
        return await self._run(statement, params, asyncpg.Connection.fetchval)

    async def _row(self, statement: _Compiled, params: Mapping[str, Any]) -> OperationRecord | None:
        row = await self._run(statement, params, asyncpg.Connection.fetchrow)
        return None if row is None else OperationRecord.from_row(row)

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
                pool.discard(connection, error)
                raise
        except asyncpg.IntegrityConstraintViolationError as error:
            raise IntegrityError(statement.sql, None, error) from error
        except _DRIVER_ERRORS as error:
            raise OperationalError(statement.sql, None, error) from error
        pool.release(connection)
        return result


def _claim(names: tuple[str, ...]) -> Select[Any]:
    claimed = (
        pg_insert(operations)
        .values({name: bindparam(name, type_=operations.c[name].type) for name in names})
        .on_conflict_do_nothing(index_elements=["scope", "key"])
        .returning(*_OPENING_COLUMNS)
        .cte("claimed")
    )
    return select(claimed.c.id).add_cte(_open_execution(claimed))


def _change(
    names: tuple[str, ...], fenced_by_owner: bool, closes: bool, opens: bool
) -> Select[Any]:
    changed = (
        compare_and_set_update(names, fenced=fenced_by_owner)
        .returning(*_OPENING_COLUMNS)
        .cte("changed")
    )
    parts: list[CTE] = []
    if closes:
        parts.append(_close_execution(changed))
    if opens:
        parts.append(_open_execution(changed))
        return select(changed.c.id).add_cte(*parts)
    # Only a change that opens an execution is an intent; an outcome commits without waiting for
    # its WAL flush (`synchronous_commit` off for this transaction alone). A server crash may
    # take it back: the operation is then `in_flight` again, its lease runs out and it is
    # reconciled like any crashed execution, never executed twice (docs/performance.md).
    lazy = func.set_config("synchronous_commit", "off", True)
    return select(changed.c.id, lazy).add_cte(*parts)


# What a new execution attempt is made of: the statements return these from the row they write.
_OPENING_COLUMNS = (
    operations.c.id,
    operations.c.executions,
    operations.c.lease_owner,
    operations.c.fingerprint,
    operations.c.status,
    operations.c.last_sent_at,
)


def _open_execution(row: CTE) -> CTE:
    """The next execution attempt of `row` (none if `row` is empty: the write did not land)."""
    columns = ["operation_id", "kind", "execution", "owner", "fingerprint", "outcome", "started_at"]
    source = select(
        row.c.id,
        _EXECUTION_KIND,
        row.c.executions,
        row.c.lease_owner,
        row.c.fingerprint,
        row.c.status,
        row.c.last_sent_at,
    )
    return insert(attempts).from_select(columns, source).cte("opened")


def _close_execution(changed: CTE) -> CTE:
    """The owner's execution attempt, labelled `fenced` when the change did not land."""
    landed = exists(select(changed.c.id))
    label = bindparam("closes_label", type_=attempts.c.outcome.type)
    return close_execution_update(case((landed, label), else_=FENCED)).cte("closed")


def _renew() -> ClauseElement:
    ids = bindparam("ids", type_=ARRAY(operations.c.id.type))
    owners = bindparam("owners", type_=ARRAY(operations.c.lease_owner.type))
    return (
        update(operations)
        .where(
            operations.c.id == any_(ids),
            operations.c.status == Status.IN_FLIGHT.value,
            operations.c.lease_owner == any_(owners),
        )
        .values(lease_expires_at=bindparam("until", type_=operations.c.lease_expires_at.type))
        .returning(operations.c.id)
    )
