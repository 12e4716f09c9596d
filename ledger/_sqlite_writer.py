"""SQLite's hot path: each write of a guarded call as one call into a thread of the writer's own.

Through aiosqlite every statement, BEGIN and COMMIT is a hop to the driver's thread and back, with
SQLAlchemy's async layer around each: a claim took 3.2 ms here, and takes 0.7 ms run whole in one
call (docs/performance.md). So the writer runs each write whole, on a blocking `sqlite3` connection
to the same file configured as the async engine's (WAL, `synchronous=FULL`, `BEGIN IMMEDIATE`), in
one thread that serialises the process's writes as SQLite's write lock would anyway. The guarded
writes that queue while the thread is busy share one transaction and one commit (group commit,
`ledger/_group_commit.py`): the fsync that is most of a commit's cost is paid once per group, not
once per write; a lone write commits alone at once. Its statements are compiled once by SQLAlchemy
from the table definitions and run on the driver directly: SQLAlchemy's execution layer cost more
per statement than SQLite takes to run it. A `peek` reads a key on the caller's thread, which a
WAL reader does without waiting for any writer: the guard peeks before it claims while a tool's
calls are often repeats (a key that is taken then costs neither a write nor a thread hop), and a
`fetch` (a status, a duplicate's look at the ledger) reads so too. Other reads and reconciliation
keep the async engine; upkeep that writes in batches (pruning) comes to the writer's thread
(`transaction`), to take its turn with the guarded writes.

Some writes run on the caller's own thread instead, saving the hop to the writer's thread and
back (two per write, dearer than the statements of a write that needs no fsync:
docs/performance.md, "an embedded outcome without the hops"):
- an outcome (a lazy commit, no fsync) while the writes come one at a time (no drain posted or
  running, and the last one took a lone write: `GroupQueue.quiet`) and the lock is free at once.
  Writes that come together commit for less in a group;
- an intent (any durable write) too, while the guard's event loop runs one guarded call alone
  (`serve_async_callers`), the writes come one at a time, and the durable writes on a caller's
  thread took under `BRIEF_SYNC` on average lately: the loop then waits out an fsync about as
  long as the call's own Python takes, and no other call of the guard's is waiting. After a
  slower stretch, intents keep to the writer's thread for a while. The count of calls comes
  from the guard, not the queue: a loop blocked by an fsync lets no second call queue, so the
  queue alone would stay quiet under load and lose group commit;
- any write, for a writer whose event loop serves only callers that block on it anyway (the sync
  face's loop thread: `serve_blocking_callers`), while the loop serves that one call alone and
  the lock is free at once.
A commit on a caller's thread never checkpoints (the log's copy into the database, with its
fsyncs, would stall the caller's thread, an event loop's): after `_HERE_COMMITS_PER_CHECKPOINT`
of them, the next write goes to the writer's thread, whose commits checkpoint as SQLite does, its
caller awaiting it. A checkpoint posted to that thread instead would run beside the caller's
next writes, so it would never find the whole log copied, and the log would never start again
from its beginning: it grew to 187 MB in 3 s of calls, one at a time (docs/performance.md).
None of them where another connection took the lock from the writer's thread lately (another
process writes to the file): there, even a few commits out of turn cost more than the hops save.
Otherwise the write goes to the writer's thread, so that the loop serves its other calls during a
commit's fsync; so does a write with the lock in the way, to wait there: never on the loop, where
an engine transaction holding the lock may need to go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    ClauseElement,
    ColumnElement,
    Integer,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler

from writesafe.ledger._call_thread import CallThread
from writesafe.ledger._engine import SQLITE_BUSY_TIMEOUT, connect_sqlite, is_busy
from writesafe.ledger._group_commit import Answer, GroupQueue, Member, answer
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
    compare_and_set_update,
    inserted,
    operations,
)

T = TypeVar("T")

_DIALECT = sqlite.dialect(paramstyle="named")
# What a commit of each kind, durable or lazy, sets first on a connection last at the other.
_LEVELS = {True: "PRAGMA synchronous=FULL", False: "PRAGMA synchronous=NORMAL"}


# The writer thread's wait for the lock another process holds. SQLite's own busy handler sleeps
# 1 ms before its first retry and up to 100 ms later, far longer than a commit holds the lock:
# with several processes on one file, each writer slept through the others' turns (a wait
# measured in docs/performance.md, "an embedded outcome without the hops"). This one tries again
# after 50 µs, doubling to 2 ms, at random below each (so that processes do not retry in step),
# for as long as SQLite's own would have. A loop of its own rather than tenacity's `Retrying`,
# whose bookkeeping adds about half again to the CPU of each try and its sleep, CPU that the
# lock's holder may be waiting for (`python -m bench.lock_wait`; docs/performance.md).
_FIRST_WAIT = 50e-6
_LONGEST_WAIT = 2e-3


def begin_when_free(cursor: sqlite3.Cursor, timeout: float = SQLITE_BUSY_TIMEOUT) -> int:
    """BEGIN IMMEDIATE on `cursor`, whose lock another connection held a moment ago: tried at
    once, then again after each wait, until it is free or `timeout` seconds have passed (then
    SQLite's BUSY is raised); how many tries it took."""
    deadline = time.monotonic() + timeout
    longest, tries = _FIRST_WAIT, 0
    while True:
        tries += 1
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if not is_busy(error) or time.monotonic() >= deadline:
                raise
        else:
            return tries
        time.sleep(random.uniform(0, longest))
        longest = min(longest * 2, _LONGEST_WAIT)


# How long writes keep to the writer's thread after another connection took the lock from it:
# another process on the file is a standing condition, which a lull of 10 s does not end.
_SHARED_SECONDS = 10.0

# How long durable writes on a caller's thread may hold it, on average, for intents to go on
# committing there: about the CPU of a guarded call's own Python (docs/performance.md), so that a
# loop waiting out an fsync waits about as long as the call takes anyway. The average moves by
# `_SYNC_WEIGHT` of each write, counted as at most `_LONGEST_COUNTED`: a lone stall of the disk
# (56 ms once in 2,578 writes here) does not end the path, a disk slower than the bound does,
# within a dozen writes. Then intents keep to the writer's thread for `_SLOW_SECONDS`, and the
# first back on the caller's thread ends the path again unless it is brief.
BRIEF_SYNC = 1e-3
_SYNC_WEIGHT = 1 / 16
_LONGEST_COUNTED = 4 * BRIEF_SYNC
_SLOW_SECONDS = 10.0

# Commits on callers' threads before a write goes to the writer's thread, to checkpoint there: a
# write adds about 5 pages to the log, so the log stays near SQLite's own bound (1,000 pages),
# and the hops of 1 write in 100 cost about 1 %.
_HERE_COMMITS_PER_CHECKPOINT = 100


def durable_average(average: float, seconds: float) -> tuple[float, bool]:
    """The average time of durable writes on a caller's thread after one more that took
    `seconds`, and whether it passed `BRIEF_SYNC`; if so it starts again at the bound, so that
    the next write there ends the path again unless it is brief."""
    counted = min(seconds, _LONGEST_COUNTED)
    average += (counted - average) * _SYNC_WEIGHT
    return (BRIEF_SYNC, True) if average > BRIEF_SYNC else (average, False)


# Converts a stored value of each operation column back (a datetime's text); most need nothing.
_READ_OPERATION = {
    column.name: processor
    for column in operations.columns
    if (processor := column.type.dialect_impl(_DIALECT).result_processor(_DIALECT, None))
}


@dataclass(frozen=True, slots=True)
class SqliteStatement:
    """A statement compiled for `sqlite3`: its SQL, how each parameter is converted for the
    driver (a datetime to its stored microseconds), and the values it carries itself."""

    sql: str
    convert: Mapping[str, Callable[[Any], Any]]
    fixed: Mapping[str, Any]

    @classmethod
    def of(
        cls, statement: ClauseElement, column_keys: Sequence[str] | None = None
    ) -> SqliteStatement:
        compiled = statement.compile(dialect=_DIALECT, column_keys=column_keys)
        assert isinstance(compiled, SQLCompiler)
        convert: dict[str, Callable[[Any], Any]] = {}
        fixed: dict[str, Any] = {}
        for name, bind in compiled.binds.items():
            processor = bind.type.dialect_impl(_DIALECT).bind_processor(_DIALECT)
            if processor is not None:
                convert[name] = processor
            if bind.value is not None:
                fixed[name] = bind.value
        return cls(str(compiled), convert, fixed)

    def run(self, cursor: sqlite3.Cursor, params: Mapping[str, Any]) -> sqlite3.Cursor:
        values = {**self.fixed, **params}
        for name, processor in self.convert.items():
            if name in values:
                values[name] = processor(values[name])
        return cursor.execute(self.sql, values)


def _claim_statement(names: tuple[str, ...]) -> SqliteStatement:
    claim = (
        sqlite.insert(operations)
        .on_conflict_do_nothing(index_elements=["scope", "key"])
        .returning(operations.c.id)
    )
    return SqliteStatement.of(claim, names)


_START_COLUMNS = ("operation_id", "kind", "execution", "owner", "fingerprint", "outcome")
_START_EXECUTION = SqliteStatement.of(insert(attempts), (*_START_COLUMNS, "started_at"))
_FETCH = SqliteStatement.of(FETCH)
_CLOSE_EXECUTION = SqliteStatement.of(close_execution_update(bindparam("closes_label")))
# The leases as two JSON arrays: one statement whatever their number.
_RENEW = SqliteStatement.of(
    update(operations)
    .where(
        operations.c.id.in_(select(func.json_each(bindparam("ids")).table_valued("value"))),
        operations.c.status == Status.IN_FLIGHT.value,
        operations.c.lease_owner.in_(
            select(func.json_each(bindparam("owners")).table_valued("value"))
        ),
    )
    .values(lease_expires_at=bindparam("until", type_=operations.c.lease_expires_at.type))
    .returning(operations.c.id)
)


class SqliteWriter:
    """The `Writer` for the embedded ledger: a hop per write at most, none for a taken key."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._thread = CallThread("writesafe-sqlite")  # started by a write, ended by close
        self._connection: sqlite3.Connection | None = None  # the writer thread's
        self._blocking_alone: Callable[[], bool] | None = None  # see `serve_blocking_callers`
        self._calls_alone: Callable[[], bool] | None = None  # see `serve_async_callers`
        # The connections for reads and writes on a caller's thread, which never wait for the
        # lock, not in use, newest last: one per thread using one at once, however many threads
        # come and go (a server's thread per request). A list's pop and append are atomic, so no
        # two threads share one mid-use.
        self._here: list[sqlite3.Connection] = []
        self._claims: dict[tuple[str, ...], SqliteStatement] = {}
        self._changes: dict[tuple[tuple[str, ...], bool], SqliteStatement] = {}
        self._queued = GroupQueue()  # the guarded writes waiting for the writer's thread
        # Until when (`time.monotonic`) a write on a caller's thread is not tried: another
        # connection took the lock from the writer's thread lately (see `_begin`).
        self._shared_until = 0.0
        # How long a durable write on a caller's thread takes, on average, and until when
        # intents keep to the writer's thread after that average passed `BRIEF_SYNC`.
        self._durable_seconds = 0.0
        self._slow_until = 0.0
        self._here_commits = 0  # since the writer's thread last began a transaction
        # Whether each connection's last commit was durable (see `_begin`).
        self._levels: dict[sqlite3.Connection, bool] = {}

    async def claim(self, row: dict[str, Any]) -> Claim | None:
        names = tuple(row)
        statement = self._claims.get(names)
        if statement is None:
            statement = self._claims[names] = _claim_statement(names)
        return await self._run(lambda cursor: _claim(cursor, statement, row))

    async def fetch(self, scope: str, key: str) -> OperationRecord | None:
        """Read as `peek` does, on the calling thread and without the write lock; a read that
        fails there (a lock in the way) is made again on the writer's thread, under the lock."""
        try:
            return self._read_here(scope, key)
        except sqlite3.Error:
            return await self._run(lambda cursor: _fetch(cursor, scope, key))

    async def change(self, change: Change) -> OperationRecord | None:
        shape = (tuple(change.values), change.closes is not None)
        statement = self._changes.get(shape)
        if statement is None:
            # SQLite writes no time of its own: the changed row is all the writer's values, and
            # a row returned says only that the change landed.
            cas = compare_and_set_update(shape[0], fenced=shape[1]).returning(operations.c.id)
            statement = self._changes[shape] = SqliteStatement.of(cas)
        # Only a change that opens an execution is an intent; an outcome may commit lazily.
        return await self._run(lambda cursor: _change(cursor, statement, change), change.opens)

    async def renew(self, leases: Mapping[int, str], until: Moment) -> set[int]:
        params = {
            "ids": json.dumps(list(leases)),
            "owners": json.dumps(list(leases.values())),
            "until": until,
        }
        return await self._run(lambda cursor: {id_ for (id_,) in _RENEW.run(cursor, params)})

    async def close(self) -> None:
        """Close the writer's connections and end its thread; the next write opens both anew."""
        here, self._here = self._here, []
        for connection in here:
            self._drop(connection)
        await self._thread.stop(self._disconnect)  # closed by the thread that opened it

    def forget_loop(self) -> None:
        """Nothing to drop: the writer's thread serves whichever event loop awaits it."""

    in_process = True
    shared_clock = False

    def hours(self, column: ColumnElement[datetime]) -> ColumnElement[Any]:
        return sql_cast(column, Integer) // 3_600_000_000  # kept as microseconds since the epoch

    async def transaction(self, write: Callable[[sqlite3.Cursor], T]) -> T:
        """Run `write` as one lazy transaction on the writer's thread, in turn with the guarded
        writes: for upkeep (pruning) that must not contend with them for the database's lock,
        where SQLite's busy wait would let a steady stream of batches starve them."""
        return await self._thread.run(lambda: self._transaction(write, durable=False))

    def serve_blocking_callers(self, alone: Callable[[], bool]) -> None:
        """Run any write on the event loop's thread while `alone()` (the loop serves only the
        call that writes) and the lock is free at once; see above."""
        self._blocking_alone = alone

    def serve_async_callers(self, alone: Callable[[], bool]) -> None:
        """Run an intent on the event loop's thread while `alone()` (the guard runs one call),
        the writes come one at a time and commits here have synced briefly; see above."""
        self._calls_alone = alone

    def peek(self, scope: str, key: str) -> OperationRecord | None:
        """The row holding `(scope, key)` as last committed, read on the calling thread, whichever
        it is (a WAL read takes no lock a writer holds, so it does not wait: well under the cost
        of a hop). A row found is what the claim's conflict would have returned; None (no row,
        or the read was in a lock's way) leaves the key to the claim's write."""
        try:
            return self._read_here(scope, key)
        except sqlite3.Error:
            return None  # the write path reads it again, under the write lock

    def _read_here(self, scope: str, key: str) -> OperationRecord | None:
        """The row holding `(scope, key)` as last committed, read on the calling thread; raises
        `sqlite3.Error` where a lock was in the way (a checkpoint's rare restart of the log):
        its connection never waits on the caller."""
        connection = self._take_here()
        try:
            found = _fetch(connection.cursor(), scope, key)
        except BaseException:
            self._drop(connection)  # not pooled again: see `_take_here`
            raise
        self._here.append(connection)
        return found

    async def _run(self, write: Callable[[sqlite3.Cursor], T], durable: bool = True) -> T:
        """Run `write` in a transaction of the writer's thread, with the writes queued with it
        (`_commit_group`), or on the caller's thread where the module's docstring says."""
        if self._writes_here(durable):
            done = self._transaction_here(write, durable)
            if done is not None:
                return done[0]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._queued.add(Member(write, durable, loop, future)):
            self._thread.post(self._drain)
        return await future

    def _writes_here(self, durable: bool) -> bool:
        """Whether a write of this kind runs on the caller's thread now; the module's docstring
        says when."""
        now = time.monotonic()
        if now < self._shared_until or self._here_commits >= _HERE_COMMITS_PER_CHECKPOINT:
            return False
        if self._blocking_alone is not None and self._blocking_alone():
            return True
        if not self._queued.quiet():
            return False
        return not durable or (
            now >= self._slow_until and self._calls_alone is not None and self._calls_alone()
        )

    def _transaction_here(
        self, write: Callable[[sqlite3.Cursor], T], durable: bool
    ) -> tuple[T] | None:
        """`_transaction` on the calling thread; None, with nothing written, when the lock is
        taken: the caller never waits for it."""
        with _ledger_errors():
            connection = self._take_here()
            try:
                done = self._transaction_if_free(connection.cursor(), write, durable)
            except BaseException:
                self._drop(connection)  # not pooled again: see `_take_here`
                raise
            self._here.append(connection)
            return done

    def _transaction_if_free(
        self, cursor: sqlite3.Cursor, write: Callable[[sqlite3.Cursor], T], durable: bool
    ) -> tuple[T] | None:
        """`write` in a transaction of its own on `cursor`, committed; None, with nothing
        written, where the lock is taken (SQLite answers at once, `busy_timeout` being 0)."""
        try:
            self._begin(cursor, durable)
        except sqlite3.OperationalError as error:
            if is_busy(error):
                return None
            raise
        started = time.perf_counter()
        done = (_commit(cursor, write),)
        if durable:
            self._time_durable(time.perf_counter() - started)
        self._here_commits += 1
        return done

    def _time_durable(self, seconds: float) -> None:
        """Count a durable write on a caller's thread into the average; past `BRIEF_SYNC`, send
        intents to the writer's thread for a while."""
        self._durable_seconds, slow = durable_average(self._durable_seconds, seconds)
        if slow:
            self._slow_until = time.monotonic() + _SLOW_SECONDS

    def _take_here(self) -> sqlite3.Connection:
        """A connection for the calling thread alone until it is given back (appended to
        `_here`), which never waits for the lock. One whose use raised is dropped, not given
        back: broken, being the last one in, it would be the first one out, and fail every use
        after it (a new one costs a connect; errors are rare)."""
        try:
            return self._here.pop()
        except IndexError:
            connection = connect_sqlite(self.file, check_same_thread=False)
            connection.execute("PRAGMA busy_timeout=0")
            connection.execute("PRAGMA wal_autocheckpoint=0")  # the writer's thread does it
            return connection

    def _transaction(self, write: Callable[[sqlite3.Cursor], T], durable: bool) -> T:
        """One transaction; a durable one is on disk when it returns (`synchronous=FULL`).

        A lazy one (`synchronous=NORMAL`: the outcome of an execution) skips its own fsync and
        becomes durable with the next durable commit or checkpoint, as WAL frames are synced in
        order. Power loss may take it back: the operation is then `in_flight` again, its lease
        runs out and it is reconciled like any crashed execution, never executed twice. A
        process crash loses nothing. docs/performance.md, "The embedded path". Driver errors
        are raised as SQLAlchemy's, like every other ledger error.
        """
        with _ledger_errors():
            cursor = self._cursor()
            self._begin(cursor, durable)
            return _commit(cursor, write)

    def _drain(self) -> None:
        """Commit every write queued by now as one group; see `_commit_group`."""
        with self._queued.draining() as members:
            if not members:
                return  # every caller was cancelled before its write started
            try:
                with _ledger_errors():
                    answers = self._commit_group(members)
            except BaseException as failure:  # every member is answered with it
                answers = [(None, failure)] * len(members)
        answer(members, answers)

    def _commit_group(self, members: list[Member]) -> list[Answer]:
        """Run every member's write in one transaction and commit it once: durable if any member
        must be. Each caller is answered only after the commit that holds its rows (or with the
        error that kept them out), as `_transaction` alone would answer it.

        A member whose write raises is answered with its error, and the transaction rolls back
        and runs again without it: the others are neither failed nor lost, and none of them
        sees a row the failed write left. The members run in the order they were queued, so
        each sees what the ones before it wrote, as it would have committed: a second claim of
        one key in the same group finds the first's row and loses to it, as it would alone.
        """
        durable = any(member.durable for member in members)
        answers: dict[int, Answer] = {}
        running = list(range(len(members)))
        cursor = self._cursor()
        while running:
            self._begin(cursor, durable)
            results: list[tuple[int, Any]] = []
            try:
                for index in running:
                    results.append((index, members[index].write(cursor)))
            except Exception as error:  # the member's own: answered with it, the rest run again
                _roll_back(cursor)
                failed = running[len(results)]
                answers[failed] = (None, _as_ledger_error(error))
                running.remove(failed)
                continue
            except BaseException:
                _roll_back(cursor)
                raise
            try:
                cursor.execute("COMMIT")
            except BaseException:
                _roll_back(cursor)
                raise
            answers.update((index, (result, None)) for index, result in results)
            break
        return [answers[index] for index in range(len(members))]

    def _cursor(self) -> sqlite3.Cursor:
        if self._connection is None:
            self._connection = connect_sqlite(self.file)
            self._connection.execute("PRAGMA busy_timeout=0")  # it waits as `_begin` says
        return self._connection.cursor()

    def _begin(self, cursor: sqlite3.Cursor, durable: bool) -> None:
        """BEGIN IMMEDIATE at the safety level asked for, setting it only where the connection
        is at the other one (SQLite refuses to change it inside a transaction): statements
        fewer per commit wherever consecutive commits ask for the same level. The writer's
        thread waits for a lock that is taken (`begin_when_free`); a caller's thread does not.
        A transaction of the writer's thread checkpoints as it commits, for the commits on
        callers' threads too: they start counting again."""
        connection = cursor.connection
        writer = connection is self._connection
        if writer:
            self._here_commits = 0
        if self._levels.get(connection) != durable:
            cursor.execute(_LEVELS[durable])
            self._levels[connection] = durable
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if not (writer and is_busy(error)):
                raise
            self._shared_until = time.monotonic() + _SHARED_SECONDS
            begin_when_free(cursor)

    def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._drop(connection)

    def _drop(self, connection: sqlite3.Connection) -> None:
        self._levels.pop(connection, None)
        connection.close()


@contextlib.contextmanager
def _ledger_errors() -> Iterator[None]:
    """Raise driver errors as SQLAlchemy's, like every other ledger error."""
    try:
        yield
    except sqlite3.Error as error:
        raise _as_ledger_error(error) from error


def _as_ledger_error(error: Exception) -> Exception:
    """A driver error as SQLAlchemy's; any other error as it is."""
    if not isinstance(error, sqlite3.Error):
        return error
    wrapped = DBAPIError.instance(None, None, error, sqlite3.Error, dialect=_DIALECT)
    wrapped.__cause__ = error
    return wrapped


def _roll_back(cursor: sqlite3.Cursor) -> None:
    """End the open transaction, if an error has not ended it already (SQLite rolls back by
    itself on some: a full disk, an I/O error)."""
    if cursor.connection.in_transaction:
        cursor.execute("ROLLBACK")


def _commit(cursor: sqlite3.Cursor, write: Callable[[sqlite3.Cursor], T]) -> T:
    """Run `write` in the transaction `_begin` opened, and commit it (or roll it back)."""
    try:
        result = write(cursor)
    except BaseException:
        _roll_back(cursor)
        raise
    cursor.execute("COMMIT")
    return result


def _claim(cursor: sqlite3.Cursor, statement: SqliteStatement, row: dict[str, Any]) -> Claim | None:
    """Insert `row` with its first execution attempt; else the row holding the key, read in the
    same transaction (so it cannot be pruned in between, as on PostgreSQL)."""
    returned = statement.run(cursor, row).fetchone()
    if returned is None:
        existing = _fetch(cursor, row["scope"], row["key"])
        return None if existing is None else Claim(existing, created=False)
    created = inserted(row, {"id": returned[0]})
    _start_execution(cursor, created)
    return Claim(created, created=True)


def _fetch(cursor: sqlite3.Cursor, scope: str, key: str) -> OperationRecord | None:
    return _operation(_FETCH.run(cursor, {"scope": scope, "key": key}))


def _operation(cursor: sqlite3.Cursor) -> OperationRecord | None:
    """The one operation row `cursor` returned, if any, as its record."""
    found = cursor.fetchone()
    if found is None:
        return None
    row = {name: value for (name, *_), value in zip(cursor.description, found, strict=True)}
    for name, processor in _READ_OPERATION.items():
        row[name] = processor(row[name])
    return OperationRecord.from_row(row)


def _change(
    cursor: sqlite3.Cursor, statement: SqliteStatement, change: Change
) -> OperationRecord | None:
    current = change.current
    params = compare_and_set_params(current, change.values, change.now, change.owner)
    changed = change.landed({}) if statement.run(cursor, params).fetchone() else None
    if change.closes is not None:
        _close_execution(cursor, current, change.closes, landed=changed is not None)
    elif changed is not None:
        _start_execution(cursor, changed)
    return changed


def _start_execution(cursor: sqlite3.Cursor, operation: OperationRecord) -> None:
    """Open the execution attempt of `operation`'s current execution, for its lease owner."""
    _START_EXECUTION.run(
        cursor,
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
    cursor: sqlite3.Cursor, operation: OperationRecord, closed: ClosedExecution, *, landed: bool
) -> None:
    """Record how the owner's execution attempt ended: its label if the change landed."""
    params = close_execution_params(operation, closed)
    if not landed:
        params["closes_label"] = FENCED
    _CLOSE_EXECUTION.run(cursor, params)
