"""One clock: processes whose clocks are off never take a live lease nor fail an unknown outcome.

The skewed processes are real ones run under libfaketime, 30 s ahead: on PostgreSQL every
judgement of time is the server's, and on the embedded default a lease is judged by what a
process has watched, so neither their guard nor their reconciler acts on their own clock.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.chaos._skew import sweep_stale_state
from tests.conftest import MakeWriteSafe
from tests.skewed_worker import effects, register
from writesafe import Status, WriteSafe, WriteSafeError
from writesafe.ledger import Intent, LeaseHeld, ManualClock

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
FAKETIME = shutil.which("faketime")
# Long enough that the live write's renewals (every LEASE / 3) keep it under load too, and
# still far inside the 30 s skew that must not expire it.
LEASE = 5.0
KEY = "ord-skew"


async def run_skewed(work: Path, options: dict[str, Any], action: str) -> dict[str, Any]:
    """Run `tests.skewed_worker` 30 s ahead, without blocking this loop (its writes renew)."""
    if FAKETIME is None:
        pytest.skip("needs libfaketime: apt-get install faketime (.ci/run installs it)")
    config = {
        "work": str(work),
        "writesafe": {**options, "lease_seconds": LEASE, "wait_timeout": 0.5},
        "action": action,
        "key": KEY,
    }
    sweep_stale_state()  # a killed process's state with the wrapper's pid would stop it
    process = await asyncio.create_subprocess_exec(
        FAKETIME,
        "-f",
        "+30s",
        sys.executable,
        "-m",
        "tests.skewed_worker",
        json.dumps(config),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    answer: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return answer


async def test_a_guard_and_a_reconciler_30s_ahead_leave_a_live_write_alone(
    make_ws: MakeWriteSafe, store_options: dict[str, Any], tmp_path: Path
) -> None:
    ws = make_ws(lease_seconds=LEASE)
    release = asyncio.Event()
    tool = register(ws, tmp_path, release)
    writing = asyncio.create_task(tool({"sku": "A1"}, idempotency_key=KEY))
    while (await ws.status(KEY)) is None:  # noqa: ASYNC110 (the row is in another store)
        await asyncio.sleep(0.01)
    duplicate, reconciler = await asyncio.gather(
        run_skewed(tmp_path, store_options, "call"),
        run_skewed(tmp_path, store_options, "reconcile"),
    )
    release.set()  # the write lands only after both skewed processes have acted
    assert duplicate["error"] == "IN_PROGRESS"
    assert reconciler["report"]["expired_leases"] == 0
    assert reconciler["report"]["absent"] == 0
    assert await writing == {"key": KEY}
    assert effects(tmp_path) == [KEY]
    status = await ws.status(KEY)
    assert status is not None
    assert status.status is Status.SUCCEEDED
    assert [attempt.kind for attempt in status.attempts] == ["execution"]


def _intent(owner: str) -> Intent:
    return Intent(
        scope="default",
        key=KEY,
        tool="submit_order",
        fingerprint="f" * 64,
        arguments="{}",
        owner=owner,
        lease_seconds=LEASE,
        max_executions=3,
    )


async def test_a_clock_step_does_not_expire_a_live_lease_on_the_embedded_default(
    tmp_path: Path,
) -> None:
    """SQLite has no server clock: a process whose wall clock steps 30 s ahead still sees a
    renewed lease as live, and sees a lease nobody renews run out only after watching it for a
    whole lease on its monotonic clock."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    clock = ManualClock()
    async with WriteSafe(database_url=url, lease_seconds=LEASE, clock=clock) as observer:
        ledger = observer.ledger
        row = (await ledger.claim(_intent("writer"))).operation
        clock.step(30)  # the wall clock jumps; no time passes
        assert row.lease_expired(clock.now()), "by the wall clock it would look expired"
        assert await ledger.expire(row) == LeaseHeld(LEASE)
        # The writer renews (its lease changes); the observer's watch starts again.
        clock.advance(LEASE * 0.9)
        assert await ledger.renew_leases({row.id: "writer"}, LEASE) == {row.id}
        renewed = await ledger.get("default", KEY)
        assert renewed is not None
        clock.advance(LEASE * 0.9)
        assert isinstance(await ledger.expire(renewed), LeaseHeld)
        # Now nobody renews: after a whole lease unchanged, it has run out.
        clock.advance(LEASE)
        expired = await ledger.expire(renewed)
        assert not isinstance(expired, LeaseHeld)
        assert expired is not None
        assert expired.status is Status.OUTCOME_UNKNOWN


async def test_a_guard_on_a_skewed_clock_answers_in_progress_for_a_live_lease(
    tmp_path: Path,
) -> None:
    """Through the public API: a duplicate from a process 30 s ahead is told to wait."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
    clock = ManualClock()
    async with (
        WriteSafe(database_url=url, lease_seconds=LEASE) as writer,
        WriteSafe(database_url=url, lease_seconds=LEASE, clock=clock, wait_timeout=0.2) as skewed,
    ):
        held = asyncio.Event()
        release = asyncio.Event()

        @writer.tool("submit_order", timeout=None)
        async def write(order: dict[str, Any]) -> str:
            held.set()
            await release.wait()
            return "placed"

        @skewed.tool("submit_order", timeout=None)
        async def duplicate(order: dict[str, Any]) -> str:
            raise AssertionError("the skewed process must not execute")

        writing = asyncio.create_task(write({"sku": "A1"}, idempotency_key=KEY))
        await held.wait()
        clock.step(30)
        with pytest.raises(WriteSafeError) as raised:
            await duplicate({"sku": "A1"}, idempotency_key=KEY)
        assert raised.value.envelope.code == "IN_PROGRESS"
        release.set()
        assert await writing == "placed"
