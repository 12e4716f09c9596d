"""The guard's cached answer to "was the ledger restored?", checked rarely and off the hot path.

A process checks the ledger against its marks (`writesafe.ledger._restore`) as it opens it
and closes it. In between, a first execution asks `RestoreWatch.restored` with the id its claim
was given: the cached answer, unless `every` seconds have passed or the id is not above one this
process created before (a restored SQLite ledger hands its ids out again; PostgreSQL's restored
sequence does until conflicting claims have spent past them), when it checks again. Replays and
continuations never ask: the ledger knows their keys.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from writesafe.ledger import FileMark, Ledger, Level, Mark, Restored, check_restored, mark_path

if TYPE_CHECKING:
    from writesafe.idempotency._keystore import RedisKeyStore

# At most one check a second for ids that come back out of order (concurrent claims on
# PostgreSQL commit out of sequence order) rather than from a rollback.
_SUSPICIOUS_EVERY = 1.0


class CreatedMark:
    """This process's mark: the ledger's generation at its last check, and the largest id this
    process created while younger than the retention period (older, it may have been pruned:
    PostgreSQL prunes the newest row too, and its absence proves nothing)."""

    name = "process"

    def __init__(self, retention: timedelta) -> None:
        self._retention = retention.total_seconds()
        self.top = 0
        self._at = 0.0
        self._generation = 0

    def note(self, operation_id: int) -> None:
        if operation_id > self.top:
            self.top, self._at = operation_id, time.monotonic()

    async def read(self, ledger_id: str) -> Level | None:
        fresh = time.monotonic() - self._at < self._retention
        level = Level(self.top if fresh else 0, self._generation)
        return level if level.top or level.generation else None

    async def raise_to(self, ledger_id: str, level: Level) -> None:
        """The generation only: a top read from the ledger may be old, and prunable."""
        self._generation = max(self._generation, level.generation)


def marks_of(
    ledger: Ledger, keystore: RedisKeyStore | None, created: CreatedMark
) -> tuple[Mark, ...]:
    """Every mark a ledger has: this process's, the file beside an embedded ledger, Redis's."""
    marks: list[Mark] = [created]
    if ledger.file is not None:
        marks.append(FileMark(mark_path(ledger.file)))
    if keystore is not None:
        from writesafe.idempotency._redis_mark import RedisMark  # redis-py: with a Redis URL only

        marks.append(RedisMark(keystore))
    return tuple(marks)


class RestoreWatch:
    """Whether the ledger is restored, as last checked; see the module docstring."""

    def __init__(
        self,
        ledger: Ledger,
        keystore: RedisKeyStore | None,
        *,
        retention: timedelta,
        every: float,
    ) -> None:
        self._ledger = ledger
        self._retention = retention
        self._every = every
        self._created = CreatedMark(retention)
        self._marks: Sequence[Mark] = marks_of(ledger, keystore, self._created)
        self._state: Restored | None = None
        self._due = 0.0  # monotonic: the next check
        self._suspicious_due = 0.0
        self._checking: asyncio.Task[Restored | None] | None = None

    @property
    def open(self) -> bool:
        """Whether the last check found the ledger restored (and the restore still open)."""
        return self._state is not None

    def forget_loop(self) -> None:
        """A check running on a loop this process has left is gone with it."""
        self._checking = None

    async def restored(self, created_id: int) -> Restored | None:
        """The open restore, for a call whose claim just created operation `created_id`."""
        now = time.monotonic()
        suspicious = created_id <= self._created.top and now >= self._suspicious_due
        self._created.note(created_id)
        if now < self._due and not suspicious:
            return self._state
        if suspicious:
            self._suspicious_due = now + _SUSPICIOUS_EVERY
        return await self.check()

    async def check(self) -> Restored | None:
        """Check the ledger now (concurrent callers share one check), and raise the marks."""
        if self._checking is None or self._checking.done():
            self._checking = asyncio.ensure_future(self._check())
        return await asyncio.shield(self._checking)

    async def last_check(self, within: float) -> None:
        """Check once more as the process closes (its marks then hold all it committed), within
        `within` seconds, its wait for SQLite's lock included: a ledger that is gone, or locked
        by another process, holds up no close. A check not done by then (one a call started
        included) is cancelled, which ends its wait for the lock too, and awaited: never left
        running past the close (nothing of it is committed). Nothing if the process never opened
        the ledger."""
        if not self._due:
            return
        if self._checking is None or self._checking.done():
            self._checking = asyncio.ensure_future(self._check(lock_wait=within))
        checking = self._checking
        try:
            async with asyncio.timeout(within):
                await asyncio.shield(checking)
        except TimeoutError:
            checking.cancel()
            await asyncio.wait([checking])

    async def _check(self, lock_wait: float | None = None) -> Restored | None:
        self._state = await check_restored(
            self._ledger, self._marks, self._retention, lock_wait=lock_wait
        )
        self._due = time.monotonic() + self._every
        return self._state
