"""A ledger that knows it was restored: its largest id against a high-water mark kept outside
it, PostgreSQL's timeline, or an operator's word; the restore is then recorded in the ledger.

A ledger restored from a backup, recovered to a point in time or failed over to a replica that
lagged has forgotten the operations written after its restore point: a key it does not know may
have run. Nothing in the restored ledger itself can say so, so the signal is kept elsewhere:
every mark (this process's memory, a file beside a SQLite ledger, a Redis key) is raised to the
largest committed operation id after the fact, never before, and a mark that is lost means "no
signal", never a restore. While a restore is open, the guard looks an unknown key up before its
first execution (docs/operations.md, "Backups, restores and failover").
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, cast

from sqlalchemy import Table, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from writesafe.ledger._engine import reader, with_lock_wait
from writesafe.ledger._ledger import Ledger
from writesafe.ledger._models import LedgerState
from writesafe.ledger._writer import operations

logger = logging.getLogger("writesafe")

_state = cast(Table, LedgerState.__table__)
_ROW = _state.c.id == 1


RESTORED_KEY = "LEDGER_RESTORED"
"""`last_code` of an operation created while the ledger was restored that the lookup could not
clear: it may have run before the restore, as if its answer had been lost."""


class Signal(StrEnum):
    """What told the ledger it was restored."""

    MARK = "mark"  # its largest id is below a high-water mark kept outside it
    TIMELINE = "timeline"  # PostgreSQL's timeline changed: a failover or a point-in-time recovery
    OPERATOR = "operator"  # `writesafe db restored --since`


@dataclass(frozen=True, slots=True)
class Restored:
    """An open restore: the ledger holds nothing written after `since`, and a key it does not
    know may have run until `closes_at` (the retention period after `recorded_at`: a forgotten
    operation changed before the restore was recorded, and would have been pruned by then)."""

    since: datetime
    detected_by: Signal
    recorded_at: datetime
    closes_at: datetime


@dataclass(frozen=True, slots=True)
class Level:
    """How far a ledger has got: its largest committed operation id, and how many checks it
    has recorded. A restored ledger is behind its mark on one of them: ids alone are passed
    again by new rows (PostgreSQL even spends ids on claims that conflict)."""

    top: int
    generation: int

    def behind(self, mark: Level) -> bool:
        return self.top < mark.top or self.generation < mark.generation

    def highest(self, other: Level) -> Level:
        return Level(max(self.top, other.top), max(self.generation, other.generation))


class Mark(Protocol):
    """A high-water mark of one ledger's `Level`, kept where a restore of it does not reach."""

    name: str

    async def read(self, ledger_id: str) -> Level | None:
        """The mark of `ledger_id`; None: none kept (lost, or never written)."""

    async def raise_to(self, ledger_id: str, level: Level) -> None:
        """Raise the mark of `ledger_id` to `level`; what is higher stays."""


def mark_path(database: str | Path) -> Path:
    """The file that keeps the mark of the SQLite ledger at `database`: `<database>.mark`."""
    path = Path(database)
    return path.with_name(path.name + ".mark")


class FileMark:
    """The mark beside a SQLite ledger (`mark_path`), as `{"ledger": id, "top": n,
    "generation": n}`; a file of another ledger, or one that does not parse, is no mark."""

    name = "file"

    def __init__(self, path: Path) -> None:
        self.path = path

    async def read(self, ledger_id: str) -> Level | None:
        return await asyncio.to_thread(self._read, ledger_id)

    async def raise_to(self, ledger_id: str, level: Level) -> None:
        await asyncio.to_thread(self._raise, ledger_id, level)

    def _read(self, ledger_id: str) -> Level | None:
        try:
            return _parse_mark(self.path.read_text(), ledger_id)
        except OSError:
            return None

    def _raise(self, ledger_id: str, level: Level) -> None:
        # Locked, so that two processes raising it at once never lower it.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        with os.fdopen(fd, "r+") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            kept = _parse_mark(file.read(), ledger_id)
            raised = level if kept is None else kept.highest(level)
            if raised == kept:
                return
            file.seek(0)
            file.truncate()
            file.write(json.dumps({"ledger": ledger_id, **asdict(raised)}))
            file.flush()
            os.fsync(file.fileno())


def _parse_mark(content: str, ledger_id: str) -> Level | None:
    try:
        mark = json.loads(content)
    except ValueError:
        return None
    if not isinstance(mark, dict) or mark.get("ledger") != ledger_id:
        return None
    top, generation = mark.get("top"), mark.get("generation")
    if not isinstance(top, int) or not isinstance(generation, int):
        return None
    return Level(top, generation)


@dataclass(frozen=True, slots=True)
class _State:
    ledger_id: str
    seen_id: int
    largest_id: int
    generation: int
    timeline: int | None
    checked_at: datetime | None
    newest_at: datetime | None
    restored: Restored | None

    @property
    def level(self) -> Level:
        """Pruned rows do not lower the largest id the ledger has held."""
        return Level(max(self.seen_id, self.largest_id), self.generation)


