"""Separate processes racing on one key, and a process killed in the middle of a write."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PG_URL, REDIS_URL
from writesafe import Status, WriteSafe, WriteSafeError

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["sqlite", "postgres+redis"])
def writesafe_options(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "sqlite":
        return {"database_url": f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"}
    return {
        "database_url": PG_URL,
        "schema": request.getfixturevalue("pg_schema"),
        "auto_migrate": True,
        "redis_url": REDIS_URL,
        "redis_prefix": request.getfixturevalue("redis_prefix"),
    }


def start_worker(work: Path, options: dict[str, Any], **config: Any) -> subprocess.Popen[str]:
    payload = {"work": str(work), "writesafe": options, "key": "race", **config}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.race_worker", json.dumps(payload)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def answers(workers: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers), outputs
    return [json.loads(output.strip().splitlines()[-1]) for output in outputs]


def has_started(work: Path) -> bool:
    """Whether a worker has begun its write (it leaves a file: processes share no loop)."""
    return any(work.glob("started-*"))


def effects(work: Path) -> list[str]:
    path = work / "effects"
    return path.read_text().split() if path.exists() else []


async def migrated(options: dict[str, Any]) -> WriteSafe:
    ws = WriteSafe(**{**options, "auto_migrate": True})
    await ws.start()
    return ws


async def test_eight_processes_racing_on_one_key_cause_one_effect(
    tmp_path: Path, writesafe_options: dict[str, Any]
) -> None:
    await (await migrated(writesafe_options)).close()
    workers = [start_worker(tmp_path, writesafe_options, hold_seconds=0.5) for _ in range(8)]
    await asyncio.sleep(1.0)  # let every worker import and connect before the start signal
    (tmp_path / "go").touch()
    results = await asyncio.to_thread(answers, workers)

    assert len(effects(tmp_path)) == 1
    assert all("result" in answer for answer in results), results
    assert len({json.dumps(answer["result"]) for answer in results}) == 1


async def test_a_killed_writer_leaves_an_expiring_lease_and_no_second_effect(
    tmp_path: Path, writesafe_options: dict[str, Any]
) -> None:
    options = {**writesafe_options, "lease_seconds": 4.0, "wait_timeout": 0.2}
    ws = await migrated(options)

    @ws.tool("submit_order")
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("a retry must not execute the write again")

    try:
        (tmp_path / "go").touch()
        victim = start_worker(tmp_path, options, hold_seconds=60)
        deadline = time.monotonic() + 30
        while not has_started(tmp_path) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)

        status = await ws.status("race")
        assert status is not None
        assert status.status is Status.IN_FLIGHT
        assert status.lease_expires_at is not None

        with pytest.raises(WriteSafeError) as early:  # the lease still stands
            await submit_order({"sku": "A1"}, idempotency_key="race")
        assert early.value.envelope.code == "IN_PROGRESS"

        await asyncio.sleep(4.5)  # the dead writer's lease runs out
        # A new process: on SQLite it must watch the lease for a whole lease itself before it
        # may take it over, so it waits that long (no server clock to ask).
        late = start_worker(tmp_path, {**options, "wait_timeout": 6.0}, hold_seconds=0)
        assert (await asyncio.to_thread(answers, [late]))[0]["error"] == "OUTCOME_UNKNOWN"
        assert effects(tmp_path) == [str(victim.pid)]
        status = await ws.status("race")
        assert status is not None
        assert status.status is Status.OUTCOME_UNKNOWN
    finally:
        await ws.close()
