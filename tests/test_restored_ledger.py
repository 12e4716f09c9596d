"""A ledger restored from a backup: 50 keys, a backup, 50 more, the restore, then all 100 retried
with a truthful lookup end with exactly one effect per key, on SQLite (a file copy) and on
PostgreSQL (`pg_dump -n` / `pg_restore` into the same schema), detected by a mark or declared
by `writesafe db restored --since`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.engine import make_url
from typer.testing import CliRunner, Result

from tests.conftest import PG_URL, REDIS_URL, asyncpg_dsn
from tests.test_cli_errors import DOWN, one_line_error
from tests.test_sqlite_lock_waits import write_lock_held
from writesafe import Found, NotFound, Unknown, WriteSafe, WriteSafeError
from writesafe.cli import app as cli
from writesafe.idempotency import WriteSafeSettings
from writesafe.ledger import (
    RESTORED_KEY,
    ManualClock,
    Signal,
    Status,
    declare_restored,
    mark_path,
    prune,
    restored_state,
)
from writesafe.ledger._engine import SQLITE_BUSY_TIMEOUT

KEYS = [f"order-{n}" for n in range(100)]
SIDE_FILES = ("-wal", "-shm")


class Shop:
    """The downstream system: it counts the effect of each key, and its lookup tells the truth."""

    def __init__(self) -> None:
        self.effects: Counter[str] = Counter()

    def guard(self, ws: WriteSafe) -> Callable[..., Any]:
        async def find(op: Any) -> Found | NotFound:
            return Found({"order": op.key}) if self.effects[op.key] else NotFound()

        @ws.tool("place_order", lookup=find, settle_after=0)
        async def place_order(sku: str) -> dict[str, str]:
            key = ws.current_operation().key
            self.effects[key] += 1
            return {"order": key}

        return place_order


async def place(ws: WriteSafe, shop: Shop, keys: list[str]) -> list[Any]:
    """Call the shop's tool once per key on `ws`, and close it (its marks raised)."""
    tool = shop.guard(ws)
    try:
        return [await tool("A1", idempotency_key=key) for key in keys]
    finally:
        await ws.close()


def copy_sqlite(source: Path, target: Path) -> None:
    """A file copy of a closed SQLite ledger, as a backup or a restore makes it."""
    for suffix in SIDE_FILES:
        target.with_name(target.name + suffix).unlink(missing_ok=True)
    shutil.copyfile(source, target)


def declare(url: str, since: datetime, *schema: str) -> None:
    result = CliRunner().invoke(
        cli, ["db", "restored", "--since", since.isoformat(), "--database-url", url, *schema]
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("signal", ["mark", "operator"])
def test_a_sqlite_ledger_restored_from_a_file_copy_runs_no_key_twice(
    tmp_path: Path, signal: str
) -> None:
    ledger, backup = tmp_path / "ledger.db", tmp_path / "backup.db"
    url = f"sqlite+aiosqlite:///{ledger}"
    shop = Shop()
    asyncio.run(place(WriteSafe(url), shop, KEYS[:50]))
    copy_sqlite(ledger, backup)
    backed_up = datetime.now(UTC)
    asyncio.run(place(WriteSafe(url), shop, KEYS[50:]))
    copy_sqlite(backup, ledger)
    if signal == "operator":
        mark_path(ledger).unlink()  # no signal left: the operator says so
        declare(url, backed_up)

    answers = asyncio.run(place(WriteSafe(url), shop, KEYS))

    ran_once_each(answers, shop, (Signal.MARK if signal == "mark" else Signal.OPERATOR), url)


def ran_once_each(answers: list[Any], shop: Shop, signal: Signal, url: str, **options: Any) -> None:
    """Every key got its own answer and had its effect once, and the ledger holds the restore
    as `signal` told it."""
    assert answers == [{"order": key} for key in KEYS]
    assert shop.effects == Counter(KEYS)
    state = asyncio.run(restored_of(url, **options))
    assert state is not None
    assert state.detected_by is signal


async def restored_of(url: str, **options: Any) -> Any:
    ws = WriteSafe(url, **options)
    try:
        await ws.start()
        return await restored_state(ws.ledger)
    finally:
        await ws.close()


def pg_tool(tool: str, schema: str, *arguments: str) -> None:
    url = make_url(PG_URL)
    connection = ["-h", str(url.host), "-p", str(url.port or 5432), "-U", str(url.username)]
    subprocess.run(
        [tool, *connection, "-d", str(url.database), *arguments], check=True, capture_output=True
    )


def dump(schema: str, to: Path) -> None:
    pg_tool("pg_dump", schema, "-n", schema, "-Fc", "-f", str(to))


def restore(schema: str, backup: Path) -> None:
    pg_tool("psql", schema, "-q", "-c", f'DROP SCHEMA "{schema}" CASCADE')
    pg_tool("pg_restore", schema, str(backup))  # the dump holds the schema and only it


def test_a_postgres_schema_restored_under_a_running_service_runs_no_key_twice(
    tmp_path: Path, pg_schema: str
) -> None:
    """The service keeps running across the restore, with no mark but its own memory: the
    ledger's generation is behind the one it last checked (every first execution checks here;
    by default a check is at most `restore_check_seconds` old)."""
    backup = tmp_path / "ledger.dump"
    shop = Shop()

    async def scenario() -> list[Any]:
        every_call = WriteSafeSettings(restore_check_seconds=0)
        ws = WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True, settings=every_call)
        tool = shop.guard(ws)
        try:
            for key in KEYS[:50]:
                await tool("A1", idempotency_key=key)
            await asyncio.to_thread(dump, pg_schema, backup)
            for key in KEYS[50:]:
                await tool("A1", idempotency_key=key)
            await asyncio.to_thread(restore, pg_schema, backup)
            return [await tool("A1", idempotency_key=key) for key in KEYS]
        finally:
            await ws.close()

    answers = asyncio.run(scenario())

    ran_once_each(answers, shop, Signal.MARK, PG_URL, schema=pg_schema)


