"""The embedded ledger's writer: one thread of its own, started by a write and ended by close;
and its reads, which never wait for the write lock."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from writesafe import WriteSafe
from writesafe.ledger import ApiKeys, Claim, Intent, Ledger, Outcome, Status, _sqlite_writer
from writesafe.ledger._hot_path import _operation_values
from writesafe.ledger._sqlite_writer import (
    BRIEF_SYNC,
    SqliteWriter,
    begin_when_free,
    durable_average,
)
from writesafe.ledger._writer import attempts, operations

THREAD_PREFIX = "writesafe-sqlite"
T = TypeVar("T")
# Far more than a read takes, far less than the busy timeout a read taking the lock would wait.
READ_SECONDS = 2.0
HERE_COMMITS_PER_CHECKPOINT = _sqlite_writer._HERE_COMMITS_PER_CHECKPOINT


@pytest.fixture
def brief_fsyncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fsync counts as brief, for a test whose subject is not the bound: a disk slowed by
    a loaded machine must not send its intents to the writer's thread."""
    monkeypatch.setattr(_sqlite_writer, "BRIEF_SYNC", 60.0)


def _writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


async def _closed(ledger: Ledger, since: int = 0) -> None:
    """Close `ledger` and wait for its writer's thread to end (one of the writer threads counted
    from `since`, the number running before it started)."""
    await ledger.close()
    await asyncio.to_thread(lambda: [t.join(5) for t in _writer_threads()[since:]])


def _intent(key: str) -> Intent:
    return Intent("default", key, "submit", "f" * 64, "{}", f"owner-{key}", 15.0, 3)


async def _counts(ledger: Ledger) -> tuple[int, int]:
    async with ledger.engine.connect() as conn:
        rows = (await conn.execute(select(func.count()).select_from(operations))).scalar_one()
        tries = (await conn.execute(select(func.count()).select_from(attempts))).scalar_one()
    return rows, tries


@contextlib.asynccontextmanager
async def _ledger(tmp_path: Path, *, blocking_callers: bool = False) -> AsyncIterator[Ledger]:
    """A migrated embedded ledger in `tmp_path`, closed on the way out; with `blocking_callers`,
    serving them as the sync face's loop does, always alone."""
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    if blocking_callers:
        ledger.serve_blocking_callers(lambda: True)
    await ledger.migrate()
    try:
        yield ledger
    finally:
        await ledger.close()


async def test_the_writer_thread_ends_with_close_and_starts_again_on_the_next_write(
    tmp_path: Path,
) -> None:
    before = len(_writer_threads())
    async with _ledger(tmp_path) as ledger:
        assert (await ledger.claim(_intent("a"))).created
        assert len(_writer_threads()) == before + 1
        await _closed(ledger, since=before)
        assert len(_writer_threads()) == before
        claim = await ledger.claim(_intent("a"))  # closed, the ledger opens again
        assert not claim.created
        assert claim.operation.key == "a"


async def test_a_claim_whose_caller_is_cancelled_is_written_whole_or_not_at_all(
    tmp_path: Path,
) -> None:
    async with _ledger(tmp_path) as ledger:
        for n in range(30):
            # Cancelled before the write is handed over, while it waits, or while it runs.
            claim = asyncio.create_task(ledger.claim(_intent(f"k{n}")))
            await asyncio.sleep((n % 4) * 0.0005)
            claim.cancel()
        assert isinstance(ledger.writer, SqliteWriter)
        await ledger.writer.transaction(lambda _: None)  # behind every claim the thread took
        rows, tries = await _counts(ledger)
        assert 0 < rows < 30, "the cancellations should have come at different points"
        assert rows == tries, "every operation row has its first execution attempt, and only it"


async def test_a_claim_of_a_taken_key_returns_the_row_holding_it_and_writes_nothing(
    tmp_path: Path,
) -> None:
    async with _ledger(tmp_path) as ledger:
        assert (await ledger.claim(_intent("a"))).created
        with sqlite3.connect(tmp_path / "ledger.db") as raw:
            changes = raw.execute("PRAGMA data_version").fetchone()
            claim = await ledger.claim(_intent("a"))  # a replay: the key is taken
            assert raw.execute("PRAGMA data_version").fetchone() == changes, "nothing written"
        assert not claim.created
        assert claim.operation.lease_owner == "owner-a"