async def check_restored(
    ledger: Ledger,
    marks: Sequence[Mark],
    retention: timedelta,
    *,
    lock_wait: float | None = None,
) -> Restored | None:
    """The open restore of `ledger`, detecting one from `marks` and the timeline; else count a
    check, raise the marks to the ledger's level and return None. `lock_wait`: how long its
    write may wait for SQLite's lock (None: as long as any write).

    The marks are read before the ledger: a mark is raised only after what it says was
    committed, so a concurrent check never makes the ledger look behind. A restore is recorded
    once: its record lifts the ledger's level to the mark that revealed it.
    """
    async with reader(ledger.engine).connect() as conn:  # on SQLite: no write lock to wait for
        ledger_id = (await conn.execute(select(_state.c.ledger_id).where(_ROW))).scalar_one()
    readings = [(mark, await mark.read(ledger_id)) for mark in marks]
    timeline = await _timeline(ledger)
    engine = ledger.engine if lock_wait is None else with_lock_wait(ledger.engine, lock_wait)
    async with engine.begin() as conn:
        state = await _read(conn)
        now = await ledger.now_in(conn)  # not a second connection: the budget may be one
        if state.restored is not None and state.restored.closes_at > now:
            return state.restored
        ahead = [(mark, level) for mark, level in readings if level and state.level.behind(level)]
        moved = state.timeline is not None and timeline is not None and timeline != state.timeline
        if ahead or moved:
            return await _detected(conn, state, ahead, timeline, now, retention)
        values: dict[str, Any] = {"seen_id": state.level.top, "checked_at": now}
        if timeline is not None:
            values["timeline"] = timeline
        if state.restored is not None:  # closed by itself
            values.update(_cleared())
        counted = await conn.execute(
            update(_state)
            .where(_ROW)
            .values(generation=_state.c.generation + 1, **values)
            .returning(_state.c.generation)
        )
        level = Level(state.level.top, counted.scalar_one())
    for mark in marks:
        await mark.raise_to(ledger_id, level)
    return None


async def _detected(
    conn: AsyncConnection,
    state: _State,
    ahead: list[tuple[Mark, Level]],
    timeline: int | None,
    now: datetime,
    retention: timedelta,
) -> Restored:
    """Record the restore `ahead` (the marks the ledger is behind) or the timeline revealed."""
    signal = Signal.MARK if ahead else Signal.TIMELINE
    since = max(filter(None, (state.checked_at, state.newest_at)), default=now)
    restored = Restored(since, signal, now, now + retention)
    lifted = state.level
    for _, level in ahead:
        lifted = lifted.highest(level)
    logger.warning(
        "the ledger was restored (%s%s: at %s, its mark at %s): unknown keys are looked up "
        "before they run until %s",
        signal.value,
        "".join(f" {mark.name}" for mark, _ in ahead),
        state.level,
        lifted,
        restored.closes_at.isoformat(),
    )
    await conn.execute(
        update(_state)
        .where(_ROW)
        .values(seen_id=lifted.top, generation=lifted.generation, timeline=timeline)
    )
    await _write(conn, restored)
    return restored


async def restored_state(ledger: Ledger) -> Restored | None:
    """The ledger's open restore, if any (one closed by time counts as none)."""
    async with reader(ledger.engine).connect() as conn:
        state = await _read(conn)
    now = await ledger.now()
    return state.restored if state.restored and state.restored.closes_at > now else None


async def declare_restored(ledger: Ledger, since: datetime, retention: timedelta) -> Restored:
    """Record the operator's word that the ledger holds nothing written after `since`; an open
    restore is widened (the earlier `since`, the later close), never narrowed."""
    async with ledger.engine.begin() as conn:
        now = await ledger.now_in(conn)
        if since > now:
            raise ValueError(f"{since.isoformat()} is in the future (now {now.isoformat()})")
        declared = Restored(since, Signal.OPERATOR, now, now + retention)
        current = (await _read(conn)).restored
        if current is not None and current.closes_at > now:
            declared = Restored(
                min(since, current.since),
                Signal.OPERATOR,
                now,
                max(declared.closes_at, current.closes_at),
            )
        await _write(conn, declared)
    return declared


async def clear_restored(ledger: Ledger) -> Restored | None:
    """Close the open restore now (an operator has reconciled the gap); the one closed, if any."""
    async with ledger.engine.begin() as conn:
        state = await _read(conn)
        await conn.execute(update(_state).where(_ROW).values(seen_id=state.level.top, **_cleared()))
    now = await ledger.now()
    return state.restored if state.restored and state.restored.closes_at > now else None


async def _read(conn: AsyncConnection) -> _State:
    row = (await conn.execute(select(_state).where(_ROW))).mappings().one()
    newest = select(operations.c.id, operations.c.created_at).order_by(operations.c.id.desc())
    largest_id, newest_at = (await conn.execute(newest.limit(1))).first() or (0, None)
    restored = None
    if row["restored_since"] is not None:
        restored = Restored(
            row["restored_since"],
            Signal(row["detected_by"]),
            row["recorded_at"],
            row["closes_at"],
        )
    return _State(
        row["ledger_id"],
        row["seen_id"],
        largest_id,
        row["generation"],
        row["timeline"],
        row["checked_at"],
        newest_at,
        restored,
    )


async def _write(conn: AsyncConnection, restored: Restored) -> None:
    await conn.execute(
        update(_state)
        .where(_ROW)
        .values(
            restored_since=restored.since,
            detected_by=restored.detected_by.value,
            recorded_at=restored.recorded_at,
            closes_at=restored.closes_at,
        )
    )


def _cleared() -> dict[str, None]:
    return dict.fromkeys(("restored_since", "detected_by", "recorded_at", "closes_at"))


_TIMELINE = text("SELECT timeline_id FROM pg_control_checkpoint()")


async def _timeline(ledger: Ledger) -> int | None:
    """PostgreSQL's current timeline; None on SQLite, or where the role may not read it
    (`pg_control_checkpoint()` is for superusers and roles granted it)."""
    if ledger.file is not None:  # an embedded ledger's file has no timeline
        return None
    try:
        async with ledger.engine.connect() as conn:
            timeline = (await conn.execute(_TIMELINE)).scalar()
    except DBAPIError as error:
        logger.debug("no timeline signal: %s", type(error.orig).__name__)
        return None
    return None if timeline is None else int(timeline)
