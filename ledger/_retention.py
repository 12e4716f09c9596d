"""Retention: final operations, with their attempts, are deleted in short batches once past it.

Only `succeeded` and `failed` operations whose last change is older than the retention period are
deleted; `in_flight`, `outcome_unknown` and `needs_attention` ones are never touched, however old.
A key whose operation was deleted is free: the next call with it is a new operation.

The pruner walks the primary key in windows of `batch_size` rows, so each batch reads a bounded
number of rows through the one index every table has, and needs no index of its own over every
operation (each one costs bytes and page writes on every guarded call, docs/performance.md). A row
is created before its last change, and ids grow with creation, so once a whole window was created
after the cutoff the rows beyond it cannot be due either and the pass ends (a row a client's clock
skew put out of place waits for the next pass). Each batch is one short transaction: on
PostgreSQL it skips rows another transaction holds (`FOR UPDATE SKIP LOCKED`) instead of waiting
for them, and a row a guarded call changed meanwhile no longer matches; on SQLite it holds the
write lock for one batch only.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from writesafe.ledger._ledger import Ledger
from writesafe.ledger._models import status_in
from writesafe.ledger._states import Status
from writesafe.ledger._writer import attempts, operations

FINAL_STATES = (Status.SUCCEEDED, Status.FAILED)
"""The states an operation may be pruned in."""

DEFAULT_BATCH_SIZE = 500
"""Operations deleted per transaction: small enough that no guarded call waits long for a lock."""


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What one pruning pass removed, and what it cost."""

    operations: int = 0
    attempts: int = 0
    batches: int = 0
    seconds: float = 0.0
    cutoff: datetime | None = None  # final operations last changed before it were due

    def __add__(self, other: PruneReport) -> PruneReport:
        return PruneReport(
            operations=self.operations + other.operations,
            attempts=self.attempts + other.attempts,
            batches=self.batches + other.batches,
            seconds=self.seconds + other.seconds,
            cutoff=other.cutoff or self.cutoff,
        )


async def prune(
    ledger: Ledger,
    retention: timedelta,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    stop: asyncio.Event | None = None,
) -> PruneReport:
    """Delete the final operations (and their attempts) last changed more than `retention` ago.

    Runs batch after batch until none is due or `stop` is set (the batch in hand completes).
    """
    if retention <= timedelta(0):
        raise ValueError("retention must be positive")
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    started = time.perf_counter()
    # The clock that stamps the rows: PostgreSQL's own, the process's on SQLite.
    cutoff = await ledger.now() - retention
    removed_operations = removed_attempts = batches = 0
    after = 0
    while stop is None or not stop.is_set():
        async with ledger.engine.begin() as conn:
            window = await _window(conn, after, batch_size)
            if not window:
                break
            doomed = await _lock_due(conn, after, window[-1][0], cutoff)
            if doomed:
                gone, gone_attempts = await _delete(conn, doomed)
                removed_operations += gone
                removed_attempts += gone_attempts
        batches += 1
        after = window[-1][0]
        if len(window) < batch_size or min(created for _, created in window) >= cutoff:
            break
        await asyncio.sleep(0)  # let the guarded calls queued behind the batch go first
    return PruneReport(
        operations=removed_operations,
        attempts=removed_attempts,
        batches=batches,
        seconds=time.perf_counter() - started,
        cutoff=cutoff,
    )


async def _window(conn: AsyncConnection, after: int, size: int) -> list[tuple[int, datetime]]:
    """The next `size` operations after id `after`, in id order: (id, created_at)."""
    query = (
        select(operations.c.id, operations.c.created_at)
        .where(operations.c.id > after)
        .order_by(operations.c.id)
        .limit(size)
    )
    return [(row.id, row.created_at) for row in await conn.execute(query)]


async def _lock_due(conn: AsyncConnection, after: int, last: int, cutoff: datetime) -> list[int]:
    """The ids in `(after, last]` due for pruning, locked; rows others hold are skipped."""
    query = (
        select(operations.c.id)
        .where(
            operations.c.id > after,
            operations.c.id <= last,
            status_in(FINAL_STATES),
            operations.c.updated_at < cutoff,
        )
        .with_for_update(skip_locked=True)
    )
    return list((await conn.execute(query)).scalars())


async def _delete(conn: AsyncConnection, ids: list[int]) -> tuple[int, int]:
    """Delete the operations `ids` and their attempts: (operations, attempts) removed."""
    gone_attempts = await conn.execute(delete(attempts).where(attempts.c.operation_id.in_(ids)))
    gone = await conn.execute(delete(operations).where(operations.c.id.in_(ids)))
    return gone.rowcount, gone_attempts.rowcount