def test_a_postgres_schema_restored_while_stopped_runs_no_key_twice_once_declared(
    tmp_path: Path, pg_schema: str
) -> None:
    """Every process stopped for the restore, no Redis: nothing can tell, the operator does."""
    backup = tmp_path / "ledger.dump"
    options = {"schema": pg_schema, "auto_migrate": True}
    shop = Shop()
    asyncio.run(place(WriteSafe(PG_URL, **options), shop, KEYS[:50]))
    dump(pg_schema, backup)
    backed_up = datetime.now(UTC)
    asyncio.run(place(WriteSafe(PG_URL, **options), shop, KEYS[50:]))
    restore(pg_schema, backup)
    declare(PG_URL, backed_up, "--schema", pg_schema)

    answers = asyncio.run(place(WriteSafe(PG_URL, **options), shop, KEYS))

    ran_once_each(answers, shop, Signal.OPERATOR, PG_URL, **options)


async def restore_declared(ws: WriteSafe) -> None:
    await ws.start()
    await declare_restored(ws.ledger, datetime.now(UTC), timedelta(days=1))
    await ws._guard.check_restores()


async def test_a_tool_without_a_lookup_is_refused_as_a_handoff_while_restored(
    tmp_path: Path,
) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    sent: list[str] = []

    @ws.tool("notify")
    async def notify(text: str) -> str:
        sent.append(text)
        return text

    try:
        await restore_declared(ws)
        for _ in range(2):  # asked again: the same answer, still nothing sent
            with pytest.raises(WriteSafeError) as refused:
                await notify("hello", idempotency_key="n-1")
            envelope = refused.value.envelope
            assert (envelope.code, envelope.cause) == ("UNKNOWN_ERROR", "ledger_restored")
            assert (envelope.next_action, envelope.side_effects) == ("handoff", "unknown")
        assert sent == []
        status = await ws.status("n-1")
        assert status is not None
        assert status.status is Status.OUTCOME_UNKNOWN
        assert [(a.kind, a.outcome, a.code) for a in status.attempts] == [
            ("execution", "outcome_unknown", RESTORED_KEY)
        ]
    finally:
        await ws.close()


async def test_a_lookup_that_cannot_tell_runs_nothing_and_reconciliation_lets_the_key_run(
    tmp_path: Path,
) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    answers: list[Found | NotFound | Unknown] = [Unknown("the shop is down"), NotFound()]
    effects: list[str] = []

    async def find(op: Any) -> Found | NotFound | Unknown:
        return answers.pop(0)

    @ws.tool("place_order", lookup=find, settle_after=0)
    async def place_order(sku: str) -> str:
        effects.append(sku)
        return "placed"

    try:
        await restore_declared(ws)
        with pytest.raises(WriteSafeError) as held:
            await place_order("A1", idempotency_key="o-1")
        envelope = held.value.envelope
        assert (envelope.code, envelope.cause) == ("OUTCOME_UNKNOWN", "ledger_restored")
        assert "the shop is down" in envelope.message
        assert effects == []

        report = await ws.reconcile()  # the reconciler asks again: proven absent
        assert (report.examined, report.absent) == (1, 1)
        assert await place_order("A1", idempotency_key="o-1") == "placed"  # it runs now
        assert effects == ["A1"]
        status = await ws.status("o-1")
        assert status is not None
        assert (status.status, status.executions) == (Status.SUCCEEDED, 2)
    finally:
        await ws.close()


