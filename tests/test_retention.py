"""Retention: pruning deletes only final operations past the period, never an open one, and loses
nothing a concurrent guarded call wrote; a pruned key is a new operation."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import select as io_select
import signal
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from typer.testing import CliRunner

from tests.conftest import MakeWriteSafe, run_sync
from writesafe import WriteSafe, WriteSafeSettings
from writesafe.cli import app
from writesafe.idempotency._settings import SettingsRefused
from writesafe.ledger import Intent, Outcome, Status, prune
from writesafe.ledger._retention import DEFAULT_TOMBSTONE_RETENTION, pruned_keys
from writesafe.ledger._writer import attempts, operations
from writesafe.reconciler._retention_bound import retention_refusal

ROOT = Path(__file__).resolve().parent.parent
WRITESAFE = Path(sys.executable).with_name("writesafe")

on_both_ledgers = pytest.mark.parametrize("backend", ["sqlite", "postgres"])

RETENTION = timedelta(hours=24)
LONG_AGO = timedelta(hours=25)
_owners = itertools.count()


def _intent(key: str) -> Intent:
    return Intent(
        scope="default",
        key=key,
        tool="submit",
        fingerprint="f" * 64,
        arguments="{}",
        owner=f"owner-{next(_owners)}",
        lease_seconds=15.0,
        max_executions=3,
    )


async def _operation(ws: WriteSafe, key: str, status: Status) -> None:
    """An operation in `status`, made through the ledger as the guard and reconciler make it."""
    intent = _intent(key)
    row = (await ws.ledger.claim(intent)).operation
    if status is Status.IN_FLIGHT:
        return
    ends = Status.OUTCOME_UNKNOWN if status is Status.NEEDS_ATTENTION else status
    finished = await ws.ledger.finish(row, intent.owner, Outcome(ends, result='{"ok":1}'))
    assert finished is not None
    if status is Status.NEEDS_ATTENTION:
        assert await ws.ledger.transition(finished, Status.NEEDS_ATTENTION) is not None


async def _age(ws: WriteSafe, keys: list[str], by: timedelta) -> None:
    """Move the rows of `keys` `by` into the past, as if created and last changed then."""
    async with ws.ledger.engine.begin() as conn:
        now: datetime = (await conn.execute(select(operations.c.updated_at).limit(1))).scalar_one()
        await conn.execute(
            update(operations)
            .where(operations.c.key.in_(keys))
            .values(created_at=now - by, updated_at=now - by)
        )


async def _tombstones(ws: WriteSafe, ages: dict[str, timedelta]) -> None:
    """Tombstones for the keys of `ages`, each left that long ago, as pruning leaves them."""
    now = await ws.ledger.now()
    rows = [{"scope": "default", "key": k, "pruned_at": now - age} for k, age in ages.items()]
    async with ws.ledger.engine.begin() as conn:
        await conn.execute(pruned_keys.insert(), rows)


async def _keys(ws: WriteSafe) -> set[str]:
    async with ws.ledger.engine.connect() as conn:
        return set((await conn.execute(select(operations.c.key))).scalars())


async def _attempt_count(ws: WriteSafe) -> int:
    async with ws.ledger.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(attempts))).scalar_one())


@on_both_ledgers
async def test_prune_removes_only_final_operations_past_the_retention(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    await ws.start()
    for status in Status:
        await _operation(ws, f"old-{status.value}", status)
        await _operation(ws, f"new-{status.value}", status)
    await _age(ws, [f"old-{status.value}" for status in Status], LONG_AGO)
    attempts_before = await _attempt_count(ws)

    report = await prune(ws.ledger, RETENTION, batch_size=2)

    gone = {"old-succeeded", "old-failed"}
    assert await _keys(ws) == {f"{age}-{s.value}" for age in ("old", "new") for s in Status} - gone
    assert (report.operations, report.attempts) == (2, 2)  # one execution attempt each
    assert await _attempt_count(ws) == attempts_before - 2
    again = await prune(ws.ledger, RETENTION)
    assert (again.operations, again.attempts) == (0, 0)


@on_both_ledgers
async def test_a_pruned_key_is_a_new_operation(make_ws: MakeWriteSafe) -> None:
    ws, runs = make_ws(), []

    @ws.tool("submit")
    async def submit(n: int) -> int:
        runs.append(n)
        return n

    assert await submit(1, idempotency_key="k") == 1
    assert await submit(1, idempotency_key="k") == 1  # a replay
    assert await submit(9, idempotency_key="later") == 9  # SQLite keeps the newest operation
    await _age(ws, ["k"], LONG_AGO)
    assert (await ws.expired("k"), await ws.expired("never")) == (None, None)
    assert (await prune(ws.ledger, RETENTION)).operations == 1

    # A pruned key says "expired", distinctly from one never seen.
    assert await ws.status("k") is None
    pruned_at = await ws.expired("k")
    assert pruned_at is not None
    assert abs(pruned_at - await ws.ledger.now()) < timedelta(hours=1)
    assert await asyncio.to_thread(ws.sync.expired, "k") == pruned_at  # the blocking face too
    assert await ws.expired("never") is None
    assert await ws.expired("later") is None

    assert await submit(2, idempotency_key="k") == 2  # not KEY_REUSED: the key is free again
    assert runs == [1, 9, 2]
    status = await ws.status("k")
    assert status is not None
    assert status.executions == 1


@on_both_ledgers
async def test_tombstones_past_their_period_go_and_their_keys_are_never_seen_again(
    make_ws: MakeWriteSafe,
) -> None:
    """Tombstones are bounded: each pass forgets those older than `tombstone_retention`, oldest
    first, in batches; a younger one keeps saying "expired"."""
    ws = make_ws()
    await ws.start()
    week, day = DEFAULT_TOMBSTONE_RETENTION, timedelta(days=1)
    await _tombstones(ws, {"old-1": week + day, "old-2": week + 2 * day, "young": week - day})
    await _operation(ws, "k", Status.SUCCEEDED)
    await _operation(ws, "newest", Status.SUCCEEDED)  # SQLite keeps its newest operation
    await _age(ws, ["k"], LONG_AGO)

    report = await prune(ws.ledger, RETENTION, batch_size=1)

    assert (report.operations, report.tombstones) == (1, 2)
    assert report.batches >= 3  # one operation, then one tombstone per batch
    assert await ws.expired("old-1") is None  # "never seen" again
    assert await ws.expired("old-2") is None
    assert await ws.expired("young") is not None
    assert await ws.expired("k") is not None  # just pruned: its tombstone is the youngest
    again = await prune(ws.ledger, RETENTION, tombstone_retention=day)
    assert again.tombstones == 1  # "young" is past a one-day period; "k" is not
    assert (await ws.expired("young"), await ws.expired("k") is not None) == (None, True)


async def test_sqlite_keeps_its_newest_operation_so_that_no_id_is_given_twice(
    tmp_path: Path,
) -> None:
    """SQLite gives a new row the highest id plus one: had the pruner deleted the newest
    operation, the next one would get its id, and a compare-and-set by id and version, from a
    record held since, could reach the new key's row. The newest waits for a newer one."""
    async with WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}") as ws:
        await ws.start()
        for key in ("a", "b"):
            await _operation(ws, key, Status.SUCCEEDED)
        await _age(ws, ["a", "b"], LONG_AGO)
        newest = await ws.ledger.get("default", "b")
        assert newest is not None

        pruned = await prune(ws.ledger, RETENTION)
        await _operation(ws, "c", Status.SUCCEEDED)
        made = await ws.ledger.get("default", "c")
        assert made is not None
        assert made.id > newest.id, "an id given twice"
        assert pruned.operations == 1
        assert (await prune(ws.ledger, RETENTION)).operations == 1  # b, now that c is newer
        assert await _keys(ws) == {"c"}


