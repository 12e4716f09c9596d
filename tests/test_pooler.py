"""The ledger behind PgBouncer, in transaction and in session mode: at most once, no outage
that is not one, and the schema where it was asked for."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from typer.testing import CliRunner

from tests.conftest import asyncpg_dsn, fresh_schema
from tests.pgbouncer import available, pgbouncer
from writesafe import WriteSafe, WriteSafeError, WriteSafeSettings
from writesafe.cli import app

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not available(), reason="pgbouncer is not installed (.ci/run installs it)"),
]

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 5  # server connections of the one-process test


@pytest.fixture(params=["transaction", "session"])
def pooled_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The ledger URL through a PgBouncer of this test's own, as its mode needs it. In session
    mode a client keeps its server connection, so the pooler's pool holds the whole budget."""
    with pgbouncer(request.param, pool_size=BUDGET) as url:
        yield f"{url}?pooler=transaction" if request.param == "transaction" else url


async def test_first_executions_and_replays_through_the_pooler(
    pooled_url: str, pg_schema: str
) -> None:
    """16 calls in flight from one process, first executions then replays: every one answers,
    each key executes once."""
    settings = WriteSafeSettings(db_max_connections=BUDGET, pool_size=BUDGET - 1)
    ws = WriteSafe(pooled_url, schema=pg_schema, auto_migrate=True, settings=settings)
    executed: Counter[str] = Counter()
    failures: Counter[str] = Counter()

    @ws.tool("submit_order", timeout=None)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        executed[order["key"]] += 1
        await asyncio.sleep(0.005)
        return order

    in_flight = asyncio.Semaphore(16)

    async def call(key: str) -> None:
        async with in_flight:
            try:
                assert await submit_order({"key": key}, idempotency_key=key) == {"key": key}
            except WriteSafeError as error:
                failures[error.envelope.code] += 1

    keys = [f"ord-{n}" for n in range(120)]
    try:
        for _ in range(2):  # the second round replays every key
            await asyncio.gather(*(call(key) for key in keys))
    finally:
        await ws.close()
    assert failures == Counter()
    assert executed == Counter(keys)


@pytest.mark.slow
def test_processes_racing_on_the_same_keys_through_a_transaction_pooler(
    pg_schema: str, tmp_path: Path
) -> None:
    """Four processes call the same 40 keys at once, twice, through one transaction pooler: no
    statement of one reaches another's, every call answers, each key runs once."""
    keys = [f"race-{n}" for n in range(40)]
    with pgbouncer("transaction") as url:
        migrated = WriteSafe(f"{url}?pooler=transaction", schema=pg_schema, auto_migrate=True)
        asyncio.run(_started_and_closed(migrated))
        config = {
            "work": str(tmp_path),
            "url": f"{url}?pooler=transaction",
            "schema": pg_schema,
            "keys": keys,
            "in_flight": 8,
            "rounds": 2,
        }
        workers = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.pooler_worker", json.dumps(config)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
            )
            for _ in range(4)
        ]
        (tmp_path / "go").touch()
        outputs = [worker.communicate(timeout=120)[0] for worker in workers]
    ended = sum((Counter(json.loads(output)) for output in outputs), Counter[str]())
    assert ended == Counter({"ok": 4 * 2 * len(keys)})
    assert Counter((tmp_path / "effects").read_text().split()) == Counter(keys)


async def _started_and_closed(ws: WriteSafe) -> None:
    await ws.start()
    await ws.close()


@pytest.fixture
def new_schema() -> Iterator[str]:
    """A schema name nobody created yet (dropped afterwards if a test created it)."""
    with fresh_schema() as name:
        yield name


def test_db_upgrade_through_a_transaction_pooler_puts_every_table_in_its_schema(
    new_schema: str,
) -> None:
    """Through the pooler, repeatedly: it succeeds each time, and the tables are in the schema
    asked for (a startup `search_path` would have been refused or dropped)."""
    with pgbouncer("transaction") as url:
        pooled = f"{url}?pooler=transaction"
        for _ in range(3):
            upgraded = CliRunner().invoke(
                app, ["db", "upgrade", "--database-url", pooled, "--schema", new_schema]
            )
            assert upgraded.exit_code == 0, upgraded.output
        current = CliRunner().invoke(
            app, ["db", "current", "--database-url", pooled, "--schema", new_schema]
        )
        assert current.exit_code == 0, current.output
    tables = asyncio.run(_tables(new_schema))
    assert {"writesafe_operations", "writesafe_attempts", "writesafe_alembic_version"} <= tables


async def _tables(schema: str) -> set[str]:
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        rows = await connection.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema
        )
    finally:
        await connection.close()
    return {row["tablename"] for row in rows}
