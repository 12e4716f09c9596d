"""The ledger: durable intent before effect, and fenced compare-and-set transitions.

Every state change is `UPDATE … WHERE id = :id AND version = :version` (plus the lease owner when
an attempt finishes), checked against the state machine first. A writer whose lease was taken
over therefore changes nothing: it sees `False` and must not claim the outcome it observed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, Table, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledger._clock import Clock, SystemClock
from ledger._engine import create_engine, is_sqlite
from ledger._migrations import ensure_current, upgrade
from ledger._models import Attempt, Operation
from ledger._records import AttemptKind, AttemptRecord, OperationRecord
from ledger._states import Status, check_transition

operations = cast(Table, Operation.__table__)
attempts = cast(Table, Attempt.__table__)


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
class Claim:
    """The row after a claim; `created` is True when this caller's intent became the operation."""

    operation: OperationRecord
    created: bool


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

    def __init__(self, engine: AsyncEngine, clock: Clock | None = None) -> None:
        self.engine = engine
        self.clock: Clock = clock or SystemClock()
        self._insert: Any = sqlite.insert if is_sqlite(engine) else postgresql.insert

    @classmethod
    def from_url(
        cls,
        url: str | URL,
        *,
        schema: str | None = None,
        clock: Clock | None = None,
        connect_timeout: float = 5.0,
    ) -> Ledger:
        return cls(create_engine(url, schema=schema, connect_timeout=connect_timeout), clock)

    @property
    def is_sqlite(self) -> bool:
        return is_sqlite(self.engine)

    async def migrate(self) -> None:
        """Bring the schema to the newest migration."""
        await upgrade(self.engine)

    async def check_schema(self) -> None:
        """Raise `LedgerNotMigrated` unless the schema is current."""
        await ensure_current(self.engine)

    async def close(self) -> None:
        await self.engine.dispose()

    # -- reads ---------------------------------------------------------------------------

    async def get(self, scope: str, key: str) -> OperationRecord | None:
        async with self.engine.connect() as conn:
            return await _fetch(conn, scope, key)

    async def attempts(self, operation_id: int) -> list[AttemptRecord]:
        query = (
            select(attempts).where(attempts.c.operation_id == operation_id).order_by(attempts.c.id)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [AttemptRecord.from_row(row) for row in rows]

    async def list(
        self,
        *,
        statuses: Sequence[Status] | None = None,
        tool: str | None = None,
        scope: str | None = None,
        limit: int = 100,
    ) -> list[OperationRecord]:
        """Operations by status/tool/scope, oldest change first (served by the status indexes)."""
        query = select(operations).order_by(operations.c.updated_at, operations.c.id).limit(limit)
        if statuses:
            query = query.where(operations.c.status.in_([s.value for s in statuses]))
        if tool is not None:
            query = query.where(operations.c.tool == tool)
        if scope is not None:
            query = query.where(operations.c.scope == scope)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return [OperationRecord.from_row(row) for row in rows]

    # -- claims --------------------------------------------------------------------------

    async def claim(self, intent: Intent) -> Claim:
        """Insert the intent as a new `in_flight` operation, or return the row holding the key.

        One transaction: the unique `(scope, key)` constraint decides between concurrent claimers.
        """
        now = self.clock.now()
        row = _operation_values(intent, now)
        statement = (
            self._insert(operations)
            .values(**row)
            .on_conflict_do_nothing(index_elements=["scope", "key"])
            .returning(operations)
        )
        async with self.engine.begin() as conn:
            inserted = (await conn.execute(statement)).mappings().first()
            if inserted is None:
                existing = await _fetch(conn, intent.scope, intent.key)
                assert existing is not None, "a conflicting row exists inside this transaction"
                return Claim(existing, created=False)
            operation = OperationRecord.from_row(inserted)
            await _start_execution(conn, operation, intent, now)
        return Claim(operation, created=True)

    async def restart(self, current: OperationRecord, intent: Intent) -> OperationRecord | None:
        """Begin another execution of a `failed` or `outcome_unknown` operation (a continuation).

        Returns the new row, or None when another caller changed the operation first.
        """
        check_transition(current.status, Status.IN_FLIGHT)
        now = self.clock.now()
        values = {
            "status": Status.IN_FLIGHT.value,
            "fingerprint": intent.fingerprint,
            "arguments": intent.arguments,
            "auth_hash": intent.auth_hash,
            "lease_owner": intent.owner,
            "lease_expires_at": now + timedelta(seconds=intent.lease_seconds),
            "executions": current.executions + 1,
            "last_sent_at": now,
            "next_check_at": None,
            "checks": 0,
        }
        async with self.engine.begin() as conn:
            row = await _compare_and_set(conn, current, values, now)
            if row is None:
                return None
            await _start_execution(conn, row, intent, now)
        return row

    async def finish(
        self, current: OperationRecord, owner: str, outcome: Outcome
    ) -> OperationRecord | None:
        """Record how the owner's execution ended; None if the owner was fenced off meanwhile.

        The attempt row keeps the owner's evidence either way: it is the owner's own record.
        """
        check_transition(current.status, outcome.status)
        now = self.clock.now()
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
        async with self.engine.begin() as conn:
            row = await _compare_and_set(conn, current, values, now, owner=owner)
            outcome_label = outcome.status.value if row is not None else "fenced"
            await _finish_execution(conn, current, owner, outcome, outcome_label, now)
        return row

    async def retry(
        self,
        current: OperationRecord,
        intent: Intent,
        failed: Outcome,
        failed_at: datetime,
    ) -> OperationRecord | None:
        """Close a failed execution and start the next one under the same lease (one CAS).

        The operation stays `in_flight` throughout an automatic retry, so no other caller can
        take the key between two executions. None if the owner was fenced off meanwhile.
        """
        check_transition(current.status, Status.IN_FLIGHT)
        now = self.clock.now()
        values = {
            "status": Status.IN_FLIGHT.value,
            "executions": current.executions + 1,
            "lease_expires_at": now + timedelta(seconds=intent.lease_seconds),
            "last_sent_at": now,
            "error": failed.error,
            "last_code": failed.code,
        }
        async with self.engine.begin() as conn:
            row = await _compare_and_set(conn, current, values, now, owner=intent.owner)
            label = Status.FAILED.value if row is not None else "fenced"
            await _finish_execution(conn, current, intent.owner, failed, label, failed_at)
            if row is not None:
                await _start_execution(conn, row, intent, now)
        return row

    async def renew_lease(self, current: OperationRecord, owner: str, seconds: float) -> bool:
        """Extend the owner's lease; False once it was lost (the owner can no longer record)."""
        until = self.clock.now() + timedelta(seconds=seconds)
        statement = (
            update(operations)
            .where(
                operations.c.id == current.id,
                operations.c.status == Status.IN_FLIGHT.value,
                operations.c.lease_owner == owner,
            )
            .values(lease_expires_at=until)
        )
        async with self.engine.begin() as conn:
            return (await conn.execute(statement)).rowcount == 1

    async def expire(self, current: OperationRecord) -> OperationRecord | None:
        """Turn an `in_flight` operation whose lease ran out into `outcome_unknown`."""
        now = self.clock.now()
        if current.status is not Status.IN_FLIGHT or not current.lease_expired(now):
            raise ValueError("only an in_flight operation with an expired lease can be expired")
        check_transition(current.status, Status.OUTCOME_UNKNOWN)
        values = {
            "status": Status.OUTCOME_UNKNOWN.value,
            "lease_owner": None,
            "lease_expires_at": None,
            "last_code": LEASE_EXPIRED,
            "next_check_at": now,
        }
        async with self.engine.begin() as conn:
            return await _compare_and_set(conn, current, values, now)

    async def transition(
        self, current: OperationRecord, target: Status, **values: Any
    ) -> OperationRecord | None:
        """A generic compare-and-set transition for the reconciler and operators."""
        check_transition(current.status, target)
        now = self.clock.now()
        async with self.engine.begin() as conn:
            return await _compare_and_set(conn, current, {"status": target.value, **values}, now)

    async def record_attempt(self, operation_id: int, kind: AttemptKind, **values: Any) -> None:
        """Append an audited non-execution attempt (a lookup, an operator resolution)."""
        now = self.clock.now()
        row = {"started_at": now, "finished_at": now, **values}
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(attempts).values(operation_id=operation_id, kind=kind.value, **row)
            )

    # -- reconciliation ------------------------------------------------------------------

    async def claim_due(
        self,
        *,
        limit: int,
        lease_seconds: float,
        tools: Sequence[str],
        sent_before: datetime | None = None,
    ) -> DueBatch:
        """Lease up to `limit` operations reconciliation should look at now, longest-due first.

        `in_flight` rows whose lease ran out (a crashed worker) become `outcome_unknown` first.
        Rows are locked with `FOR UPDATE SKIP LOCKED`, so concurrent workers never wait on or
        share a row; the lease is `next_check_at` (a leased row is not due until it runs out) and
        the version bump fences a worker that overran it. SQLite renders no FOR UPDATE: its
        BEGIN IMMEDIATE serialises claims instead.
        """
        now = self.clock.now()
        async with self.engine.begin() as conn:
            crashed = await _lock_due(conn, _CRASHED, now, limit, tools, sent_before)
            if crashed:
                check_transition(Status.IN_FLIGHT, Status.OUTCOME_UNKNOWN)
                await conn.execute(
                    update(operations)
                    .where(operations.c.id.in_(crashed))
                    .values(
                        status=Status.OUTCOME_UNKNOWN.value,
                        lease_owner=None,
                        lease_expires_at=None,
                        last_code=LEASE_EXPIRED,
                        next_check_at=now,
                        version=operations.c.version + 1,
                        updated_at=now,
                    )
                )
            due = await _lock_due(conn, _UNKNOWN, now, limit, tools, sent_before)
            if not due:
                return DueBatch([], len(crashed))
            leased = await conn.execute(
                update(operations)
                .where(operations.c.id.in_(due))
                .values(
                    next_check_at=now + timedelta(seconds=lease_seconds),
                    version=operations.c.version + 1,
                )
                .returning(operations)
            )
            rows = [OperationRecord.from_row(row) for row in leased.mappings()]
        order = {operation_id: position for position, operation_id in enumerate(due)}
        rows.sort(key=lambda row: order[row.id])
        return DueBatch(rows, len(crashed))

    async def count_due(self, *, tools: Sequence[str], sent_before: datetime | None = None) -> int:
        """How many operations `claim_due` would hand out now (an estimate while others claim)."""
        now = self.clock.now()
        total = 0
        async with self.engine.connect() as conn:
            for due in (_CRASHED, _UNKNOWN):
                query = _due_query(due, now, tools, sent_before).subquery()
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
        async with self.engine.connect() as conn:
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
        """Append an audited attempt and compare-and-set the operation in one transaction.

        A lookup's evidence is kept even when another actor changed the row first
        (`record_if_lost`); an operator's act is recorded only if it took effect.
        """
        if status is not None:
            check_transition(current.status, status)
            values["status"] = status.value
        now = self.clock.now()
        async with self.engine.begin() as conn:
            row = await _compare_and_set(conn, current, values, now)
            if row is not None or record_if_lost:
                await conn.execute(
                    insert(attempts).values(
                        operation_id=current.id,
                        kind=kind.value,
                        **{"started_at": now, "finished_at": now, **attempt},
                    )
                )
        return row


