"""The guard's cached answer to "was the ledger restored?", checked rarely and off the hot path.

A first execution asks `RestoreWatch.restored` with the id its claim was given: the cached
answer, unless `every` seconds have passed or the id is not above one this process created
before (a sign of a rollback: a restored ledger hands out ids again), when the ledger is
checked against its marks (`writesafe.ledger._restore`). Replays and continuations never ask.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from writesafe.ledger import FileMark, Ledger, Level, Mark, Restored, check_restored, mark_path

if TYPE_CHECKING:
    from writesafe.idempotency._keystore import RedisKeyStore

logger = logging.getLogger("writesafe")

# At most one check a second for ids that come back out of order (concurrent claims on
# PostgreSQL commit out of sequence order) rather than from a rollback.
_SUSPICIOUS_EVERY = 1.0

_RAISE_MARK = """
for i, field in ipairs({'top', 'generation'}) do
  local kept = tonumber(redis.call('HGET', KEYS[1], field) or '0')
  if tonumber(ARGV[i]) > kept then redis.call('HSET', KEYS[1], field, ARGV[i]) end
end
return 1
"""


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


class RedisMark:
    """The mark in the key store's namespace, the hash `<prefix>:ledger-mark:<ledger id>`.
    Redis emptied or unreachable is no mark: never a restore."""

    name = "redis"

    def __init__(self, keystore: RedisKeyStore, timeout: float = 0.5) -> None:
        self._keystore = keystore
        self._timeout = timeout

    def key(self, ledger_id: str) -> str:
        return f"{self._keystore.prefix}:ledger-mark:{ledger_id}"

    async def read(self, ledger_id: str) -> Level | None:
        try:
            async with asyncio.timeout(self._timeout):
                kept = await self._keystore.redis.hmget(self.key(ledger_id), "top", "generation")
        except (RedisError, OSError, TimeoutError) as error:
            logger.warning("the ledger's mark in Redis was not read: %s", type(error).__name__)
            return None
        top, generation = (value.decode() if isinstance(value, bytes) else value for value in kept)
        if top is None or generation is None or not (top.isdigit() and generation.isdigit()):
            return None
        return Level(int(top), int(generation))

    async def raise_to(self, ledger_id: str, level: Level) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._keystore.redis.eval(
                    _RAISE_MARK, 1, self.key(ledger_id), level.top, level.generation
                )
        except (RedisError, OSError, TimeoutError) as error:
            logger.warning("the ledger's mark in Redis was not raised: %s", type(error).__name__)


def marks_of(
    ledger: Ledger, keystore: RedisKeyStore | None, created: CreatedMark
) -> tuple[Mark, ...]:
    """Every mark a ledger has: this process's, the file beside an embedded ledger, Redis's."""
    marks: list[Mark] = [created]
    database = ledger.engine.url.database
    if ledger.is_sqlite and database and database != ":memory:":
        marks.append(FileMark(mark_path(Path(database).resolve())))
    if keystore is not None:
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

    async def last_check(self) -> None:
        """Check once more as the process closes (its marks then hold all it committed);
        nothing if it never opened the ledger."""
        if self._due:
            await self.check()

    async def _check(self) -> Restored | None:
        self._state = await check_restored(self._ledger, self._marks, self._retention)
        self._due = time.monotonic() + self._every
        return self._state
