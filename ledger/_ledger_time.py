"""The ledger's time: one clock for every judgement that crosses processes.

Time is judged on one clock: PostgreSQL's. Leases, due checks and settle windows are written and
compared with the server's `now()`, never with the time of whichever process looks (its clock may
be off). SQLite has no server clock: there a lease is judged by what this process has watched
(`writesafe.ledger._lease_watch`). A `Clock` given to the ledger replaces the server's, for tests.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from writesafe.ledger._clock import Clock, store_time
from writesafe.ledger._writer import Moment


class LedgerTime:
    """The ledger's clock, for each of its jobs (`Ledger` composes them)."""

    clock: Clock
    server_clock: bool  # True: time is the server's `now()`
    _reads: AsyncEngine

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