@on_both_ledgers
async def test_pruning_under_concurrent_guarded_calls_loses_nothing(
    make_ws: MakeWriteSafe,
) -> None:
    ws, runs = make_ws(), []

    @ws.tool("submit")
    async def submit(key: str) -> str:
        runs.append(key)
        await asyncio.sleep(0)
        return key

    old = [f"old-{n}" for n in range(120)]
    for key in old:
        await submit(key, idempotency_key=key)
    recent = [f"recent-{n}" for n in range(20)]
    for key in recent:
        await submit(key, idempotency_key=key)
    await _age(ws, old, LONG_AGO)
    runs.clear()

    async def callers() -> list[str]:
        # New keys (claims and outcomes racing the pruner's batches) and replays of recent ones.
        fresh = [f"fresh-{n}" for n in range(60)]
        calls = [submit(key, idempotency_key=key) for key in fresh]
        calls += [submit(key, idempotency_key=key) for key in recent]
        return list(await asyncio.gather(*calls))

    answers, report = await asyncio.gather(callers(), prune(ws.ledger, RETENTION, batch_size=7))

    fresh = [f"fresh-{n}" for n in range(60)]
    assert answers == fresh + recent
    assert sorted(runs) == sorted(fresh)  # the recent keys replayed, none executed twice
    assert report.operations == len(old)
    assert await _keys(ws) == set(fresh) | set(recent)
    async with ws.ledger.engine.connect() as conn:
        left = await conn.execute(
            select(operations.c.status, func.count()).group_by(operations.c.status)
        )
        assert dict(left.all()) == {"succeeded": len(fresh) + len(recent)}
    assert await _attempt_count(ws) == len(fresh) + len(recent)