def test_a_lost_mark_or_pruned_rows_are_no_restore(tmp_path: Path) -> None:
    """The file removed: no signal, never an alarm. Every row pruned: the ledger's own record
    of the largest id it held keeps it level with the mark."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    shop = Shop()
    asyncio.run(place(WriteSafe(url), shop, KEYS[:10]))
    mark_path(tmp_path / "ledger.db").unlink()
    asyncio.run(place(WriteSafe(url), shop, KEYS[10:20]))

    async def prune_all() -> None:
        ws = WriteSafe(url)
        try:
            await ws.start()
            await prune(ws.ledger, timedelta(microseconds=1))
        finally:
            await ws.close()

    asyncio.run(prune_all())
    asyncio.run(place(WriteSafe(url), shop, KEYS[20:30]))

    assert asyncio.run(restored_of(url)) is None
    assert shop.effects == Counter(KEYS[:30])


async def test_a_pruned_postgres_ledger_is_no_restore(pg_schema: str) -> None:
    """PostgreSQL prunes the newest row too, under the process that created it: the largest id
    the ledger has held is kept in it, so its level stays at this process's mark."""
    ws = WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True)
    tool = Shop().guard(ws)
    try:
        for key in KEYS[:10]:
            await tool("A1", idempotency_key=key)
        assert await ws._guard._restores.check() is None
        assert (await prune(ws.ledger, timedelta(microseconds=1))).operations == 10
        assert await ws._guard._restores.check() is None
    finally:
        await ws.close()


async def test_a_new_postgres_timeline_is_a_restore(pg_schema: str) -> None:
    """A promoted replica or a point-in-time recovery runs on a new timeline; the ledger's row
    still holds the one it was last checked on (set back here, as a replica's copy holds it)."""
    ws = WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True)
    try:
        await ws.start()
        async with ws.ledger.engine.begin() as conn:
            table = f"{pg_schema}.writesafe_ledger_state"  # statements name the ledger's schema
            await conn.execute(text(f"UPDATE {table} SET timeline = timeline - 1"))
        state = await ws._guard._restores.check()
        assert state is not None
        assert state.detected_by is Signal.TIMELINE
    finally:
        await ws.close()


def test_a_postgres_ledger_restored_behind_its_redis_mark_runs_no_key_twice(
    tmp_path: Path, pg_schema: str, redis_prefix: str
) -> None:
    """A new process after the restore, Redis's cached outcomes gone (expired, evicted) but its
    mark kept: the mark tells."""
    backup = tmp_path / "ledger.dump"
    options = {
        "schema": pg_schema,
        "auto_migrate": True,
        "redis_url": REDIS_URL,
        "redis_prefix": redis_prefix,
    }
    shop = Shop()
    asyncio.run(place(WriteSafe(PG_URL, **options), shop, KEYS[:50]))
    dump(pg_schema, backup)
    asyncio.run(place(WriteSafe(PG_URL, **options), shop, KEYS[50:]))
    restore(pg_schema, backup)

    async def forget_outcomes() -> None:
        redis = Redis.from_url(REDIS_URL)
        try:
            async for name in redis.scan_iter(match=f"{redis_prefix}:*"):
                if b":ledger-mark:" not in name:
                    await redis.delete(name)
        finally:
            await redis.aclose()

    asyncio.run(forget_outcomes())
    answers = asyncio.run(place(WriteSafe(PG_URL, **options), shop, KEYS))

    ran_once_each(answers, shop, Signal.MARK, PG_URL, **options)


def test_db_restored_declares_shows_and_clears_with_one_line_errors(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    asyncio.run(place(WriteSafe(url), Shop(), KEYS[:1]))

    def restored(*options: str) -> Result:
        return CliRunner().invoke(cli, ["db", "restored", *options, "--database-url", url])

    for options, why in [
        (("--since", "yesterday"), "is not an ISO 8601 time"),
        (("--since", "2026-12-01T06:00:00"), "has no time zone"),
        (("--since", "2999-01-01T00:00:00Z"), "is in the future"),
        (("--since", "2026-12-01T06:00:00Z", "--clear"), "give one of"),
    ]:
        assert why in one_line_error(restored(*options), 2)
    assert "127.0.0.1:1/none could not be reached" in one_line_error(
        CliRunner().invoke(cli, ["db", "restored", "--database-url", DOWN]), 3
    )
    assert restored("--status").exit_code == 0
    assert "not restored" in restored("--status").stdout

    assert restored("--since", "2026-12-01T06:00:00+00:00").exit_code == 0
    shown = restored("--status", "--json")
    assert shown.exit_code == 1  # a restore is open
    state = json.loads(shown.stdout)["restored"]
    assert (state["since"], state["detected_by"]) == ("2026-12-01T06:00:00+00:00", "operator")

    assert restored("--clear").exit_code == 0
    assert restored("--status").exit_code == 0


def test_a_restore_closes_by_itself_after_the_retention_period(tmp_path: Path) -> None:
    """Every key it may have forgotten would have been pruned by then: a key is new again."""
    clock = ManualClock()
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}", clock=clock)

    async def scenario() -> None:
        try:
            await ws.start()
            retention = timedelta(seconds=ws.settings.retention)
            await declare_restored(ws.ledger, clock.now(), retention)
            clock.advance(retention.total_seconds() - 1)
            assert await ws._guard._restores.check() is not None
            clock.advance(1)
            assert await ws._guard._restores.check() is None
            assert await restored_state(ws.ledger) is None
        finally:
            await ws.close()

    asyncio.run(scenario())