async def test_a_peek_reads_a_taken_key_without_the_writers_thread(tmp_path: Path) -> None:
    async with _ledger(tmp_path) as ledger:
        assert (await ledger.claim(_intent("a"))).created
        await _closed(ledger)
        before = len(_writer_threads())
        row = ledger.peek("default", "a")
        assert row is not None
        assert row.lease_owner == "owner-a"
        assert ledger.peek("default", "b") is None
        assert len(_writer_threads()) == before, "read on the caller's thread"
        assert (await ledger.claim(_intent("b"))).created  # a claim takes the write path
        assert len(_writer_threads()) == before + 1


async def test_a_writer_serving_blocking_callers_writes_on_the_loops_thread_when_the_lock_is_free(
    tmp_path: Path,
) -> None:
    async with _ledger(tmp_path, blocking_callers=True) as ledger:
        before = len(_writer_threads())
        claim = await ledger.claim(_intent("a"))
        assert claim.created
        outcome = Outcome(Status.SUCCEEDED, result="{}")
        finished = await ledger.finish(claim.operation, "owner-a", outcome)
        assert finished is not None
        assert finished.status is Status.SUCCEEDED
        assert len(_writer_threads()) == before, "written on the loop's thread, no hop"
        assert await _counts(ledger) == (1, 1)  # committed, seen by another connection
        row = await ledger.get("default", "a")
        assert row is not None
        assert row.status is Status.SUCCEEDED


async def test_a_lock_in_the_way_sends_the_write_to_the_writers_thread_and_the_loop_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
    ledger.serve_blocking_callers(lambda: True)
    await ledger.migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        before = len(_writer_threads())
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        claim = asyncio.create_task(ledger.claim(_intent("a")))
        for _ in range(500):  # the loop runs on while the claim waits
            await asyncio.sleep(0.01)
            if len(_writer_threads()) > before:
                break
        assert len(_writer_threads()) == before + 1, "the write went to the writer's thread"
        await asyncio.sleep(0.05)
        assert not claim.done(), "it waits for the lock, as the writer's thread always did"
        holder.execute("COMMIT")
        assert (await claim).created
        assert await _counts(ledger) == (1, 1)
    finally:
        holder.close()
        await ledger.close()


async def test_a_writer_whose_loop_serves_other_calls_writes_on_its_own_thread(
    tmp_path: Path,
) -> None:
    # The loop goes on serving the other calls while the writer's thread commits.
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    alone = [False]
    ledger.serve_blocking_callers(lambda: alone[0])
    await ledger.migrate()
    try:
        before = len(_writer_threads())
        assert (await ledger.claim(_intent("a"))).created
        assert len(_writer_threads()) == before + 1
        await _closed(ledger, since=before)
        alone[0] = True
        assert (await ledger.claim(_intent("b"))).created
        assert len(_writer_threads()) == before, "alone, it writes on the loop's thread"
    finally:
        await ledger.close()


async def _claimed_with_no_writer_thread(ledger: Ledger, key: str) -> Claim:
    """A claim of `key`, made on the writer's thread, which is then ended (by `close`, after
    which the ledger opens again on its next use): a write that starts it again hopped there."""
    claim = await ledger.claim(_intent(key))
    assert claim.created
    await _closed(ledger)
    return claim


async def test_an_outcome_with_the_writers_thread_idle_commits_on_the_callers_thread(
    tmp_path: Path,
) -> None:
    # It needs no fsync, and its statements cost less than the two hops (docs/performance.md).
    async with _ledger(tmp_path) as ledger:
        claim = await _claimed_with_no_writer_thread(ledger, "a")
        before = len(_writer_threads())
        finished = await ledger.finish(claim.operation, "owner-a", Outcome(Status.SUCCEEDED))
        assert finished is not None
        assert finished.status is Status.SUCCEEDED
        assert len(_writer_threads()) == before, "committed on the caller's thread, no hop"
        row = await ledger.get("default", "a")  # committed: seen by the engine's connection
        assert row is not None
        assert row.status is Status.SUCCEEDED
        assert (await ledger.claim(_intent("b"))).created
        # No guard said it runs one call at a time: an intent's fsync is the writer's.
        assert len(_writer_threads()) == before + 1