def _operation_values(intent: Intent, now: datetime) -> dict[str, Any]:
    return {
        "scope": intent.scope,
        "key": intent.key,
        "tool": intent.tool,
        "fingerprint": intent.fingerprint,
        "status": Status.IN_FLIGHT.value,
        "version": 1,
        "lease_owner": intent.owner,
        "lease_expires_at": now + timedelta(seconds=intent.lease_seconds),
        "executions": 1,
        "max_executions": intent.max_executions,
        "arguments": intent.arguments,
        "auth_hash": intent.auth_hash,
        "last_sent_at": now,
        "checks": 0,
        "created_at": now,
        "updated_at": now,
    }


async def _fetch(conn: AsyncConnection, scope: str, key: str) -> OperationRecord | None:
    query = select(operations).where(operations.c.scope == scope, operations.c.key == key)
    row = (await conn.execute(query)).mappings().first()
    return None if row is None else OperationRecord.from_row(row)


async def _start_execution(
    conn: AsyncConnection, operation: OperationRecord, intent: Intent, now: datetime
) -> None:
    await conn.execute(
        insert(attempts).values(
            operation_id=operation.id,
            kind=AttemptKind.EXECUTION.value,
            execution=operation.executions,
            owner=intent.owner,
            fingerprint=intent.fingerprint,
            outcome=Status.IN_FLIGHT.value,
            started_at=now,
        )
    )