def _copy_aged(path: Path, key: str, copies: int, by: timedelta) -> None:
    """`copies` more operations like `key`'s, with its attempt, made `by` ago (bulk SQL: a
    pass of many batches without as many guarded calls)."""
    micros = int(by.total_seconds() * 1_000_000)
    with sqlite3.connect(path) as lite:
        lite.execute(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
            INSERT INTO writesafe_operations (scope, key, tool, fingerprint, status, version,
                executions, max_executions, arguments, result, checks, created_at, updated_at)
            SELECT scope, 'copy-' || i, tool, fingerprint, status, version, executions,
                max_executions, arguments, result, checks, created_at - ?, updated_at - ?
            FROM writesafe_operations, n WHERE key = ?
            """,
            (copies, micros, micros, key),
        )
        lite.execute(
            """
            INSERT INTO writesafe_attempts (operation_id, kind, execution, owner, fingerprint,
                outcome, started_at, finished_at)
            SELECT id, 'execution', 1, 'copy', fingerprint, status, created_at, updated_at
            FROM writesafe_operations WHERE key LIKE 'copy-%'
            """
        )


def _count_operations(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as lite:  # a WAL read: it waits for no lock
        return int(lite.execute("SELECT count(*) FROM writesafe_operations").fetchone()[0])


async def test_guarded_calls_wait_for_a_pruning_batch_not_the_pass(tmp_path: Path) -> None:
    """On SQLite a batch runs in turn with the guarded writes, on the ledger's writer thread:
    each call made during a long pass is answered after a batch or two of it, counted by the
    rows they removed. Through the async engine, SQLite's busy wait let batch after batch go
    ahead of a call's writes (first executions waited up to 0.8 s during a pass)."""
    path, batch, batches = tmp_path / "ledger.db", 10, 100
    ws = WriteSafe(f"sqlite+aiosqlite:///{path}")

    @ws.tool("submit")
    async def submit(n: int) -> int:
        return n

    await submit(0, idempotency_key="seed")
    _copy_aged(path, "seed", batches * batch, LONG_AGO)
    try:
        pass_ = asyncio.create_task(prune(ws.ledger, RETENTION, batch_size=batch))
        for _ in range(10_000):  # until the pass is under way
            if _count_operations(path) < batches * batch:
                break
            await asyncio.sleep(0.001)
        waited = []  # batches pruned while each call ran
        for n in range(1, 9):
            before = _count_operations(path)
            assert await submit(n, idempotency_key=f"during-{n}") == n
            waited.append((before + 1 - _count_operations(path)) // batch)
        assert not pass_.done(), f"the calls were to be answered during the pass: {waited}"
        assert max(waited) <= 3, waited
        assert (await pass_).operations == batches * batch
    finally:
        await ws.close()


@on_both_ledgers
async def test_the_cli_prunes_and_reports(
    make_ws: MakeWriteSafe, store_options: dict[str, Any]
) -> None:
    ws = make_ws()
    await ws.start()
    await _operation(ws, "old", Status.SUCCEEDED)
    await _operation(ws, "new", Status.SUCCEEDED)
    await _age(ws, ["old"], timedelta(seconds=120))
    await _tombstones(ws, {"gone": timedelta(hours=2), "kept": timedelta(minutes=30)})
    await ws.close()
    arguments = ["db", "prune", "--database-url", store_options["database_url"]]
    if "schema" in store_options:
        arguments += ["--schema", store_options["schema"]]

    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        [*arguments, "--older-than", "60", "--json"],
        env={"WRITESAFE_TOMBSTONE_RETENTION": "3600"},
    )

    assert result.exit_code == 0, result.output
    assert '"pruned_operations": 1' in result.output
    assert '"pruned_attempts": 1' in result.output
    assert '"pruned_tombstones": 1' in result.output
    assert await _keys(make_ws()) == {"new"}


async def test_the_cli_refuses_an_unmigrated_ledger_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()  # there, but never migrated (a missing one is exit 3)
    url = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    result = await asyncio.to_thread(
        CliRunner().invoke, app, ["db", "prune", "--database-url", url]
    )
    assert result.exit_code == 1
    assert "writesafe db upgrade" in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_the_watching_reconciler_prunes_on_its_schedule(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"

    async def prepare() -> None:
        async with WriteSafe(url) as ws:
            await ws.start()
            await _operation(ws, "old", Status.SUCCEEDED)
            await _operation(ws, "new", Status.SUCCEEDED)
            await _age(ws, ["old"], timedelta(seconds=120))

    async def left() -> set[str]:
        async with WriteSafe(url) as ws:
            return await _keys(ws)

    run_sync(prepare())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WRITESAFE_", "SHOP_"))}
    env |= {
        "PYTHONPATH": str(ROOT),
        "WRITESAFE_DATABASE_URL": url,
        "WRITESAFE_RETENTION": "60",
        "SHOP_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'shop.db'}",
    }
    command = [str(WRITESAFE), "reconcile", "tests.apps.shop_app:ws", "--watch", "--json"]
    worker = subprocess.Popen(
        [*command, "--interval", "0.1", "--prune-every", "0.2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        ready, _, _ = io_select.select([worker.stdout], [], [], 60)
        assert ready, "the worker printed nothing"
        report = json.loads(worker.stdout.readline())
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    assert (report["pruned_operations"], report["pruned_attempts"]) == (1, 1)
    assert run_sync(left()) == {"new"}


@pytest.mark.parametrize(
    ("retention", "lease", "settle", "refused"),
    [
        (86_400.0, 15.0, 0.0, False),
        (15.0, 15.0, 0.0, False),  # exactly the floor is enough
        (14.9, 15.0, 0.0, True),
        (20.0, 15.0, 5.0, False),
        (19.0, 15.0, 5.0, True),  # the settle window counts as well
        (1.0, 2.0, 0.0, True),
    ],
)
def test_retention_is_bounded_below_by_the_lease_and_the_settle_window(
    retention: float, lease: float, settle: float, refused: bool
) -> None:
    refusal = retention_refusal(retention, lease, settle)
    assert (refusal is not None) == refused
    if refusal is not None:
        assert "\n" not in refusal
        assert f"at least {lease + settle:g}" in refusal


def test_a_retention_shorter_than_the_lease_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    with pytest.raises(SettingsRefused, match="at least 2"):
        WriteSafe(url, settings=WriteSafeSettings(retention=1, lease_seconds=2))
    ws = WriteSafe(url, settings=WriteSafeSettings(retention=30, lease_seconds=2))
    with pytest.raises(SettingsRefused, match="at least 32"):
        ws.tool("slow", settle_after=30)

    monkeypatch.setenv("WRITESAFE_RETENTION", "1")
    result = CliRunner().invoke(app, ["db", "prune", "--database-url", url])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "set WRITESAFE_RETENTION to at least 15" in result.output
