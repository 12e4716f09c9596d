"""The reconciler's side of the ledger: taking over crashed leases, leasing due operations to
a pass, and settling them with audited attempts.

Due rows are leased `FOR UPDATE SKIP LOCKED` (SQLite renders none: `BEGIN IMMEDIATE` serialises
the claims). Whether a lease ran out, its judge says (`ledger._lease_judges`): on the store's
clock, or by watching it where the processes share none.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import cast as sql_cast
from sqlalchemy import column, func, insert, select, update, values
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from writesafe.ledger._due import CRASHED, UNKNOWN, Narrowing, claimable, due_query
from writesafe.ledger._hot_path import unknown_from
from writesafe.ledger._lease_judges import LeaseHeld, LeaseJudge
from writesafe.ledger._ledger_time import LedgerTime
from writesafe.ledger._records import AttemptKind, OperationRecord
from writesafe.ledger._states import Status, check_transition
from writesafe.ledger._superseded import close_executions, close_settled, close_taken_over
from writesafe.ledger._writer import Writer, attempts, compare_and_set, operations

LEASE_EXPIRED = "LEASE_EXPIRED"
"""`last_code` the reconciler gives an operation whose executing worker lost its lease."""


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


class Reconciliation(LedgerTime):
    """The reconciler's claims and settlements (`Ledger` composes them)."""

    engine: AsyncEngine
    writer: Writer
    _leases: LeaseJudge

    async def expire(self, current: OperationRecord) -> OperationRecord | LeaseHeld | None:
        """Turn an `in_flight` operation whose lease ran out into `outcome_unknown`.

        The ledger's clock judges (`ledger._ledger_time`): the new row if the lease had run out,
        `LeaseHeld` while it runs, None when the row changed meanwhile.
        """
        if current.status is not Status.IN_FLIGHT:
            raise ValueError("only an in_flight operation can be expired")
        check_transition(current.status, Status.OUTCOME_UNKNOWN)
        held = self._leases.held(current)
        if held is not None:
            return held
        ran_out = self._leases.ran_out(current, self._now_sql())
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
            .values(lease_owner=None, lease_expires_at=None, **unknown_from(now, LEASE_EXPIRED))
            .returning(operations)
        )
        async with self.engine.begin() as conn:
            row = (await conn.execute(statement)).mappings().first()
            if row is not None:
                self._leases.forget(current.id)
                await close_taken_over(conn, [current.id], now, LEASE_EXPIRED)
                return OperationRecord.from_row(row)
            return await self._leases.still_held(conn, current, self._now_sql())

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
        narrowing = self._narrowing(tools, older_than, scope)
        quiet, watched = await self._leases.quiet(self._reads, now, limit, narrowing)
        if quiet:
            return DueBatch([], 0, watched)
        async with self.engine.begin() as conn:
            crashed, watching = await self._leases.crashed(conn, now, limit, narrowing)
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
                self._leases.forget(operation_id)
            leased = await conn.execute(
                update(operations)
                .where(operations.c.id.in_(claimable(UNKNOWN, now, limit, narrowing)))
                .values(
                    next_check_at=self._now_sql(lease_seconds),
                    version=operations.c.version + 1,
                )
                .returning(operations)
            )
            rows = [OperationRecord.from_row(row) for row in leased.mappings()]
        return DueBatch(rows, len(expired_ids), watching)

    async def watch_leases(
        self, *, tools: Sequence[str], older_than: float = 0.0, scope: str | None = None
    ) -> float | None:
        """On SQLite: sight every `in_flight` lease a pass could take over, and return how long
        until the last of those that look expired by this process's clock has been watched for a
        whole lease (None: none looks expired). A pass that waits that long once takes over every
        crashed lease it had at its start, not only its first batch (`claim_due` looks at one
        batch at a time). Read a page at a time, so memory stays bounded; the watch keeps at most
        `_lease_watch._WATCHED` sightings. PostgreSQL judges leases on its clock: None."""
        return await self._leases.watch(self._reads, self._narrowing(tools, older_than, scope))

    async def count_due(
        self, *, tools: Sequence[str], older_than: float = 0.0, scope: str | None = None
    ) -> int:
        """How many operations `claim_due` would hand out now (an estimate while others claim;
        on SQLite, crashed leases count by their wall-clock expiry)."""
        now = self._now_sql()
        narrowing = self._narrowing(tools, older_than, scope)
        total = 0
        async with self._reads.connect() as conn:
            for due in (CRASHED, UNKNOWN):
                query = due_query(due, now, narrowing).subquery()
                total += (await conn.execute(select(func.count()).select_from(query))).scalar_one()
        return total

    def _narrowing(self, tools: Sequence[str], older_than: float, scope: str | None) -> Narrowing:
        """The operations of `tools` in `scope` last sent `older_than` seconds ago or earlier."""
        sent_before = self._now_sql(-older_than) if older_than > 0 else None
        return Narrowing(tools, sent_before, scope)

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