async def _finish_execution(
    conn: AsyncConnection,
    operation: OperationRecord,
    owner: str,
    outcome: Outcome,
    label: str,
    finished_at: datetime,
) -> None:
    await conn.execute(
        update(attempts)
        .where(
            attempts.c.operation_id == operation.id,
            attempts.c.kind == AttemptKind.EXECUTION.value,
            attempts.c.execution == operation.executions,
            attempts.c.owner == owner,
        )
        .values(outcome=label, finished_at=finished_at, **outcome.attempt_values)
    )


async def _compare_and_set(
    conn: AsyncConnection,
    current: OperationRecord,
    values: dict[str, Any],
    now: datetime,
    *,
    owner: str | None = None,
) -> OperationRecord | None:
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


# -- reconciliation ----------------------------------------------------------------------

LEASE_EXPIRED = "LEASE_EXPIRED"
"""`last_code` the reconciler gives an operation whose executing worker lost its lease."""


@dataclass(frozen=True, slots=True)
class DueBatch:
    """Operations leased to one reconciler, and how many crashed leases were expired on the way."""

    operations: list[OperationRecord]
    expired: int


@dataclass(frozen=True, slots=True)
class _Due:
    status: Status
    column: ColumnElement[Any]  # when the row becomes due; the (status, column) index serves it


_CRASHED = _Due(Status.IN_FLIGHT, operations.c.lease_expires_at)
_UNKNOWN = _Due(Status.OUTCOME_UNKNOWN, operations.c.next_check_at)


def _due_query(
    due: _Due, now: datetime, tools: Sequence[str], sent_before: datetime | None
) -> Select[Any]:
    query = select(operations.c.id).where(
        operations.c.status == due.status.value,
        due.column <= now,
        operations.c.tool.in_(tools),
    )
    if sent_before is not None:
        query = query.where(operations.c.last_sent_at <= sent_before)
    return query


async def _lock_due(
    conn: AsyncConnection,
    due: _Due,
    now: datetime,
    limit: int,
    tools: Sequence[str],
    sent_before: datetime | None,
) -> list[int]:
    query = (
        _due_query(due, now, tools, sent_before)
        .order_by(due.column, operations.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list((await conn.execute(query)).scalars())