def test_a_sync_close_under_another_process_s_lock_leaves_no_thread_behind(
    tmp_path: Path,
) -> None:
    """The close's last check waits for the lock within the close's budget, then stops: it
    waits in short tries, not one 30 s busy wait, so no driver thread is left waiting to
    answer a loop the close has ended (one raised `Event loop is closed` once the lock was
    free). Nothing is lost: the key is replayed afterwards."""
    file = tmp_path / "ledger.db"
    threads_before = set(threading.enumerate())
    ws = WriteSafe(f"sqlite+aiosqlite:///{file}")

    effects: Counter[str] = Counter()

    @ws.tool("place_order")
    def place_order(sku: str) -> str:
        effects[sku] += 1
        return sku

    assert place_order.key("order-1")("A1") == "A1"
    with write_lock_held(file):
        ws.sync.close()
        # Bar the idle threads of the loop's executor, which its close ends without waiting.
        left = {t for t in threading.enumerate() if not t.name.startswith("asyncio_")}
        assert left <= threads_before
    assert place_order.key("order-1")("A1") == "A1"
    assert effects == {"A1": 1}
    ws.sync.close()


async def close_under_a_lock(ws: WriteSafe, lock: AbstractAsyncContextManager[object]) -> None:
    """A first execution on `ws`, then its close while another connection holds `lock`: the
    close ends with no check of its left running, and nothing is lost (the key replays)."""
    shop = Shop()
    tool = shop.guard(ws)
    await tool("A1", idempotency_key="order-1")
    async with lock:
        await ws.close()
        assert asyncio.all_tasks() == {asyncio.current_task()}
    assert await tool("A1", idempotency_key="order-1") == {"order": "order-1"}
    assert shop.effects == {"order-1": 1}
    await ws.close()


async def test_an_async_close_under_another_process_s_lock_leaves_no_task_behind(
    tmp_path: Path,
) -> None:
    """The sync test above, on the caller's loop."""
    file = tmp_path / "ledger.db"

    @contextlib.asynccontextmanager
    async def locked() -> AsyncIterator[None]:
        with write_lock_held(file):
            yield

    await close_under_a_lock(WriteSafe(f"sqlite+aiosqlite:///{file}"), locked())


async def test_a_postgres_close_under_another_session_s_lock_leaves_no_task_behind(
    pg_schema: str,
) -> None:
    """On PostgreSQL the check's wait for the state row another session holds ends when it is
    cancelled."""

    @contextlib.asynccontextmanager
    async def locked() -> AsyncIterator[None]:
        holder = await asyncpg.connect(asyncpg_dsn())
        try:
            async with holder.transaction():
                table = f"{pg_schema}.writesafe_ledger_state"
                await holder.execute(f"SELECT 1 FROM {table} FOR UPDATE")
                yield
        finally:
            await holder.close()

    await close_under_a_lock(WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True), locked())


async def test_a_check_a_call_left_waiting_for_the_lock_is_stopped_by_the_close(
    tmp_path: Path,
) -> None:
    """A check that waits for the lock as long as any write (one a first execution started,
    whose caller went away) waits in tries of SQLite's busy wait short enough for the close's
    cancellation to end it: the close takes its own budget, not the 30 s of one busy wait."""
    file = tmp_path / "ledger.db"
    ws = WriteSafe(f"sqlite+aiosqlite:///{file}")
    await Shop().guard(ws)("A1", idempotency_key="order-1")
    with write_lock_held(file):
        left = asyncio.create_task(ws._guard._restores.check())
        await asyncio.sleep(0.2)  # it waits for the lock now
        async with asyncio.timeout(SQLITE_BUSY_TIMEOUT / 3):
            await ws.close()
        assert left.done()
        assert asyncio.all_tasks() == {asyncio.current_task()}
