"""The ledger: durable intent before effect, and fenced compare-and-set transitions.

Every state change is `UPDATE … WHERE id = :id AND version = :version` (plus the lease owner when
an attempt finishes), checked against the state machine first. A writer whose lease was taken
over therefore changes nothing: it sees `None` and must not claim the outcome it observed.

Time is judged on one clock: PostgreSQL's. Leases, due checks and settle windows are written and
compared with the server's `now()`, never with the time of whichever process looks (its clock may
be off). SQLite has no server clock: there a lease is judged by what this process has watched
(`writesafe.ledger._lease_watch`). A `Clock` given to the ledger replaces the server's, for tests.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    column,
    func,
    insert,
    literal,
    or_,
    select,
    union_all,
    update,
    values,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.schema import CreateSchema

from writesafe.ledger._api_keys import ApiKeys
from writesafe.ledger._backend import open_backend
from writesafe.ledger._clock import Clock, SystemClock, store_time
from writesafe.ledger._engine import ConnectionBudget, reader
from writesafe.ledger._lease_watch import LeaseWatch
from writesafe.ledger._migrations import current_revision, downgrade, ensure_current, upgrade
from writesafe.ledger._models import status_in
from writesafe.ledger._records import AttemptKind, AttemptRecord, OperationRecord
from writesafe.ledger._states import Status, check_transition
from writesafe.ledger._superseded import close_executions, close_settled, close_taken_over
from writesafe.ledger._writer import (
    Change,
    Claim,
    ClosedExecution,
    Moment,
    Writer,
    attempts,
    compare_and_set,
    operations,
)

DEFAULT_LEASE_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Intent:
    """What a caller wants to execute under `(scope, key)`, and the lease it will hold meanwhile."""

    scope: str
    key: str
    tool: str
    fingerprint: str
    arguments: str
    owner: str
    lease_seconds: float
    max_executions: int
    auth_hash: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseHeld:
    """An `in_flight` lease that has not run out on the ledger's clock, for `seconds_left`."""

    seconds_left: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an execution ended, as recorded on the operation and on its attempt row."""

    status: Status
    result: str | None = None
    error: str | None = None
    code: str | None = None
    evidence: str | None = None
    # What the attempt row records when it differs from the operation's verdict (e.g. the
    # operation ends RETRY_EXHAUSTED while its last attempt saw DEPENDENCY_BUSY).
    attempt_error: str | None = None
    attempt_code: str | None = None

    @property
    def attempt_values(self) -> dict[str, str | None]:
        return {
            "code": self.attempt_code or self.code,
            "envelope": self.attempt_error or self.error,
            "evidence": self.evidence,
        }


class Ledger:
    """The source of truth for operations; thin, async, and safe to share across tasks."""

    def __init__(
        self,
        engine: AsyncEngine,
        writer: Writer,
        clock: Clock | None = None,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.engine = engine
        # Transactions that only read: on SQLite they take no lock the writers need.
        self._reads = reader(engine)
        # The guard's hot writes; reconciliation's go through `engine`, reads through `_reads`.
        self.writer = writer
        self.clock: Clock = clock or SystemClock()
        # True: time is the server's `now()`. SQLite has no server clock; a given clock wins.
        self.server_clock = clock is None and writer.shared_clock
        # Without a clock the store shares, leases are judged by watching them.
        self._watches = not writer.shared_clock
        # On SQLite, how long the writers' leases last: a lease seen unchanged that long ran out.
        self._watch = LeaseWatch(self.clock, lease_seconds)

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        connect_timeout: float = 5.0,
        budget: ConnectionBudget | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> Ledger:
        """The ledger at `url`; on PostgreSQL its engine and its writer share `budget`."""
        budget = budget or ConnectionBudget()
        engine, writer = open_backend(
            url, schema=schema, connect_timeout=connect_timeout, budget=budget
        )
        return cls(engine, writer, clock, lease_seconds=lease_seconds)

    @property
    def file(self) -> Path | None:
        """The SQLite ledger's file, absolute (beside it: its restore mark, the reconciler's
        lock, the WAL); None for a server's."""
        return self.writer.file

    @property
    def reads_locally(self) -> bool:
        """A key's row can be read without a round trip, off the event loop (`peek`)."""
        return self.writer.in_process

    @property
    def shown_url(self) -> str:
        """The ledger's URL with its password hidden: for messages."""
        return self.engine.url.render_as_string(hide_password=True)

    def api_keys(self) -> ApiKeys:
        """The service's API keys, kept in this ledger and timed on its clock."""
        return ApiKeys(self.engine, self.clock)

    async def create_schema(self, name: str) -> None:
        """Create the PostgreSQL schema `name` unless it exists (before the first `migrate`)."""
        async with self.engine.begin() as connection:
            await connection.execute(CreateSchema(name, if_not_exists=True))

    async def migrate(self) -> None:
        """Bring the schema to the newest migration."""
        await upgrade(self.engine)

    async def downgrade(self, revision: str) -> None:
        """Undo migrations down to `revision` (`base`: all of them)."""
        await downgrade(self.engine, revision)

    async def revision(self) -> str | None:
        """The schema's migration revision; None before the first."""
        return await current_revision(self.engine)

    async def check_schema(self) -> None:
        """Raise `LedgerNotMigrated` unless the schema is current."""
        await ensure_current(self.engine)

    async def close(self) -> None:
        await self.writer.close()
        await self.engine.dispose()

    def serve_blocking_callers(self, alone: Callable[[], bool]) -> None:
        """This ledger's event loop serves callers that block on it anyway (the sync face's loop
        thread), `alone()` while it serves one: the embedded writer may then write on the loop's
        thread (`ledger._sqlite_writer`). PostgreSQL's writes are a round trip on the loop
        already."""
        self.writer.serve_blocking_callers(alone)

    async def forget_loop(self) -> None:
        """Drop the connections opened on an event loop this process has left, and open new ones
        on the running loop as needed: asyncio connections, and the pool's queue, belong to the
        loop they were made on. PostgreSQL's are dropped unclosed (closing needs their loop; the
        server ends each session when its socket is collected); SQLite's close from any loop.
        """
        self.writer.forget_loop()
        await self.engine.dispose(close=self.writer.in_process)

    # -- reads ---------------------------------------------------------------------------

    async def get(self, scope: str, key: str) -> OperationRecord | None:
        return await self.writer.fetch(scope, key)

    def peek(self, scope: str, key: str) -> OperationRecord | None:
        """`get` without I/O, on any thread, where the writer reads locally (SQLite); None when
        there is no row or it cannot be read so (PostgreSQL)."""
        return self.writer.peek(scope, key)

    async def attempts(self, operation_id: int) -> list[AttemptRecord]:
        query = (
            select(attempts).where(attempts.c.operation_id == operation_id).order_by(attempts.c.id)
        )
        async with self._reads.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [AttemptRecord.from_row(row) for row in rows]

    async def list(
        self,
        *,
        statuses: Sequence[Status] | None = None,
        tool: str | None = None,
        scope: str | None = None,
        updated_before: datetime | None = None,
        lease_expired_at: datetime | None = None,
        after: tuple[datetime, int] | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """Operations by status/tool/scope/age, oldest change first (served by the status indexes).

        Keyset pagination: pass the `(updated_at, id)` of the last row seen as `after` to get the
        rows that follow it; unlike an offset, a page stays correct while rows are added.
        `lease_expired_at`: only rows whose lease had run out by then (crashed or stalled writers).
        """
        query = select(operations).order_by(operations.c.updated_at, operations.c.id).limit(limit)
        if statuses:
            query = query.where(status_in(statuses))
        if tool is not None:
            query = query.where(operations.c.tool == tool)
        if scope is not None:
            query = query.where(operations.c.scope == scope)
        if updated_before is not None:
            query = query.where(operations.c.updated_at <= updated_before)
        if lease_expired_at is not None:
            query = query.where(operations.c.lease_expires_at <= lease_expired_at)
        if after is not None:
            updated_at, last_id = after
            query = query.where(
                or_(
                    operations.c.updated_at > updated_at,
                    and_(operations.c.updated_at == updated_at, operations.c.id > last_id),
                )
            )
        async with self._reads.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [OperationRecord.from_row(row) for row in rows]

    async def count_by_status(self, statuses: Sequence[Status]) -> dict[Status, int]:
        """How many operations are in each of `statuses` (all scopes), zeros included.

        One count per state, so that each open state's count reads its own partial index (a
        grouped count over several states scans the table).
        """
        query = union_all(
            *(
                select(literal(status.value), func.count()).where(status_in([status]))
                for status in statuses
            )
        )
        async with self._reads.connect() as conn:
            counted = {Status(status): n for status, n in (await conn.execute(query)).all()}
        return {status: counted.get(status, 0) for status in statuses}

    async def count_by_hour(
        self, *, scope: str, since: datetime
    ) -> builtins.list[tuple[datetime, Status, int]]:
        """`(hour, status, count)` of `scope`'s operations last changed since `since`, by the UTC
        hour of that change: a picture of the ledger over time, served by the scope index."""
        updated = operations.c.updated_at
        hour = self.writer.hours(updated).label("hour")
        query = (
            select(hour, operations.c.status, func.count())
            .where(
                operations.c.scope == scope,
                operations.c.status.in_([s.value for s in Status]),
                updated >= since,
            )
            .group_by(hour, operations.c.status)
        )
        async with self._reads.connect() as conn:
            rows = (await conn.execute(query)).all()
        epoch_start = datetime(1970, 1, 1, tzinfo=UTC)
        return [
            (epoch_start + timedelta(hours=int(n)), Status(status), count)
            for n, status, count in rows
        ]

    async def ping(self) -> None:
        """Raise unless the database answers a trivial query."""
        async with self._reads.connect() as conn:
            await conn.execute(select(1))

    # -- time ----------------------------------------------------------------------------

    async def now(self) -> datetime:
        """The ledger's time now: the server's clock (one round trip), else the given clock."""
        if not self.server_clock:
            return self.clock.now()
        async with self._reads.connect() as conn:
            return await self.now_in(conn)

    async def now_in(self, conn: AsyncConnection) -> datetime:
        """The ledger's time, read inside the caller's transaction."""
        if not self.server_clock:
            return self.clock.now()
        now: datetime = (await conn.execute(select(func.now()))).scalar_one()
        return now

    def _at(self, offset: float = 0.0) -> Moment:
        """The ledger's time plus `offset` seconds, for a hot write to record: the server's own
        `now()` as the statement runs, else the given clock's time."""
        if self.server_clock:
            return store_time(offset)
        now = self.clock.now()
        # The offset's timedelta is made once (with its `StoreTime`), and none for no offset.
        return now + store_time(offset).interval if offset else now

    def _now_sql(self, offset: float = 0.0) -> ColumnElement[datetime] | datetime:
        """`_at` for statements built here: SQL `now()` on the server's clock."""
        if self.server_clock:
            return func.now() + timedelta(seconds=offset) if offset else func.now()
        return self.clock.now() + timedelta(seconds=offset)

    # -- claims --------------------------------------------------------------------------

    async def claim(self, intent: Intent) -> Claim:
        """Insert the intent as a new `in_flight` operation, or return the row holding the key.

        The unique `(scope, key)` constraint decides between concurrent claimers; the winner's
        operation row and first execution attempt are written atomically.
        """
        row = _operation_values(intent, self._at)
        while True:
            claimed = await self.writer.claim(row)
            if claimed is not None:
                return claimed
            existing = await self.writer.fetch(intent.scope, intent.key)
            if existing is not None:
                return Claim(existing, created=False)
            # The row that won the conflict was deleted since (pruning, docs/operations.md):
            # the key is free again, so claim it anew.

    async def restart(self, current: OperationRecord, intent: Intent) -> OperationRecord | None:
        """Begin another execution of a `failed` or `outcome_unknown` operation (a continuation).

        Returns the new row, or None when another caller changed the operation first.
        """
        check_transition(current.status, Status.IN_FLIGHT)
        now = self._at()
        values = {
            "status": Status.IN_FLIGHT.value,
            "fingerprint": intent.fingerprint,
            "arguments": intent.arguments,
            "auth_hash": intent.auth_hash,
            "lease_owner": intent.owner,
            "lease_expires_at": self._at(intent.lease_seconds),
            "executions": current.executions + 1,
            "last_sent_at": now,
            "next_check_at": None,
            "checks": 0,
        }
        return await self.writer.change(Change(current, values, now))  # opens an execution

    async def finish(
        self, current: OperationRecord, owner: str, outcome: Outcome
    ) -> OperationRecord | None:
        """Record how the owner's execution ended; None if the owner was fenced off meanwhile.

        The attempt row keeps the owner's evidence either way: it is the owner's own record. A
        fenced-off execution that may have had an effect voids the absence its operation has
        been judged by since (`_void_absence`).
        """
        check_transition(current.status, outcome.status)
        now = self._at()
        values: dict[str, Any] = {
            "status": outcome.status.value,
            "lease_owner": None,
            "lease_expires_at": None,
            "result": outcome.result,
            "error": outcome.error,
            "last_code": outcome.code,
        }
        if outcome.status is Status.OUTCOME_UNKNOWN:
            values["next_check_at"] = now
        closes = ClosedExecution(owner, outcome.status.value, outcome.attempt_values, now)
        finished = await self.writer.change(Change(current, values, now, closes=closes))
        if finished is None and outcome.status in _MAY_HAVE_SENT:
            await self._void_absence(current)
        return finished

    async def _void_absence(self, current: OperationRecord) -> None:
        """An execution fenced off after it may have had an effect: its operation, if it has
        since been judged by absence (`failed`) or waits on it (`outcome_unknown`), is unknown
        again, its settle window starting now, so that no lookup made before this counts.

        The writer may have sent long after its fence closed (it stalled between its last check
        and its write), when a lookup had already found nothing: this late report is the only
        sign of it. An operation that is `in_flight` again (the next execution runs) or final
        is left alone.
        """
        check_transition(Status.FAILED, Status.OUTCOME_UNKNOWN)
        now = self._now_sql()
        statement = (
            update(operations)
            .where(
                operations.c.id == current.id,
                operations.c.status.in_([Status.FAILED.value, Status.OUTCOME_UNKNOWN.value]),
            )
            .values(error=None, **_unknown_from(now, LATE_SEND))
        )
        async with self.engine.begin() as conn:
            await conn.execute(statement)

    async def renew_leases(self, leases: Mapping[int, str], seconds: float) -> set[int]:
        """Extend the `in_flight` leases `{operation id: owner}` by `seconds`, in one statement.

        Returns the ids whose owner still held the lease; an owner missing from it has lost its
        lease and can no longer record its outcome.
        """
        if not leases:
            return set()
        return await self.writer.renew(leases, self._at(seconds))

    async def expire(self, current: OperationRecord) -> OperationRecord | LeaseHeld | None:
        """Turn an `in_flight` operation whose lease ran out into `outcome_unknown`.

        The ledger's clock judges (module docstring): the new row if the lease had run out,
        `LeaseHeld` while it runs, None when the row changed meanwhile.
        """
        if current.status is not Status.IN_FLIGHT:
            raise ValueError("only an in_flight operation can be expired")
        check_transition(current.status, Status.OUTCOME_UNKNOWN)
        lease = operations.c.lease_expires_at
        if self._watches:
            left = self._watch.seconds_left(current)
            if left > 0:
                return LeaseHeld(left)
            # Expire it only as it was watched: a renewal since then would change its expiry.
            ran_out: ColumnElement[bool] = (
                lease.is_(None)
                if current.lease_expires_at is None
                else (lease == current.lease_expires_at)
            )
        else:
            ran_out = or_(lease.is_(None), lease <= self._now_sql())
        now = self._now_sql()
        statement = (
            update(operations)
            .where(
                operations.c.id == current.id,
                operations.c.version == current.version,
                operations.c.status == Status.IN_FLIGHT.value,
                ran_out,
            )
            # The old writer may have sent until its fence closed, which is before now: the
            # settle window of its write counts from here (see `last_sent_at`).
            .values(lease_owner=None, lease_expires_at=None, **_unknown_from(now, LEASE_EXPIRED))
            .returning(operations)
        )
        async with self.engine.begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
            if row is not None:
                self._watch.forget(current.id)
                await close_taken_over(conn, [current.id], now, LEASE_EXPIRED)
                return OperationRecord.from_row(row)
            if self._watches:
                return None
            held = select(operations.c.version, lease - self._now_sql()).where(
                operations.c.id == current.id, operations.c.status == Status.IN_FLIGHT.value
            )
            still = (await conn.execute(held)).first()
        if still is None or still[0] != current.version:
            return None
        return LeaseHeld(max(still[1].total_seconds(), 0.0))

    async def transition(
        self, current: OperationRecord, target: Status, **values: Any
    ) -> OperationRecord | None:
        """A generic compare-and-set transition for the reconciler and operators."""
        check_transition(current.status, target)
        async with self.engine.begin() as conn:
            now = await self.now_in(conn)
            return await compare_and_set(conn, current, {"status": target.value, **values}, now)

    async def record_attempt(self, operation_id: int, kind: AttemptKind, **values: Any) -> None:
        """Append an audited non-execution attempt (a lookup, an operator resolution)."""
        async with self.engine.begin() as conn:
            now = await self.now_in(conn)
            row = {"started_at": now, "finished_at": now, **values}
            await conn.execute(
                insert(attempts).values(operation_id=operation_id, kind=kind.value, **row)
            )

    async def record_absence(self, current: OperationRecord, **values: Any) -> None:
        """Append the lookup attempt that proved `current`'s last execution had no effect, and
        close that execution as `failed`, in one transaction (its key then runs again)."""
        async with self.engine.begin() as conn:
            now = await self.now_in(conn)
            row = {"started_at": now, "finished_at": now, **values}
            await conn.execute(
                insert(attempts).values(
                    operation_id=current.id, kind=AttemptKind.LOOKUP.value, **row
                )
            )
            await close_executions(conn, [current.id], Status.FAILED, now)

    # -- reconciliation ------------------------------------------------------------------

    async def claim_due(
        self,
        *,
        limit: int,
        lease_seconds: float,
        tools: Sequence[str],
        older_than: float = 0.0,
        scope: str | None = None,
    ) -> DueBatch:
        """Lease up to `limit` operations reconciliation should look at now, longest-due first
        (only those whose last execution was sent `older_than` seconds ago or earlier).

        `in_flight` rows whose lease ran out (a crashed worker) become `outcome_unknown` first.
        Rows are locked with `FOR UPDATE SKIP LOCKED`, so concurrent workers never wait on or
        share a row; the lease is `next_check_at` (a leased row is not due until it runs out) and
        the version bump fences a worker that overran it. SQLite renders no FOR UPDATE: its
        BEGIN IMMEDIATE serialises claims instead (taken only once a read found something to
        claim), and its leases are judged by watching them.
        `scope` None: every scope.
        """
        check_transition(Status.IN_FLIGHT, Status.OUTCOME_UNKNOWN)
        now = self._now_sql()
        sent_before = self._now_sql(-older_than) if older_than > 0 else None
        if self._watches:
            # Look before taking the write lock: a pass that finds nothing (a worker's every
            # pass while all is well) would hold up the guarded writes for nothing.
            async with self._reads.connect() as conn:
                run_out, watched = await self._watched_run_out(
                    conn, limit, tools, sent_before, scope
                )
                unknown = _due_query(_UNKNOWN, now, tools, sent_before, scope).limit(1)
                if not run_out and (await conn.execute(unknown)).first() is None:
                    return DueBatch([], 0, watched)
        async with self.engine.begin() as conn:
            crashed: Select[Any] | builtins.list[int]
            watching: float | None = None
            if self._watches:
                crashed, watching = await self._watched_run_out(
                    conn, limit, tools, sent_before, scope
                )
            else:
                crashed = _claimable(_CRASHED, now, limit, tools, sent_before, scope)
            expired = await conn.execute(
                update(operations)
                .where(operations.c.id.in_(crashed))
                .values(
                    status=Status.OUTCOME_UNKNOWN.value,
                    lease_owner=None,
                    lease_expires_at=None,
                    last_code=LEASE_EXPIRED,
                    last_sent_at=now,  # as in `expire`
                    next_check_at=now,
                    version=operations.c.version + 1,
                    updated_at=now,
                )
                .returning(operations.c.id)
            )
            expired_ids = expired.scalars().all()
            await close_taken_over(conn, expired_ids, now, LEASE_EXPIRED)
            for operation_id in expired_ids:
                self._watch.forget(operation_id)
            leased = await conn.execute(
                update(operations)
                .where(
                    operations.c.id.in_(_claimable(_UNKNOWN, now, limit, tools, sent_before, scope))
                )
                .values(
                    next_check_at=self._now_sql(lease_seconds),
                    version=operations.c.version + 1,
                )
                .returning(operations)
            )
            rows = [OperationRecord.from_row(row) for row in leased.mappings()]
        return DueBatch(rows, len(expired_ids), watching)

    async def _watched_run_out(
        self,
        conn: AsyncConnection,
        limit: int,
        tools: Sequence[str],
        sent_before: ColumnElement[datetime] | datetime | None,
        scope: str | None,
    ) -> tuple[builtins.list[int], float | None]:
        """On SQLite: the ids of `in_flight` operations whose lease this process has watched run
        out, and how long until the next lease that looks expired by this process's clock has
        been watched long enough (None: none). Every in_flight lease is a candidate, whatever its
        wall-clock expiry says; those never renewed sort first."""
        query = _in_flight(tools, sent_before, scope)
        query = query.order_by(operations.c.lease_expires_at).limit(limit)
        candidates = [
            OperationRecord.from_row(row) for row in (await conn.execute(query)).mappings()
        ]
        left, pending = self._sight(candidates)
        return [id_ for id_, seconds in left.items() if seconds == 0], min(pending, default=None)

    async def watch_leases(
        self, *, tools: Sequence[str], older_than: float = 0.0, scope: str | None = None
    ) -> float | None:
        """On SQLite: sight every `in_flight` lease a pass could take over, and return how long
        until the last of those that look expired by this process's clock has been watched for a
        whole lease (None: none looks expired). A pass that waits that long once takes over every
        crashed lease it had at its start, not only its first batch (`claim_due` looks at one
        batch at a time). Read a page at a time, so memory stays bounded; the watch keeps at most
        `_lease_watch._WATCHED` sightings. PostgreSQL judges leases on its clock: None."""
        if not self._watches:
            return None
        sent_before = self._now_sql(-older_than) if older_than > 0 else None
        longest = 0.0  # every pending time is > 0
        after = 0
        async with self._reads.connect() as conn:
            while True:
                query = _in_flight(tools, sent_before, scope).where(operations.c.id > after)
                page = [
                    OperationRecord.from_row(row)
                    for row in (
                        await conn.execute(query.order_by(operations.c.id).limit(_WATCH_PAGE))
                    ).mappings()
                ]
                _, pending = self._sight(page)
                longest = max([longest, *pending])
                if len(page) < _WATCH_PAGE:
                    return longest or None
                after = page[-1].id

    def _sight(
        self, candidates: Sequence[OperationRecord]
    ) -> tuple[dict[int, float], builtins.list[float]]:
        """Each candidate's time left to watch (`LeaseWatch.seconds_left`), and those times of
        the ones still to watch whose lease looks expired by this process's clock."""
        left = {op.id: self._watch.seconds_left(op) for op in candidates}
        now = self.clock.now()
        pending = [
            left[op.id]
            for op in candidates
            if left[op.id] > 0 and (op.lease_expires_at is None or op.lease_expires_at <= now)
        ]
        return left, pending

    async def count_due(
        self, *, tools: Sequence[str], older_than: float = 0.0, scope: str | None = None
    ) -> int:
        """How many operations `claim_due` would hand out now (an estimate while others claim;
        on SQLite, crashed leases count by their wall-clock expiry)."""
        now = self._now_sql()
        sent_before = self._now_sql(-older_than) if older_than > 0 else None
        total = 0
        async with self._reads.connect() as conn:
            for due in (_CRASHED, _UNKNOWN):
                query = _due_query(due, now, tools, sent_before, scope).subquery()
                total += (await conn.execute(select(func.count()).select_from(query))).scalar_one()
        return total

    async def attempts_of(
        self, operation_ids: Sequence[int]
    ) -> Mapping[int, Sequence[AttemptRecord]]:
        """The attempts of several operations in one query, by operation id, each in order."""
        found: dict[int, list[AttemptRecord]] = {operation_id: [] for operation_id in operation_ids}
        if not operation_ids:
            return found
        query = (
            select(attempts)
            .where(attempts.c.operation_id.in_(operation_ids))
            .order_by(attempts.c.operation_id, attempts.c.id)
        )
        async with self._reads.connect() as conn:
            for row in (await conn.execute(query)).mappings():
                found[row["operation_id"]].append(AttemptRecord.from_row(row))
        return found

    async def settle(
        self,
        current: OperationRecord,
        kind: AttemptKind,
        attempt: dict[str, Any],
        *,
        status: Status | None = None,
        record_if_lost: bool = True,
        **values: Any,
    ) -> OperationRecord | None:
        """Append an audited attempt and compare-and-set the operation in one transaction."""
        settlement = Settlement(current, kind, attempt, status, values, record_if_lost)
        return (await self.settle_many([settlement]))[0]

    async def settle_many(
        self, settlements: Sequence[Settlement]
    ) -> builtins.list[OperationRecord | None]:
        """Apply several settlements in one transaction (one commit for a reconciler's batch).

        Each is a compare-and-set on its own row; the result is the new row, or None where
        another actor changed the row first. A lookup's evidence is kept even then
        (`record_if_lost`); an operator's act is recorded only if it took effect.
        """
        for settlement in settlements:
            if settlement.status is not None:
                check_transition(settlement.current.status, settlement.status)
        rows: list[OperationRecord | None] = []
        async with self.engine.begin() as conn:
            now = await self.now_in(conn)
            if len(settlements) > 1 and not self.writer.in_process:
                rows = await _compare_and_set_many(conn, settlements, now)
            else:  # in-process statements are calls: one per row costs nothing much
                for settlement in settlements:
                    rows.append(
                        await compare_and_set(conn, settlement.current, settlement.changes(), now)
                    )
            landed = [
                (settlement.current.id, settlement.status)
                for settlement, row in zip(settlements, rows, strict=True)
                if row is not None
            ]
            await close_settled(conn, landed, now)
            audited = [
                _attempt_row(settlement, now)
                for settlement, row in zip(settlements, rows, strict=True)
                if row is not None or settlement.record_if_lost
            ]
            if audited:
                await conn.execute(insert(attempts), audited)
        return rows


def _operation_values(intent: Intent, at: Callable[[float], Moment]) -> dict[str, Any]:
    """Every column of a new operation but its id, with times from `at(offset)`."""
    now = at(0.0)
    return {
        "scope": intent.scope,
        "key": intent.key,
        "tool": intent.tool,
        "fingerprint": intent.fingerprint,
        "status": Status.IN_FLIGHT.value,
        "version": 1,
        "lease_owner": intent.owner,
        "lease_expires_at": at(intent.lease_seconds),
        "executions": 1,
        "max_executions": intent.max_executions,
        "arguments": intent.arguments,
        "auth_hash": intent.auth_hash,
        "last_sent_at": now,
        "checks": 0,
        "created_at": now,
        "updated_at": now,
        "result": None,
        "error": None,
        "last_code": None,
        "next_check_at": None,
    }


# -- reconciliation ----------------------------------------------------------------------

LEASE_EXPIRED = "LEASE_EXPIRED"
"""`last_code` the reconciler gives an operation whose executing worker lost its lease."""


def _unknown_from(now: ColumnElement[datetime] | datetime, code: str) -> dict[str, Any]:
    """The values that make an operation `outcome_unknown` (for `code`) with its settle window,
    and its next check, from `now`."""
    return {
        "status": Status.OUTCOME_UNKNOWN.value,
        "last_code": code,
        "last_sent_at": now,
        "next_check_at": now,
        "version": operations.c.version + 1,
        "updated_at": now,
    }


_MAY_HAVE_SENT = frozenset({Status.SUCCEEDED, Status.OUTCOME_UNKNOWN})
"""How an execution ended when it may have had an effect."""

LATE_SEND = "LATE_SEND"
"""`last_code` of an operation an execution fenced off reported it may have sent to after all."""


@dataclass(frozen=True, slots=True)
class DueBatch:
    """Operations leased to one reconciler, and how many crashed leases were expired on the way."""

    operations: list[OperationRecord]
    expired: int
    # SQLite: seconds until a lease that looks crashed has been watched for a whole lease.
    watching: float | None = None


@dataclass(frozen=True, slots=True)
class Settlement:
    """An audited attempt (a lookup, an operator's act) and the compare-and-set it justifies."""

    current: OperationRecord
    kind: AttemptKind
    attempt: dict[str, Any]
    status: Status | None = None
    values: dict[str, Any] = field(default_factory=dict)
    record_if_lost: bool = True

    def changes(self) -> dict[str, Any]:
        """The columns this settlement sets, status included. A success clears `last_code` and
        `error`: the failure or takeover it was unknown by no longer describes it (its attempt
        keeps the envelope the caller got)."""
        if self.status is None:
            return dict(self.values)
        cleared = {"last_code": None, "error": None} if self.status is Status.SUCCEEDED else {}
        return {**cleared, **self.values, "status": self.status.value}


async def _compare_and_set_many(
    conn: AsyncConnection, settlements: Sequence[Settlement], now: datetime
) -> list[OperationRecord | None]:
    """Many compare-and-sets as one `UPDATE … FROM (VALUES …)`: one round trip for a batch.

    Rows carry every column any settlement sets; where one does not set it, its row repeats
    the value it was read with, which the version match proves is still the stored one.
    """
    changes = [settlement.changes() for settlement in settlements]
    names = sorted(set().union(*changes))
    settled = values(
        column("id", operations.c.id.type),
        column("version", operations.c.version.type),
        *(column(name, operations.c[name].type) for name in names),
        name="settled",
    ).data(
        [
            (
                settlement.current.id,
                settlement.current.version,
                *(change.get(name, getattr(settlement.current, name)) for name in names),
            )
            for settlement, change in zip(settlements, changes, strict=True)
        ]
    )
    statement = (
        update(operations)
        .where(operations.c.id == settled.c.id, operations.c.version == settled.c.version)
        .values(
            version=operations.c.version + 1,
            updated_at=now,
            # A column that is NULL in every row would be typed text: cast it back.
            **{name: sql_cast(settled.c[name], operations.c[name].type) for name in names},
        )
        .returning(operations)
    )
    found = {
        row["id"]: OperationRecord.from_row(row)
        for row in (await conn.execute(statement)).mappings()
    }
    return [found.get(settlement.current.id) for settlement in settlements]


_ATTEMPT_COLUMNS = tuple(column.name for column in attempts.columns if column.name != "id")


def _attempt_row(settlement: Settlement, now: datetime) -> dict[str, Any]:
    # Every row names every column, so that the rows insert together as one statement.
    row: dict[str, Any] = dict.fromkeys(_ATTEMPT_COLUMNS)
    row.update({"started_at": now, "finished_at": now, **settlement.attempt})
    row.update(operation_id=settlement.current.id, kind=settlement.kind.value)
    return row


@dataclass(frozen=True, slots=True)
class _Due:
    status: Status
    column: ColumnElement[Any]  # when the row becomes due; the (status, column) index serves it


_CRASHED = _Due(Status.IN_FLIGHT, operations.c.lease_expires_at)
_UNKNOWN = _Due(Status.OUTCOME_UNKNOWN, operations.c.next_check_at)


_WATCH_PAGE = 1_000
"""`in_flight` rows `Ledger.watch_leases` reads at a time."""


def _in_flight(
    tools: Sequence[str],
    sent_before: ColumnElement[datetime] | datetime | None,
    scope: str | None,
) -> Select[Any]:
    """The `in_flight` operations of `tools` a pass could take over (SQLite's candidates)."""
    query = select(operations).where(
        operations.c.status == Status.IN_FLIGHT.value, operations.c.tool.in_(tools)
    )
    if sent_before is not None:
        query = query.where(operations.c.last_sent_at <= sent_before)
    if scope is not None:
        query = query.where(operations.c.scope == scope)
    return query


def _due_query(
    due: _Due,
    now: ColumnElement[datetime] | datetime,
    tools: Sequence[str],
    sent_before: ColumnElement[datetime] | datetime | None,
    scope: str | None,
) -> Select[Any]:
    query = select(operations.c.id).where(
        status_in([due.status]),
        due.column <= now,
        operations.c.tool.in_(tools),
    )
    if sent_before is not None:
        query = query.where(operations.c.last_sent_at <= sent_before)
    if scope is not None:
        query = query.where(operations.c.scope == scope)
    return query


def _claimable(
    due: _Due,
    now: ColumnElement[datetime] | datetime,
    limit: int,
    tools: Sequence[str],
    sent_before: ColumnElement[datetime] | datetime | None,
    scope: str | None,
) -> Select[Any]:
    # The longest-due rows nobody else holds; locked until the claim commits. The order is the
    # index's own, so the scan stops after `limit` rows however many are due (any tiebreaker
    # column would make PostgreSQL sort the whole due set on every claim).
    return (
        _due_query(due, now, tools, sent_before, scope)
        .order_by(due.column)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
