"""Group commit on the embedded ledger: the writes queued while the writer's thread was busy share
one transaction, and each member is answered as it would have been alone."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from writesafe.ledger import Intent, Ledger, Outcome, Status
from writesafe.ledger._group_commit import GroupQueue, Member
from writesafe.ledger._hot_path import _operation_values
from writesafe.ledger._sqlite_writer import SqliteWriter
from writesafe.ledger._writer import attempts, operations

WAIT_SECONDS = 10.0  # far more than queuing a few writes takes


def _intent(key: str) -> Intent:
    return Intent("default", key, "submit", "f" * 64, "{}", f"owner-{key}", 15.0, 3)


def _row(key: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return _operation_values(_intent(key), lambda offset: now + timedelta(seconds=offset))


@asynccontextmanager
async def _ledger(tmp_path: Path) -> AsyncIterator[tuple[Ledger, SqliteWriter]]:
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    await ledger.migrate()
    assert isinstance(ledger.writer, SqliteWriter)
    try:
        yield ledger, ledger.writer
    finally:
        await ledger.close()


async def _one_group(
    writer: SqliteWriter, writes: list[Callable[[], Coroutine[Any, Any, Any]]]
) -> tuple[list[Any], list[str]]:
    """Run `writes` while the writer's thread is held busy, so that all of them queue and are
    taken as one group when it is let go; their outcomes (results or errors) and every statement
    the writer's connection ran meanwhile."""
    inside, gate = threading.Event(), threading.Event()
    statements: list[str] = []

    def hold(cursor: sqlite3.Cursor) -> None:
        cursor.connection.set_trace_callback(statements.append)
        inside.set()
        gate.wait(WAIT_SECONDS)

    held = asyncio.create_task(writer.transaction(hold))
    assert await asyncio.to_thread(inside.wait, WAIT_SECONDS)
    tasks = [asyncio.create_task(write()) for write in writes]
    for _ in range(20):  # each task runs up to its wait for the writer's thread (no I/O before)
        await asyncio.sleep(0)
    gate.set()
    await held
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    group = statements[statements.index("COMMIT") + 1 :]  # after the holder's own
    await writer.transaction(lambda cursor: cursor.connection.set_trace_callback(None))
    return outcomes, group


async def _counts(ledger: Ledger) -> tuple[int, int]:
    async with ledger.engine.connect() as conn:
        rows = (await conn.execute(select(func.count()).select_from(operations))).scalar_one()
        tries = (await conn.execute(select(func.count()).select_from(attempts))).scalar_one()
    return rows, tries


async def test_concurrent_claims_share_one_commit(tmp_path: Path) -> None:
    async with _ledger(tmp_path) as (ledger, writer):
        keys = [f"k{n}" for n in range(8)]
        claims, statements = await _one_group(
            writer, [partial(ledger.claim, _intent(key)) for key in keys]
        )
        assert [claim.operation.key for claim in claims] == keys
        assert all(claim.created for claim in claims)
        assert statements.count("BEGIN IMMEDIATE") == statements.count("COMMIT") == 1
        assert await _counts(ledger) == (8, 8)


async def test_a_member_whose_write_fails_is_answered_with_its_error_and_the_rest_commit(
    tmp_path: Path,
) -> None:
    # Its operation row is inserted and then its attempt row fails (no start time): the row it
    # left must go with it, and the members before and after it must still commit.
    async with _ledger(tmp_path) as (ledger, writer):
        broken = {**_row("broken"), "last_sent_at": None}
        outcomes, statements = await _one_group(
            writer,
            [
                lambda: ledger.claim(_intent("before")),
                lambda: writer.claim(broken),
                lambda: ledger.claim(_intent("after")),
            ],
        )
        before, failed, after = outcomes
        assert isinstance(failed, IntegrityError)
        assert before.created
        assert before.operation.key == "before"
        assert after.created
        assert after.operation.key == "after"
        assert statements.count("COMMIT") == 1, "the survivors still share one commit"
        assert await _counts(ledger) == (2, 2)
        assert await writer.fetch("default", "broken") is None