async def test_an_outcome_with_the_lock_in_the_way_waits_on_the_writers_thread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
    await ledger.migrate()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        claim = await _claimed_with_no_writer_thread(ledger, "a")
        before = len(_writer_threads())
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        finish = asyncio.create_task(
            ledger.finish(claim.operation, "owner-a", Outcome(Status.SUCCEEDED))
        )
        for _ in range(500):  # the loop runs on while the outcome waits
            await asyncio.sleep(0.01)
            if len(_writer_threads()) > before:
                break
        assert len(_writer_threads()) == before + 1, "the write went to the writer's thread"
        await asyncio.sleep(0.05)
        assert not finish.done(), "it waits for the lock there"
        holder.execute("COMMIT")
        finished = await finish
        assert finished is not None
        assert finished.status is Status.SUCCEEDED
    finally:
        holder.close()
        await ledger.close()


@pytest.mark.parametrize("blocking_callers", [False, True])
async def test_writes_keep_to_the_writers_thread_once_another_connection_took_the_lock(
    tmp_path: Path, blocking_callers: bool
) -> None:
    """Another process writing to the file: there, a few commits out of the writer's turn cost
    far more than the hops they save (docs/performance.md), for an outcome and for any write of
    a loop that serves a blocking caller alone."""
    path = tmp_path / "ledger.db"
    ledger = Ledger.from_url(f"sqlite+aiosqlite:///{path}")
    if blocking_callers:
        ledger.serve_blocking_callers(lambda: True)
    await ledger.migrate()
    writer = ledger.writer
    assert isinstance(writer, SqliteWriter)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        claim = await ledger.claim(_intent("a"))
        holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        blocked = asyncio.create_task(ledger.claim(_intent("b")))
        for _ in range(500):  # until the writer's thread has met the lock
            await asyncio.sleep(0.01)
            if writer._shared_until:
                break
        assert not blocked.done(), "it waits for the lock"
        holder.execute("COMMIT")
        assert (await blocked).created
        await _closed(ledger)
        before = len(_writer_threads())
        finished = await ledger.finish(claim.operation, "owner-a", Outcome(Status.SUCCEEDED))
        assert finished is not None
        assert finished.status is Status.SUCCEEDED
        assert len(_writer_threads()) == before + 1, "the outcome went to the writer's thread"
    finally:
        holder.close()
        await ledger.close()


