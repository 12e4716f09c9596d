"""Time as an injectable value, so leases and settle windows test without sleeping.

Which clock judges what: every judgement of time that crosses processes (lease expiry, due
checks, settle windows, continuation delays) is made on the store's clock where it has one
(PostgreSQL's `now()`, written into statements as a `StoreTime`); a `Clock` given to the ledger
replaces it, for tests. A process's own monotonic clock serves only local deadlines.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol


@dataclass(frozen=True, slots=True)
class StoreTime:
    """A moment on the store's own clock: its time when the statement runs, plus `offset`
    seconds. Only a statement can hold one; the row it writes has the real value."""

    offset: float = 0.0
    # `offset` as the statement's parameter, made once: a `timedelta` from float seconds costs
    # more than the rest of the parameter's way to the driver.
    interval: timedelta = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "interval", timedelta(seconds=self.offset))


@lru_cache(maxsize=64)
def store_time(offset: float = 0.0) -> StoreTime:
    """`StoreTime(offset)`, one per offset: a guarded call writes the same few offsets (now, now
    plus the lease) on every write."""
    return StoreTime(offset)


class Clock(Protocol):
    """The time source the ledger and the guard read; swap it for a simulated one in tests."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never steps, for measuring durations within this process."""
        ...


class SystemClock:
    """Real time: `datetime.now(UTC)`, `asyncio.sleep` and `time.monotonic`."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """Simulated time that only moves when slept on or advanced; sleeping yields to other tasks."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._elapsed = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._elapsed

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._elapsed += seconds

    def step(self, seconds: float) -> None:
        """Step the wall clock alone (an NTP correction, a VM resumed with an old clock): no time
        passes on the monotonic clock."""
        self._now += timedelta(seconds=seconds)

    async def sleep(self, seconds: float) -> None:
        self.advance(seconds)
        await asyncio.sleep(0)
