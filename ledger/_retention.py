"""Retention: final operations, with their attempts, are deleted in short batches once past it.

Only `succeeded` and `failed` operations whose last change is older than the retention period are
deleted; `in_flight`, `outcome_unknown` and `needs_attention` ones are never touched, however old.
A key whose operation was deleted is free: the next call with it is a new operation; a small
tombstone (`writesafe_pruned_keys`: scope, key, when) lets its status say "expired" rather than
"never seen" (`expired_at`). Tombstones are themselves pruned once older than their own period
(`tombstone_retention`, default 7 days), oldest first through their index on `pruned_at`: they
only inform, and unbounded they would grow by one row per key ever used; a key whose tombstone
went is "never seen" again. On SQLite the
newest operation is kept until a newer one exists, so that no id is ever given twice (below).

The pruner walks the primary key in windows of `batch_size` rows, so each batch reads a bounded
number of rows through the one index every table has, and needs no index of its own over every
operation (each one costs bytes and page writes on every guarded call, docs/performance.md). A row
is created before its last change, and ids grow with creation, so once a whole window was created
after the cutoff the rows beyond it cannot be due either and the pass ends (a row a client's clock
skew put out of place waits for the next pass). Each batch is one short transaction: on
PostgreSQL it skips rows another transaction holds (`FOR UPDATE SKIP LOCKED`) instead of waiting
for them, and a row a guarded call changed meanwhile no longer matches. On SQLite, where a writer
holds the whole database, a batch runs whole on the ledger's writer thread, in turn with the
guarded writes of its process (through the async engine it held the lock across its statements'
thread hops, and SQLite's busy wait let batch after batch starve the writes queued behind: first
executions took up to 0.8 s during a pass, docs/performance.md); and the pruner rests between
batches three times as long as the last one took, so that writers have the lock most of the time,
those of other processes (which wait for it in SQLite's busy wait) too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Integer, Table, and_, bindparam, delete, func, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from writesafe.ledger._ledger import Ledger
from writesafe.ledger._models import PrunedKey, status_in
from writesafe.ledger._sqlite_writer import SqliteStatement, SqliteWriter
from writesafe.ledger._states import Status
from writesafe.ledger._writer import attempts, operations

FINAL_STATES = (Status.SUCCEEDED, Status.FAILED)
"""The states an operation may be pruned in."""

DEFAULT_BATCH_SIZE = 500
"""Operations (or tombstones) deleted per transaction: small enough that no guarded call waits long
for a lock."""

DEFAULT_TOMBSTONE_RETENTION = timedelta(days=7)
"""How long a pruned key says "expired" before it is "never seen" again: a caller that comes back
within a week of the retention (a long weekend's outage, a queue that redelivers late) is told
its key expired, for about the storage of one day's operations at the default retention
(docs/operations.md)."""

_SQLITE_REST = 3.0
"""SQLite's rest between batches, in multiples of the last batch's time: pruning is upkeep, and
yields the database's one write lock to the guarded calls (docs/performance.md)."""


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one pruning pass removed, and what it cost."""

    operations: int = 0
    attempts: int = 0
    tombstones: int = 0
    batches: int = 0
    seconds: float = 0.0
    cutoff: datetime | None = None  # final operations last changed before it were due

    def __add__(self, other: PruneReport) -> PruneReport:
        return PruneReport(
            operations=self.operations + other.operations,
            attempts=self.attempts + other.attempts,
            tombstones=self.tombstones + other.tombstones,
            batches=self.batches + other.batches,
            seconds=self.seconds + other.seconds,
            cutoff=other.cutoff or self.cutoff,
        )


async def prune(
    ledger: Ledger,
    retention: timedelta,
    *,
    tombstone_retention: timedelta = DEFAULT_TOMBSTONE_RETENTION,
    batch_size: int = DEFAULT_BATCH_SIZE,
    stop: asyncio.Event | None = None,
) -> PruneReport:
    """Delete the final operations (and their attempts) last changed more than `retention` ago,
    then the tombstones of keys pruned more than `tombstone_retention` ago.

    Runs batch after batch until none is due or `stop` is set (the batch in hand completes, and
    on SQLite the rest after it).
    """
    if retention <= timedelta(0) or tombstone_retention <= timedelta(0):
        raise ValueError("retention and tombstone_retention must be positive")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    started = time.perf_counter()
    # The clock that stamps the rows: PostgreSQL's own, the process's on SQLite.
    now = await ledger.now()
    cutoff = now - retention
    total = PruneReport(cutoff=cutoff)
    after = 0
    while stop is None or not stop.is_set():
        began = time.perf_counter()
        params = {"after": after, "size": batch_size, "cutoff": cutoff, "pruned_at": now}
        batch = await _batch(ledger, params)
        if not batch.window:
            break
        total += PruneReport(operations=batch.operations, attempts=batch.attempts, batches=1)
        after = batch.window[-1][0]
        if len(batch.window) < batch_size or all(fresh for _, fresh in batch.window):
            break
        await _rest(ledger, began)
    params = {"forget_before": now - tombstone_retention, "size": batch_size}
    while stop is None or not stop.is_set():
        began = time.perf_counter()
        forgotten = await _tombstone_batch(ledger, params)
        total += PruneReport(tombstones=forgotten, batches=1 if forgotten else 0)
        if forgotten < batch_size:
            break
        await _rest(ledger, began)
    return dataclasses.replace(total, seconds=time.perf_counter() - started)


async def _rest(ledger: Ledger, began: float) -> None:
    """Let the guarded calls queued behind the batch begun at `began` go first; on SQLite, rest
    three times as long as it took: a writer in another process, whose busy wait looks for the
    lock at growing intervals, then finds it free three times in four."""
    await asyncio.sleep(_SQLITE_REST * (time.perf_counter() - began) if ledger.is_sqlite else 0)


@dataclass(frozen=True, slots=True)
class _Batch:
    """One batch: its window of operations, `(id, created after the cutoff)` in id order, and
    what it deleted of them."""

    window: list[tuple[int, bool]]
    operations: int = 0
    attempts: int = 0


# The next window of operations after id `after`, each saying whether it was created after the
# cutoff (then no row beyond it can be due either).
_CUTOFF = bindparam("cutoff", type_=operations.c.updated_at.type)
_WINDOW = (
    select(operations.c.id, (operations.c.created_at >= _CUTOFF).label("fresh"))
    .where(operations.c.id > bindparam("after"))
    .order_by(operations.c.id)
    .limit(bindparam("size", type_=Integer()))
)
_PRUNED_AT = bindparam("pruned_at", type_=PrunedKey.__table__.c.pruned_at.type)
pruned_keys = cast(Table, PrunedKey.__table__)
# The operations in the window `(after, last]` due for pruning.
_DUE: ColumnElement[bool] = and_(
    operations.c.id > bindparam("after"),
    operations.c.id <= bindparam("last"),
    status_in(FINAL_STATES),
    operations.c.updated_at < _CUTOFF,
)


def _tombstones(insert: Callable[[Table], Any], due: ColumnElement[bool]) -> Any:
    """The statement that leaves a tombstone for each due operation's key (its time replaced
    when the key is pruned again)."""
    keys = select(operations.c.scope, operations.c.key, _PRUNED_AT).where(due)
    statement = insert(pruned_keys).from_select(["scope", "key", "pruned_at"], keys)
    return statement.on_conflict_do_update(
        index_elements=["scope", "key"], set_={"pruned_at": statement.excluded.pruned_at}
    )


# The oldest tombstones past their period, at most a batch of them (through their `pruned_at`
# index), and their deletion.
_FORGET_BEFORE = bindparam("forget_before", type_=pruned_keys.c.pruned_at.type)
_OLD_TOMBSTONES = (
    select(pruned_keys.c.scope, pruned_keys.c.key)
    .where(pruned_keys.c.pruned_at < _FORGET_BEFORE)
    .order_by(pruned_keys.c.pruned_at)
    .limit(bindparam("size", type_=Integer()))
)
_TOMBSTONE_KEY = tuple_(pruned_keys.c.scope, pruned_keys.c.key)
# PostgreSQL skips tombstones another pruner holds, as it skips operations.
_FORGET = delete(pruned_keys).where(
    _TOMBSTONE_KEY.in_(_OLD_TOMBSTONES.with_for_update(skip_locked=True))
)
_SQLITE_FORGET = SqliteStatement.of(delete(pruned_keys).where(_TOMBSTONE_KEY.in_(_OLD_TOMBSTONES)))


async def _tombstone_batch(ledger: Ledger, params: dict[str, Any]) -> int:
    """Delete a batch of tombstones past their period; how many went."""
    if isinstance(ledger.writer, SqliteWriter):
        return await ledger.writer.transaction(
            lambda cursor: _SQLITE_FORGET.run(cursor, params).rowcount
        )
    async with ledger.engine.begin() as conn:
        return (await conn.execute(_FORGET, params)).rowcount


async def expired_at(ledger: Ledger, scope: str, key: str) -> datetime | None:
    """When retention pruned the operation of `(scope, key)`; None if it never did. A key with
    no operation and no tombstone was never seen (or was pruned before tombstones were kept)."""
    query = select(pruned_keys.c.pruned_at).where(
        pruned_keys.c.scope == scope, pruned_keys.c.key == key
    )
    async with ledger.engine.connect() as conn:
        value: datetime | None = (await conn.execute(query)).scalar_one_or_none()
    return value


async def _batch(ledger: Ledger, params: dict[str, Any]) -> _Batch:
    if isinstance(ledger.writer, SqliteWriter):
        return await ledger.writer.transaction(lambda cursor: _sqlite_batch(cursor, params))
    async with ledger.engine.begin() as conn:
        return await _locking_batch(conn, params)


async def _locking_batch(conn: AsyncConnection, params: dict[str, Any]) -> _Batch:
    """PostgreSQL's batch: the due rows locked first, skipping those another transaction holds,
    then deleted by id (a row a guarded call changed meanwhile no longer matches)."""
    window = [(row.id, row.fresh) for row in await conn.execute(_WINDOW, params)]
    if not window:
        return _Batch(window)
    locked = select(operations.c.id).where(_DUE).with_for_update(skip_locked=True)
    ids = list((await conn.execute(locked, {**params, "last": window[-1][0]})).scalars())
    if not ids:
        return _Batch(window)
    await conn.execute(_tombstones(postgresql.insert, operations.c.id.in_(ids)), params)
    gone_attempts = await conn.execute(delete(attempts).where(attempts.c.operation_id.in_(ids)))
    gone = await conn.execute(delete(operations).where(operations.c.id.in_(ids)))
    return _Batch(window, gone.rowcount, gone_attempts.rowcount)


# SQLite gives a new row the highest id plus one, so pruning the newest operation would hand its
# id to the next one, and a compare-and-set (by id and version) of a record held since could then
# reach another key's row. The newest waits, past its retention, until a newer one exists.
# (PostgreSQL's ids come from a sequence and are never given twice.)
_SQLITE_DUE = and_(_DUE, operations.c.id < select(func.max(operations.c.id)).scalar_subquery())
_SQLITE_WINDOW = SqliteStatement.of(_WINDOW)
_SQLITE_TOMBSTONES = SqliteStatement.of(_tombstones(sqlite.insert, _SQLITE_DUE))
_SQLITE_DELETE_ATTEMPTS = SqliteStatement.of(
    delete(attempts).where(attempts.c.operation_id.in_(select(operations.c.id).where(_SQLITE_DUE)))
)
_SQLITE_DELETE_OPERATIONS = SqliteStatement.of(delete(operations).where(_SQLITE_DUE))


def _sqlite_batch(cursor: sqlite3.Cursor, params: dict[str, Any]) -> _Batch:
    """SQLite's batch, in one transaction under the database's write lock: the due rows cannot
    change between the two deletes, so each selects them by the same predicate."""
    window = [(id_, bool(fresh)) for id_, fresh in _SQLITE_WINDOW.run(cursor, params)]
    if not window:
        return _Batch(window)
    due = {**params, "last": window[-1][0]}
    _SQLITE_TOMBSTONES.run(cursor, due)
    gone_attempts = _SQLITE_DELETE_ATTEMPTS.run(cursor, due).rowcount
    gone = _SQLITE_DELETE_OPERATIONS.run(cursor, due).rowcount
    return _Batch(window, gone, gone_attempts)