@contextlib.contextmanager
def _two_connections(path: Path) -> Iterator[tuple[sqlite3.Connection, sqlite3.Connection]]:
    """A connection holding the file's write lock, and one that tries it without waiting."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    waiter = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA journal_mode=WAL")
        waiter.execute("PRAGMA busy_timeout=0")
        holder.execute("BEGIN IMMEDIATE")
        yield holder, waiter
    finally:
        waiter.close()
        holder.close()


def test_the_writers_wait_for_the_lock_begins_once_it_is_free(tmp_path: Path) -> None:
    with _two_connections(tmp_path / "lock.db") as (holder, waiter):
        release = threading.Timer(0.2, holder.execute, ("COMMIT",))
        release.start()
        tries = begin_when_free(waiter.cursor())
        release.join()
        assert tries > 1, "it found the lock taken, then free"
        assert waiter.in_transaction


def test_the_writers_wait_for_the_lock_gives_up_with_sqlites_busy_after_its_timeout(
    tmp_path: Path,
) -> None:
    with _two_connections(tmp_path / "lock.db") as (_, waiter):
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError) as raised:
            begin_when_free(waiter.cursor(), timeout=0.2)
        assert time.monotonic() - started >= 0.2
        assert raised.value.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
        assert not waiter.in_transaction


def test_the_writers_wait_for_the_lock_does_not_retry_another_error(tmp_path: Path) -> None:
    with _two_connections(tmp_path / "lock.db") as (_, waiter):
        waiter.execute("PRAGMA query_only=ON")  # its BEGIN IMMEDIATE fails, not for the lock
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError):
            begin_when_free(waiter.cursor(), timeout=5.0)
        assert time.monotonic() - started < 1.0, "raised at its first try"


async def test_a_write_that_fails_on_the_callers_thread_leaves_nothing_and_the_next_one_lands(
    tmp_path: Path,
) -> None:
    # Its operation row is inserted and then its attempt row fails (no start time).
    async with _ledger(tmp_path, blocking_callers=True) as ledger:
        writer = ledger.writer
        assert isinstance(writer, SqliteWriter)
        before = len(_writer_threads())
        now = datetime.now(UTC)
        row = _operation_values(_intent("broken"), lambda offset: now + timedelta(seconds=offset))
        with pytest.raises(IntegrityError):  # SQLAlchemy's, like every ledger error
            await writer.claim({**row, "last_sent_at": None})
        assert await _counts(ledger) == (0, 0), "rolled back whole"
        assert (await ledger.claim(_intent("a"))).created
        assert await _counts(ledger) == (1, 1)
        assert len(_writer_threads()) == before, "both on the caller's thread"


def _fill_the_log(raw: sqlite3.Connection) -> None:
    """Commit more pages to the WAL than SQLite's automatic checkpoint lets pile up (1,000),
    through `raw`, which never checkpoints (kept open: the last connection to close would)."""
    raw.execute("PRAGMA wal_autocheckpoint=0")
    raw.execute("CREATE TABLE filler (page BLOB)")
    raw.execute("BEGIN")
    raw.executemany("INSERT INTO filler VALUES (?)", [(b"x" * 4000,) for _ in range(1_200)])
    raw.execute("COMMIT")


async def test_a_durable_commit_on_the_writers_thread_checkpoints_and_none_on_a_callers_does(
    tmp_path: Path,
) -> None:
    """A checkpoint copies the log into the database and syncs both: never a cost on a caller's
    thread (an async caller's event loop would stall for it), so a commit there leaves it to the
    writer's thread, whose durable commit checkpoints as SQLite does. A checkpoint grows the
    database file by the pages it copies in."""
    path = tmp_path / "ledger.db"
    async with _ledger(tmp_path) as ledger:
        raw = sqlite3.connect(path, isolation_level=None)
        try:
            claim = await _claimed_with_no_writer_thread(ledger, "a")
            _fill_the_log(raw)
            size = path.stat().st_size
            before = len(_writer_threads())
            assert await ledger.finish(claim.operation, "owner-a", Outcome(Status.SUCCEEDED))
            assert len(_writer_threads()) == before, "the outcome committed on the caller's thread"
            assert path.stat().st_size == size, "and copied nothing into the database"
            assert (await ledger.claim(_intent("b"))).created
            assert len(_writer_threads()) == before + 1
            assert path.stat().st_size > size, "the durable commit checkpointed"
        finally:
            raw.close()


@pytest.mark.parametrize("serving", ["blocking callers", "async callers"])
async def test_writes_on_the_callers_thread_send_one_in_so_many_to_the_writers_to_checkpoint(
    tmp_path: Path, serving: str, brief_fsyncs: None
) -> None:
    """Where every write may commit on the caller's thread (blocking callers alone, or one
    guarded call at a time), none of them checkpoints: after `_HERE_COMMITS_PER_CHECKPOINT`,
    one goes to the writer's thread, whose commit does. Without it the log would grow without
    end: a checkpoint beside a stream of writes never finds the whole log copied."""
    path = tmp_path / "ledger.db"
    async with _ledger(tmp_path) as ledger:
        if serving == "blocking callers":
            ledger.serve_blocking_callers(lambda: True)
        else:
            ledger.serve_async_callers(lambda: True)
        raw = sqlite3.connect(path, isolation_level=None)
        try:
            before = len(_writer_threads())
            _fill_the_log(raw)
            size = path.stat().st_size
            for n in range(HERE_COMMITS_PER_CHECKPOINT):
                assert (await ledger.claim(_intent(f"k{n}"))).created
            assert len(_writer_threads()) == before, "every one on the caller's thread"
            assert path.stat().st_size == size, "and none checkpointed"
            assert (await ledger.claim(_intent("next"))).created
            assert len(_writer_threads()) == before + 1, "the next one went to the writer's"
            assert path.stat().st_size > size, "and checkpointed"
            assert (await ledger.claim(_intent("after"))).created
            assert len(_writer_threads()) == before + 1
        finally:
            raw.close()
        assert await _counts(ledger) == (HERE_COMMITS_PER_CHECKPOINT + 2,) * 2


async def test_the_log_stays_bounded_while_every_write_commits_on_the_callers_thread(
    tmp_path: Path, brief_fsyncs: None
) -> None:
    """The log starts again from its beginning only when a writer finds it wholly copied into
    the database: a checkpoint beside a stream of writes never does, and the log grew without
    end (docs/performance.md). 1,000 calls one at a time write about 10,000 pages (40 MB) to it;
    SQLite's own bound is 1,000 pages."""
    path = tmp_path / "ledger.db"
    ws = WriteSafe(f"sqlite+aiosqlite:///{path}")

    @ws.tool("submit")
    async def submit(n: int) -> int:
        return n

    try:
        for n in range(1_000):
            assert await submit(n, idempotency_key=f"k{n}") == n
        log = path.with_name(path.name + "-wal").stat().st_size
        assert log < 2_000 * 4_096, f"the log holds {log // 4_096} pages"
    finally:
        await ws.close()


