"""How the ledger judges that an `in_flight` lease ran out: on the store's clock, or by watching.

PostgreSQL has a clock every process shares: a lease ran out when its expiry is past on it, and
crashed leases are taken over `FOR UPDATE SKIP LOCKED`, one pass each. SQLite has none (each
process's clock may be off): a lease ran out when this process has watched it unchanged for a
whole lease (`ledger._lease_watch`), whatever its wall-clock expiry says. The writer says which
holds (`Writer.shared_clock`); the reconciliation asks its judge, never which backend it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import ColumnElement, Select, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from writesafe.ledger._clock import Clock
from writesafe.ledger._due import (
    CRASHED,
    UNKNOWN,
    Narrowing,
    When,
    claimable,
    due_query,
    in_flight,
)
from writesafe.ledger._lease_watch import LeaseWatch
from writesafe.ledger._records import OperationRecord
from writesafe.ledger._states import Status
from writesafe.ledger._writer import operations

_WATCH_PAGE = 1_000
"""`in_flight` rows `WatchJudge.watch` reads at a time."""


@dataclass(frozen=True, slots=True)
class LeaseHeld:
    """An `in_flight` lease that has not run out on the ledger's clock, for `seconds_left`."""

    seconds_left: float


class LeaseJudge(Protocol):
    """What `Reconciliation` asks before and while it takes over a lease."""

    def held(self, current: OperationRecord) -> LeaseHeld | None:
        """Before taking over `current`: its lease if the judge knows already that it runs."""

    def ran_out(self, current: OperationRecord, now: When) -> ColumnElement[bool]:
        """The condition under which the row of `current` may be taken over at `now`."""

    async def still_held(
        self, conn: AsyncConnection, current: OperationRecord, now: When
    ) -> LeaseHeld | None:
        """After a takeover of `current` changed nothing: its lease if it still runs at
        `current`'s version; None when the row moved on (or the judge cannot tell)."""

    async def quiet(
        self, reads: AsyncEngine, now: When, limit: int, narrowing: Narrowing
    ) -> tuple[bool, float | None]:
        """Whether a look without the write lock finds nothing a pass could claim (a worker's
        every pass while all is well), and the watch's wait (`DueBatch.watching`). A judge whose
        claims take no lock others wait on does not look: `(False, None)`."""

    async def crashed(
        self, conn: AsyncConnection, now: When, limit: int, narrowing: Narrowing
    ) -> tuple[Select[Any] | list[int], float | None]:
        """The crashed leases to take over in `conn`'s transaction (a query of their ids, or
        the ids), and the watch's wait (`DueBatch.watching`)."""

    async def watch(self, reads: AsyncEngine, narrowing: Narrowing) -> float | None:
        """Sight the leases a pass could take over: how long until the last that looks expired
        has been watched for a whole lease (`Ledger.watch_leases`); None: no wait."""

    def forget(self, operation_id: int) -> None:
        """The lease of `operation_id` was taken over: there is nothing left to judge."""


class ClockJudge:
    """Leases judged on the store's clock (PostgreSQL)."""

    def held(self, current: OperationRecord) -> LeaseHeld | None:
        return None  # the statement's own clock judges

    def ran_out(self, current: OperationRecord, now: When) -> ColumnElement[bool]:
        lease = operations.c.lease_expires_at
        return or_(lease.is_(None), lease <= now)

    async def still_held(
        self, conn: AsyncConnection, current: OperationRecord, now: When
    ) -> LeaseHeld | None:
        held = select(operations.c.version, operations.c.lease_expires_at - now).where(
            operations.c.id == current.id, operations.c.status == Status.IN_FLIGHT.value
        )
        still = (await conn.execute(held)).first()
        if still is None or still[0] != current.version:
            return None
        return LeaseHeld(max(still[1].total_seconds(), 0.0))

    async def quiet(
        self, reads: AsyncEngine, now: When, limit: int, narrowing: Narrowing
    ) -> tuple[bool, float | None]:
        return False, None  # `SKIP LOCKED` claims hold up nobody: no look first

    async def crashed(
        self, conn: AsyncConnection, now: When, limit: int, narrowing: Narrowing
    ) -> tuple[Select[Any] | list[int], float | None]:
        return claimable(CRASHED, now, limit, narrowing), None

    async def watch(self, reads: AsyncEngine, narrowing: Narrowing) -> float | None:
        return None  # nothing to watch: the store's clock judges

    def forget(self, operation_id: int) -> None:
        """Nothing kept."""


