"""One number bounds a process's PostgreSQL connections, in all its pools; unused ones close.

Eight processes each serve a burst (24 guarded calls and 8 reads at once) under a budget of 4
connections: the server never sees more than 8 × 4 of theirs, and once they sit idle their
writers' connections close. Counted in `pg_stat_activity` by an `application_name` of this
test's own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import asyncpg
import pytest

from tests.conftest import PG_URL, asyncpg_dsn
from writesafe import WriteSafe

ROOT = Path(__file__).resolve().parents[1]
PROCESSES = 8
BUDGET = 4  # per process: the writer's 1 and SQLAlchemy's 3, of which it keeps 2
KEPT = 2  # SQLAlchemy's connections kept between uses (`ledger._engine`)


async def _count(application: str) -> int:
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1"
        return int(await connection.fetchval(query, application))
    finally:
        await connection.close()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.pg_connections(PROCESSES * BUDGET + 2)
def test_eight_processes_stay_under_the_budget_and_close_idle_connections(
    pg_schema: str, tmp_path: Path
) -> None:
    application = f"ws-budget-{uuid.uuid4().hex[:8]}"
    config = {
        "work": str(tmp_path),
        "url": f"{PG_URL}?application_name={application}",
        "schema": pg_schema,
        "settings": {
            "db_max_connections": BUDGET,
            "pool_size": 1,
            "db_idle_seconds": 1.0,
        },
    }
    migrated = WriteSafe(PG_URL, schema=pg_schema, auto_migrate=True)
    asyncio.run(_started_and_closed(migrated))
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.budget_worker", json.dumps({**config, "index": n})],
            cwd=ROOT,
            stdout=subprocess.PIPE,
        )
        for n in range(PROCESSES)
    ]
    try:
        (tmp_path / "go").touch()
        peak = 0
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("burst-*"))) < PROCESSES:
            assert time.monotonic() < deadline, "the bursts did not finish"
            assert all(worker.poll() is None for worker in workers)
            peak = max(peak, asyncio.run(_count(application)))
        after_burst = asyncio.run(_count(application))
        idle = after_burst
        while idle > PROCESSES * KEPT and time.monotonic() < deadline:
            time.sleep(0.2)
            idle = asyncio.run(_count(application))
    finally:
        (tmp_path / "stop").touch()
        outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    ended = sum((Counter(json.loads(output)) for output in outputs), Counter[str]())
    assert ended == Counter({"ok": PROCESSES * 24, "read": PROCESSES * 8})
    assert 0 < peak <= PROCESSES * BUDGET
    assert after_burst <= PROCESSES * BUDGET
    assert idle <= PROCESSES * KEPT  # every writer connection closed once idle


async def _started_and_closed(ws: WriteSafe) -> None:
    await ws.start()
    await ws.close()