async def test_a_duplicate_claim_in_the_same_group_loses_to_the_first_as_it_would_alone(
    tmp_path: Path,
) -> None:
    async with _ledger(tmp_path) as (ledger, writer):
        first, second = (
            _intent("k"),
            Intent("default", "k", "submit", "f" * 64, "{}", "owner-other", 15.0, 3),
        )
        (won, lost), statements = await _one_group(
            writer, [lambda: ledger.claim(first), lambda: ledger.claim(second)]
        )
        assert statements.count("COMMIT") == 1
        assert won.created
        assert won.operation.lease_owner == "owner-k"
        assert not lost.created
        assert lost.operation.id == won.operation.id
        assert lost.operation.lease_owner == "owner-k", "the first claim's row"
        assert await _counts(ledger) == (1, 1)


async def test_outcomes_and_intents_commit_together_durably(tmp_path: Path) -> None:
    async with _ledger(tmp_path) as (ledger, writer):
        started = await ledger.claim(_intent("done"))
        outcome = Outcome(Status.SUCCEEDED, result='{"ok": true}')
        (finished, claimed), statements = await _one_group(
            writer,
            [
                lambda: ledger.finish(started.operation, "owner-done", outcome),
                lambda: ledger.claim(_intent("new")),
            ],
        )
        assert finished is not None
        assert finished.status is Status.SUCCEEDED
        assert claimed.created
        assert statements[:2] == ["PRAGMA synchronous=FULL", "BEGIN IMMEDIATE"]
        assert statements.count("COMMIT") == 1


_CALLER = """
import asyncio, sys
from writesafe.ledger import Intent, Ledger, Outcome, Status

async def main(path):
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
    await ledger.migrate()
    outcome = Outcome(Status.SUCCEEDED, result="1")

    async def caller(c):
        n = 0
        while True:
            key = f"{c}-{n}"
            intent = Intent("default", key, "submit", "f" * 64, "{}", key, 60.0, 3)
            claim = await ledger.claim(intent)
            print("claimed", key, flush=True)
            await ledger.finish(claim.operation, key, outcome)
            print("finished", key, flush=True)
            n += 1

    await asyncio.gather(*(caller(c) for c in range(64)))

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_process_killed_mid_group_loses_nothing_it_answered(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    child = subprocess.Popen(
        [sys.executable, "-c", _CALLER, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert child.stdout is not None
    answered: dict[str, str] = {}
    try:
        for line in child.stdout:
            what, key = line.split()
            answered[key] = what
            if len(answered) >= 600:
                break
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(WAIT_SECONDS)
    assert len(answered) >= 600, "the callers did not get going"
    assert "finished" in answered.values()
    with sqlite3.connect(path) as db:
        stored = dict(
            db.execute(
                "SELECT o.key, o.status FROM writesafe_operations o"
                " JOIN writesafe_attempts a ON a.operation_id = o.id"
            ).fetchall()
        )
    for key, what in answered.items():
        assert key in stored, f"{key} was answered as {what} but its rows are gone"
        if what == "finished":
            assert stored[key] == Status.SUCCEEDED.value, key


async def test_the_queue_is_quiet_only_with_no_drain_under_way_and_a_lone_write_last() -> None:
    """`quiet` sends an outcome to the caller's own thread: never while a drain may be about to
    take the lock, nor after a group of writes (the next write most likely has company, and a
    group commits it for less than its own transaction: docs/performance.md)."""
    queue = GroupQueue()
    loop = asyncio.get_running_loop()

    def member() -> Member:
        return Member(lambda cursor: None, False, loop, loop.create_future())

    assert queue.quiet()
    assert queue.add(member()), "the first write posts a drain"
    assert not queue.quiet(), "a drain is posted"
    with queue.draining() as taken:
        assert len(taken) == 1
        assert not queue.quiet(), "a drain is running"
    assert queue.quiet()
    assert queue.add(member())
    assert not queue.add(member()), "the drain posted takes it too"
    with queue.draining() as taken:
        assert len(taken) == 2
    assert not queue.quiet(), "the last drain took a group"
    queue.add(member())
    with queue.draining():
        pass
    assert queue.quiet()