async def test_an_intent_commits_on_the_loops_thread_while_the_guard_runs_one_call(
    tmp_path: Path, brief_fsyncs: None
) -> None:
    # The guard says how many calls it runs: the write queue alone cannot, since a loop that
    # waits out an fsync lets no second call queue a write.
    async with _ledger(tmp_path) as ledger:
        alone = [True]
        ledger.serve_async_callers(lambda: alone[0])
        before = len(_writer_threads())
        claim = await ledger.claim(_intent("a"))
        assert claim.created
        assert await ledger.finish(claim.operation, "owner-a", Outcome(Status.SUCCEEDED))
        assert len(_writer_threads()) == before, "both on the loop's thread, no hop"
        assert await _counts(ledger) == (1, 1)
        alone[0] = False
        assert (await ledger.claim(_intent("b"))).created
        assert len(_writer_threads()) == before + 1, "with other calls running, the writer's"


async def test_a_guard_commits_intents_on_the_loops_thread_only_while_it_runs_one_call(
    tmp_path: Path, brief_fsyncs: None
) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")

    @ws.tool("submit")
    async def submit(n: int) -> int:
        await asyncio.sleep(0)  # the calls run together only if each lets the others run
        return n

    try:
        before = len(_writer_threads())
        for n in range(5):
            assert await submit(n, idempotency_key=f"one-{n}") == n
        assert len(_writer_threads()) == before, "one call at a time: every write on the loop's"
        together = [submit(n, idempotency_key=f"many-{n}") for n in range(8)]
        assert await asyncio.gather(*together) == list(range(8))
        assert len(_writer_threads()) == before + 1, "calls together share the writer's commits"
    finally:
        await ws.close()


async def test_intents_keep_to_the_writers_thread_after_slow_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An event loop waits out an intent's fsync only where that is brief on average
    (`BRIEF_SYNC`): past it, intents go to the writer's thread for `_SLOW_SECONDS`. Every fsync
    counts as slow here."""
    monkeypatch.setattr(_sqlite_writer, "BRIEF_SYNC", 0.0)
    monkeypatch.setattr(_sqlite_writer, "_SLOW_SECONDS", 60.0)
    async with _ledger(tmp_path) as ledger:
        ledger.serve_async_callers(lambda: True)
        before = len(_writer_threads())
        assert (await ledger.claim(_intent("a"))).created
        assert len(_writer_threads()) == before, "tried on the loop's thread"
        assert (await ledger.claim(_intent("b"))).created
        assert len(_writer_threads()) == before + 1, "then the writer's, the fsync being slow"
        await _closed(ledger, since=before)
        assert (await ledger.claim(_intent("c"))).created
        assert len(_writer_threads()) == before + 1, "and still the writer's"
        assert await _counts(ledger) == (3, 3)


async def test_an_intent_is_tried_on_the_loops_thread_again_after_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite_writer, "BRIEF_SYNC", 0.0)  # every fsync counts as slow
    monkeypatch.setattr(_sqlite_writer, "_SLOW_SECONDS", 0.2)
    async with _ledger(tmp_path) as ledger:
        ledger.serve_async_callers(lambda: True)
        before = len(_writer_threads())
        assert (await ledger.claim(_intent("a"))).created
        await asyncio.sleep(0.3)
        assert (await ledger.claim(_intent("b"))).created
        assert len(_writer_threads()) == before, "both on the loop's thread"


def test_the_average_fsync_passes_the_bound_on_a_slow_disk_not_on_one_stall() -> None:
    fast, slow = 300e-6, 2e-3
    average, ended = 0.0, False
    for _ in range(200):
        average, ended = durable_average(average, fast)
        assert not ended
    average, ended = durable_average(average, 0.056)  # one stall of the disk (seen here)
    assert not ended, "counted as at most _LONGEST_COUNTED"
    writes = 0
    while not ended:
        average, ended = durable_average(average, slow)
        writes += 1
    assert writes <= 12, "a disk slower than the bound ends the path within a dozen writes"
    assert average == BRIEF_SYNC
    assert durable_average(average, slow) == (BRIEF_SYNC, True), "the next slow one ends it again"
    assert durable_average(average, fast)[1] is False, "a brief one does not"


@contextlib.asynccontextmanager
async def _lock_held_elsewhere(path: Path) -> AsyncIterator[WriteSafe]:
    """An embedded `WriteSafe` on `path` with one succeeded call (key "k", tool "submit"),
    while another connection holds the database's write lock."""
    ws = WriteSafe(f"sqlite+aiosqlite:///{path}")

    @ws.tool("submit")
    async def submit(n: int) -> int:
        return n

    holder = sqlite3.connect(path, isolation_level=None)
    try:
        assert await submit(1, idempotency_key="k") == 1
        holder.execute("BEGIN IMMEDIATE")
        yield ws
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        await ws.close()