class WatchJudge:
    """Leases judged by watching them (SQLite: no clock the processes share)."""

    def __init__(self, watch: LeaseWatch, clock: Clock) -> None:
        self._watch, self._clock = watch, clock

    def held(self, current: OperationRecord) -> LeaseHeld | None:
        left = self._watch.seconds_left(current)
        return LeaseHeld(left) if left > 0 else None

    def ran_out(self, current: OperationRecord, now: When) -> ColumnElement[bool]:
        # Take it over only as it was watched: a renewal since then would change its expiry.
        lease = operations.c.lease_expires_at
        if current.lease_expires_at is None:
            return lease.is_(None)
        return lease == current.lease_expires_at

    async def still_held(
        self, conn: AsyncConnection, current: OperationRecord, now: When
    ) -> LeaseHeld | None:
        return None  # a renewal or another pass moved it on: watched anew next time

    async def quiet(
        self, reads: AsyncEngine, now: When, limit: int, narrowing: Narrowing
    ) -> tuple[bool, float | None]:
        # A claim takes the write lock (BEGIN IMMEDIATE): a pass that finds nothing would hold
        # up the guarded writes for nothing.
        async with reads.connect() as conn:
            run_out, watched = await self._run_out(conn, limit, narrowing)
            unknown = due_query(UNKNOWN, now, narrowing).limit(1)
            return not run_out and (await conn.execute(unknown)).first() is None, watched

    async def crashed(
        self, conn: AsyncConnection, now: When, limit: int, narrowing: Narrowing
    ) -> tuple[Select[Any] | list[int], float | None]:
        return await self._run_out(conn, limit, narrowing)

    async def watch(self, reads: AsyncEngine, narrowing: Narrowing) -> float | None:
        """Read a page at a time, so memory stays bounded; the watch keeps at most
        `_lease_watch._WATCHED` sightings."""
        longest = 0.0  # every pending time is > 0
        after = 0
        async with reads.connect() as conn:
            while True:
                query = in_flight(narrowing).where(operations.c.id > after)
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

    def forget(self, operation_id: int) -> None:
        self._watch.forget(operation_id)

    async def _run_out(
        self, conn: AsyncConnection, limit: int, narrowing: Narrowing
    ) -> tuple[list[int], float | None]:
        """The ids of `in_flight` operations whose lease this process has watched run out, and
        how long until the next lease that looks expired by this process's clock has been
        watched long enough (None: none). Every in_flight lease is a candidate, whatever its
        wall-clock expiry says; those never renewed sort first."""
        query = in_flight(narrowing)
        query = query.order_by(operations.c.lease_expires_at).limit(limit)
        candidates = [
            OperationRecord.from_row(row) for row in (await conn.execute(query)).mappings()
        ]
        left, pending = self._sight(candidates)
        return [id_ for id_, seconds in left.items() if seconds == 0], min(pending, default=None)

    def _sight(self, candidates: Sequence[OperationRecord]) -> tuple[dict[int, float], list[float]]:
        """Each candidate's time left to watch (`LeaseWatch.seconds_left`), and those times of
        the ones still to watch whose lease looks expired by this process's clock."""
        left = {op.id: self._watch.seconds_left(op) for op in candidates}
        now = self._clock.now()
        pending = [
            left[op.id]
            for op in candidates
            if left[op.id] > 0 and (op.lease_expires_at is None or op.lease_expires_at <= now)
        ]
        return left, pending


def judge_leases(shared_clock: bool, clock: Clock, lease_seconds: float) -> LeaseJudge:
    """The judge for a store with a clock the processes share, or without one (`lease_seconds`:
    how long the writers' leases last; a lease seen unchanged that long ran out)."""
    if shared_clock:
        return ClockJudge()
    return WatchJudge(LeaseWatch(clock, lease_seconds), clock)
