"""The ledger's reads: for the service, `status`, the CLI and the reconciler's reports.

They run on the reading engine (`_engine.reader`): on SQLite a read takes no lock the guard's
writers need.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, func, literal, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncEngine

from writesafe.ledger._models import status_in
from writesafe.ledger._records import AttemptRecord, OperationRecord
from writesafe.ledger._states import Status
from writesafe.ledger._writer import Writer, attempts, operations


class Reads:
    """Reads of operations and attempts (`Ledger` composes them)."""

    writer: Writer
    _reads: AsyncEngine

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