def _answered(read: Awaitable[T]) -> Awaitable[T]:
    return asyncio.wait_for(read, READ_SECONDS)


async def test_reads_are_answered_while_another_connection_holds_the_write_lock(
    tmp_path: Path,
) -> None:
    """A WAL reader takes no lock a writer holds, so the ledger's reads (a status, the service's
    listings and counts, an operation's attempts, the reconciler's count of what is due) answer
    while a write is under way. They used to begin `IMMEDIATE` like the writes, taking the write
    lock and queueing for it (behind a long write, up to the 30 s busy timeout), and to hold it,
    across thread hops, from the guarded writes."""
    async with _lock_held_elsewhere(tmp_path / "ledger.db") as ws:
        status = await _answered(ws.status("k"))
        assert status is not None
        assert (status.status, len(status.attempts)) == ("succeeded", 1)
        listed = await _answered(ws.ledger.list(statuses=[Status.SUCCEEDED]))
        assert [row.key for row in listed] == ["k"]
        counts = await _answered(ws.ledger.count_by_status([Status.SUCCEEDED, Status.IN_FLIGHT]))
        assert counts == {Status.SUCCEEDED: 1, Status.IN_FLIGHT: 0}
        assert await _answered(ws.ledger.count_due(tools=["submit"])) == 0
        assert len((await _answered(ws.ledger.attempts_of([listed[0].id])))[listed[0].id]) == 1
        assert await _answered(ApiKeys(ws.ledger.engine).active("no-such-secret")) is None
        await _answered(ws.ledger.ping())


async def test_a_reconcile_pass_that_finds_nothing_due_takes_no_write_lock(
    tmp_path: Path,
) -> None:
    """The reconciler's claim looks before it takes the write lock: a pass that finds nothing to
    claim (every pass of a worker while all is well) neither waits for a writer nor holds the
    guarded writes up. It used to open its write transaction first."""
    async with _lock_held_elsewhere(tmp_path / "ledger.db") as ws:
        report = await _answered(ws.reconcile())
        assert report.examined == 0


async def test_a_reader_that_fails_is_dropped_and_its_read_made_under_the_lock(
    tmp_path: Path,
) -> None:
    """A pooled connection of the callers' threads that fails (here closed under it) is not
    pooled again: the read is made on the writer's thread, and the next one on a new connection.
    Pooled again, being the last one in it would be the first one out, and fail every use after
    it."""
    async with _ledger(tmp_path) as ledger:
        assert (await ledger.claim(_intent("a"))).created
        writer = ledger.writer
        assert isinstance(writer, SqliteWriter)
        assert ledger.peek("default", "a") is not None  # a connection is pooled now
        for connection in writer._here:
            connection.close()
        found = await ledger.get("default", "a")
        assert found is not None
        assert found.key == "a"
        assert ledger.peek("default", "a") is not None, "read on a new connection"
