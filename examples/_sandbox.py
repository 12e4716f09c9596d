"""A throwaway `WriteSafe` per recorded case: its own SQLite ledger and a simulated clock.

Each case starts at the same simulated instant and owns its ledger, so cases cannot affect one
another, and waiting (Retry-After, backoff) advances the clock instead of sleeping.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

from writesafe import WriteSafe
from writesafe.ledger import AttemptKind, ManualClock
from writesafe.reconciler import AttemptView

CASE_START = datetime(2026, 1, 1, tzinfo=UTC)


@asynccontextmanager
async def sandbox() -> AsyncIterator[tuple[WriteSafe, ManualClock]]:
    """A started WriteSafe on a fresh ledger, and the clock it runs on (at CASE_START)."""
    clock = ManualClock(CASE_START)
    with tempfile.TemporaryDirectory(prefix="writesafe-case-") as directory:
        ws = WriteSafe(f"sqlite+aiosqlite:///{Path(directory) / 'ledger.db'}", clock=clock)
        async with ws:
            yield ws, clock


def elapsed_ms(moment: datetime) -> int:
    """Simulated milliseconds since the case started."""
    return round((moment - CASE_START).total_seconds() * 1000)


async def executions(ws: WriteSafe, key: str) -> list[AttemptView]:
    """The ledger's execution attempts under `key`, in order: what actually ran."""
    status = await ws.status(key)
    if status is None:
        return []
    runs = [a for a in status.attempts if a.kind is AttemptKind.EXECUTION]
    return sorted(runs, key=lambda attempt: attempt.execution or 0)
