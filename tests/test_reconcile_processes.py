"""Reconciliation with real processes: a worker killed mid-write, and many reconcilers at once.

The downstream is a real table (a SQLite file, or the test's PostgreSQL schema), so effects and
lookups are counted across processes. The reconciler runs as the real `writesafe` command.
"""

from __future__ import annotations

import json
import os
import select as io_select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from sqlalchemy import func, insert, select

from tests.apps.shop_db import ShopDB
from tests.conftest import PG_URL, run_sync
from tests.loopback import free_port, wait_until_healthy
from writesafe import Status
from writesafe.ledger import ApiKeys, Attempt, AttemptKind, Ledger, Operation, Role, dumps_json
from writesafe.ledger._migrations import in_ledger_schema
from writesafe.reconciler._single import SingleWorkerLock
from writesafe.service import create_api_key

ROOT = Path(__file__).resolve().parent.parent
WRITESAFE = Path(sys.executable).with_name("writesafe")
operations = Operation.__table__
attempts = Attempt.__table__

pytestmark = pytest.mark.slow


@dataclass
class Deployment:
    """Where the ledger and the shop live, as environment for child processes."""

    env: dict[str, str]
    ledger_url: str
    schema: str | None
    shop: ShopDB

    def ledger(self) -> Ledger:
        return Ledger.from_url(self.ledger_url, schema=self.schema)

    def run(self, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120, **options
        )

    def spawn(self, *args: str, extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            args,
            cwd=ROOT,
            env={**self.env, **(extra or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def _deployment(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Deployment:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WRITESAFE_", "SHOP_"))}
    env["PYTHONPATH"] = str(ROOT)
    env["WRITESAFE_LEASE_SECONDS"] = "1"
    schema: str | None
    if backend == "sqlite":
        ledger_url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"
        shop_url, schema = f"sqlite+aiosqlite:///{tmp_path / 'shop.db'}", None
    else:
        ledger_url, shop_url = PG_URL, PG_URL
        schema = request.getfixturevalue("pg_schema")
        env["WRITESAFE_DB_SCHEMA"] = env["SHOP_SCHEMA"] = schema
    env["WRITESAFE_DATABASE_URL"], env["SHOP_DATABASE_URL"] = ledger_url, shop_url
    deployment = Deployment(env, ledger_url, schema, ShopDB(shop_url, schema))

    async def prepare() -> None:
        ledger = deployment.ledger()
        try:
            await ledger.migrate()
        finally:
            await ledger.close()
        await deployment.shop.create()

    run_sync(prepare())
    return deployment


@pytest.fixture
def deployment(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Deployment]:
    made = _deployment(backend, tmp_path, request)
    yield made
    run_sync(made.shop.close())


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_worker_killed_after_the_commit_is_reconciled_by_the_cli(
    deployment: Deployment, tmp_path: Path
) -> None:
    marker = tmp_path / "committed"
    child = deployment.spawn(
        sys.executable,
        "-m",
        "tests.apps.place_order",
        "ord-kill",
        "A1",
        # 3 s, not the deployment's 1 s: the child must reach its commit inside the lease on a
        # loaded machine too, or its fence ends the write and there is no crash to reconcile.
        extra={"SHOP_HANG_AFTER_COMMIT": str(marker), "WRITESAFE_LEASE_SECONDS": "3"},
    )
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the child never reached the downstream commit"
        time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    before = run_sync(_operation(deployment, "ord-kill"))
    assert before["status"] == Status.IN_FLIGHT  # the ledger never heard how it ended
    assert run_sync(deployment.shop.count_orders()) == 1
    _wait_for_lease_expiry(before["lease_expires_at"])

    reconciled = deployment.run(
        str(WRITESAFE), "reconcile", "tests.apps.shop_app:ws", "--once", "--json"
    )

    assert reconciled.returncode == 0, reconciled.stderr
    report = json.loads(reconciled.stdout)
    assert {k: report[k] for k in ("examined", "found", "expired_leases", "errors")} == {
        "examined": 1,
        "found": 1,
        "expired_leases": 1,
        "errors": 0,
    }
    after = run_sync(_operation(deployment, "ord-kill"))
    assert after["status"] == Status.SUCCEEDED
    assert json.loads(after["result"]) == {"order_id": 1, "sku": "A1"}
    # The caller retries in a new process: the found order comes back, nothing runs again.
    retry = deployment.run(sys.executable, "-m", "tests.apps.place_order", "ord-kill", "A1")
    assert retry.returncode == 0, retry.stderr
    assert json.loads(retry.stdout) == {"order_id": 1, "sku": "A1"}
    assert run_sync(deployment.shop.count_orders()) == 1
    assert run_sync(deployment.shop.lookups_by_reference()) == {"ord-kill": 1}


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_one_reconcile_once_takes_over_every_crashed_lease(deployment: Deployment) -> None:
    # 40 crashed leases are two and a half batches of 16: a cron job's one pass takes them all.
    keys = [f"c{n:02d}" for n in range(40)]
    run_sync(_seed_unknown(deployment, keys, crashed=True))
    run_sync(deployment.shop.seed(keys[::2], "A1"))

    once = deployment.run(str(WRITESAFE), "reconcile", "tests.apps.shop_app:ws", "--once", "--json")

    assert once.returncode == 0, once.stderr
    report = json.loads(once.stdout)
    assert {k: report[k] for k in ("examined", "found", "absent", "expired_leases")} == {
        "examined": 40,
        "found": 20,
        "absent": 20,
        "expired_leases": 40,
    }


OPERATIONS = 500


@pytest.mark.postgres
@pytest.mark.pg_connections(30)
@pytest.mark.parametrize("backend", ["postgres"])
def test_four_reconcilers_resolve_five_hundred_operations_exactly_once(
    deployment: Deployment,
) -> None:
    # 125 batches of 4, claimed by four workers at once from one due queue: with the claim's
    # row locks removed, 112 of the 500 were claimed twice (superseded), so a shared claim
    # shows at this size; 2,000 operations only took four times the wall time.
    keys = [f"k{n:04d}" for n in range(OPERATIONS)]
    present = keys[::2]
    run_sync(_seed_unknown(deployment, keys))
    run_sync(deployment.shop.seed(present, "A1"))

    workers = [
        deployment.spawn(
            str(WRITESAFE),
            "reconcile",
            "tests.apps.shop_app:ws",
            "--once",
            "--json",
            # Four lookups (and ledger connections) at a time per worker keep 4 workers well
            # inside the shared server's max_connections.
            extra={"SHOP_LOOKUP_LATENCY": "0.005", "WRITESAFE_RECONCILE_BATCH": "4"},
        )
        for _ in range(4)
    ]
    reports = []
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=300)
        assert worker.returncode == 0, stderr
        reports.append(json.loads(stdout))

    totals = {name: sum(r[name] for r in reports) for name in reports[0] if name != "seconds"}
    unknown_reasons = run_sync(_unknown_reasons(deployment))
    assert not unknown_reasons, unknown_reasons
    assert totals == {
        "examined": OPERATIONS,
        "found": OPERATIONS // 2,
        "absent": OPERATIONS // 2,
        "still_unknown": 0,
        "escalated": 0,
        "superseded": 0,
        "errors": 0,
        "expired_leases": 0,
    }
    print("examined per worker:", [r["examined"] for r in reports])
    # One lookup per operation downstream, and one audited lookup attempt each in the ledger.
    assert run_sync(deployment.shop.lookups_by_reference()) == dict.fromkeys(keys, 1)
    ledger_view = run_sync(_ledger_view(deployment))
    assert ledger_view["lookups_per_operation"] == {1: OPERATIONS}
    # Seeded at version 1: one claim and one transition each, so all at version 3.
    assert ledger_view["versions"] == {3: OPERATIONS}
    assert ledger_view["statuses"] == {"succeeded": OPERATIONS // 2, "failed": OPERATIONS // 2}
    assert ledger_view["succeeded_keys"] == set(present)


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.pg_connections(16)
def test_two_reconcilers_and_a_service_look_each_operation_up_once(
    deployment: Deployment,
) -> None:
    # Two `reconcile --once` workers and a service answering POST /v1/reconcile drain one due
    # queue together: each operation is leased to exactly one of them (FOR UPDATE SKIP LOCKED).
    keys = [f"s{n:03d}" for n in range(120)]
    run_sync(_seed_unknown(deployment, keys))
    run_sync(deployment.shop.seed(keys[::2], "A1"))
    token = run_sync(_admin_token(deployment))
    slow = {"SHOP_LOOKUP_LATENCY": "0.05", "WRITESAFE_RECONCILE_BATCH": "4"}
    port = free_port()
    app = "tests.apps.shop_app:ws"
    service = deployment.spawn(
        str(WRITESAFE), "serve", app, "--host", "127.0.0.1", "--port", str(port), extra=slow
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(service, base)
        workers = [
            deployment.spawn(str(WRITESAFE), "reconcile", app, "--once", "--json", extra=slow)
            for _ in range(2)
        ]
        while run_sync(_lookup_attempts(deployment)) == 0:  # the workers have begun
            time.sleep(0.05)
        passes: list[dict[str, int]] = []
        headers = {"Authorization": f"Bearer {token}"}
        while not passes or passes[-1]["examined"]:
            answer = httpx.post(f"{base}/v1/reconcile", headers=headers, json={"limit": 8})
            assert answer.status_code == 200, answer.text
            passes.append(answer.json())
        reports = []
        for worker in workers:
            stdout, stderr = worker.communicate(timeout=300)
            assert worker.returncode == 0, stderr
            reports.append(json.loads(stdout))
    finally:
        service.send_signal(signal.SIGTERM)
        service.communicate(timeout=60)

    by_whom = [r["examined"] for r in reports] + [sum(p["examined"] for p in passes)]
    print("examined by worker, worker, service:", by_whom)
    assert all(by_whom), by_whom  # all three took part
    assert sum(by_whom) == len(keys)
    for report in [*reports, *passes]:
        assert (report["superseded"], report["errors"]) == (0, 0), report
    assert run_sync(deployment.shop.lookups_by_reference()) == dict.fromkeys(keys, 1)
    assert run_sync(_ledger_view(deployment))["lookups_per_operation"] == {1: len(keys)}


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_service_that_made_a_pass_leaves_the_sqlite_ledger_to_the_cli(
    deployment: Deployment,
) -> None:
    run_sync(_seed_unknown(deployment, ["k1", "k2"]))
    run_sync(deployment.shop.seed(["k1"], "A1"))
    token = run_sync(_admin_token(deployment))
    port, app = free_port(), "tests.apps.shop_app:ws"
    service = deployment.spawn(
        str(WRITESAFE), "serve", app, "--host", "127.0.0.1", "--port", str(port)
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(service, base)
        headers = {"Authorization": f"Bearer {token}"}
        answer = httpx.post(f"{base}/v1/reconcile", headers=headers, json={"limit": 1})
        assert answer.status_code == 200, answer.text
        assert answer.json()["examined"] == 1

        # The service still runs: its pass is over, so the cron job's pass may run.
        once = deployment.run(str(WRITESAFE), "reconcile", app, "--once", "--json")

        assert once.returncode == 0, once.stderr
        assert json.loads(once.stdout)["examined"] == 1
    finally:
        service.send_signal(signal.SIGTERM)
        service.communicate(timeout=60)


async def _admin_token(deployment: Deployment) -> str:
    ledger = deployment.ledger()
    try:
        store = ApiKeys(ledger.engine)
        _, token = await create_api_key(store, scope="default", role=Role.ADMIN, name="ops")
    finally:
        await ledger.close()
    return token


async def _lookup_attempts(deployment: Deployment) -> int:
    ledger = deployment.ledger()
    try:
        async with ledger.engine.connect() as conn:
            query = select(func.count()).where(attempts.c.kind == AttemptKind.LOOKUP.value)
            return int((await conn.execute(query)).scalar_one())
    finally:
        await ledger.close()


async def _unknown_reasons(deployment: Deployment) -> dict[str, int]:
    ledger = deployment.ledger()
    try:
        async with ledger.engine.connect() as conn:
            query = select(attempts.c.evidence).where(attempts.c.outcome == "unknown")
            rows = (await conn.execute(query)).scalars().all()
    finally:
        await ledger.close()
    reasons: dict[str, int] = {}
    for evidence in rows:
        found = json.loads(evidence)
        reason = str(found.get("reason") or found.get("message"))[:120]
        reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def _wait_for_lease_expiry(lease_expires_at: datetime) -> None:
    while datetime.now(UTC) <= lease_expires_at + timedelta(milliseconds=50):
        time.sleep(0.1)


async def _operation(deployment: Deployment, key: str) -> dict[str, Any]:
    ledger = deployment.ledger()
    try:
        operation = await ledger.get("default", key)
    finally:
        await ledger.close()
    assert operation is not None
    return {
        "status": operation.status,
        "result": operation.result,
        "lease_expires_at": operation.lease_expires_at,
    }


async def _seed_unknown(deployment: Deployment, keys: list[str], *, crashed: bool = False) -> None:
    """Operations whose execution was sent a minute ago and whose outcome is unknown; or, if
    `crashed`, still `in_flight` under a lease that ran out 59 s ago (its worker died)."""
    now = datetime.now(UTC)
    sent = now - timedelta(minutes=1)
    crash = {
        "status": Status.IN_FLIGHT.value,
        "lease_owner": "dead-worker",
        "lease_expires_at": sent + timedelta(seconds=1),
        "last_code": None,
        "next_check_at": None,
    }
    rows = [
        {
            "scope": "default",
            "key": key,
            "tool": "submit_order",
            "fingerprint": "0" * 64,
            "status": Status.OUTCOME_UNKNOWN.value,
            "version": 1,
            "executions": 1,
            "max_executions": 3,
            "arguments": dumps_json({"sku": "A1"}),
            "last_code": "OUTCOME_UNKNOWN",
            "last_sent_at": sent,
            "checks": 0,
            "next_check_at": sent,
            "created_at": sent,
            "updated_at": sent,
            **(crash if crashed else {}),
        }
        for key in keys
    ]
    ledger = deployment.ledger()
    try:
        async with ledger.engine.begin() as conn:
            await conn.execute(insert(operations), rows)
    finally:
        await ledger.close()


async def _ledger_view(deployment: Deployment) -> dict[str, Any]:
    ledger = deployment.ledger()
    try:
        async with ledger.engine.connect() as conn:
            per_operation = (
                select(func.count().label("n"))
                .where(attempts.c.kind == AttemptKind.LOOKUP.value)
                .group_by(attempts.c.operation_id)
                .subquery()
            )
            lookups = (
                await conn.execute(select(per_operation.c.n, func.count()).group_by("n"))
            ).all()
            versions = (
                await conn.execute(
                    select(operations.c.version, func.count()).group_by(operations.c.version)
                )
            ).all()
            statuses = (
                await conn.execute(
                    select(operations.c.status, func.count()).group_by(operations.c.status)
                )
            ).all()
            succeeded = (
                await conn.execute(
                    select(operations.c.key).where(operations.c.status == Status.SUCCEEDED.value)
                )
            ).scalars()
            return {
                "lookups_per_operation": dict(lookups),
                "versions": dict(versions),
                "statuses": dict(statuses),
                "succeeded_keys": set(succeeded),
            }
    finally:
        await ledger.close()


# -- the command line, as operators run it -----------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_writesafe_resolve_settles_needs_attention_on_the_record(deployment: Deployment) -> None:
    run_sync(_seed_needs_attention(deployment, "ord-stuck"))
    resolve = (str(WRITESAFE), "resolve", "ord-stuck", "--app", "tests.apps.shop_app:ws")
    reason = ("--reason", "order 7 is in the shop's back office", "--actor", "alice")

    resolved = deployment.run(
        *resolve, "--outcome", "succeeded", "--result", '{"order_id": 7, "sku": "A1"}', *reason,
        "--evidence", '{"ticket": "OPS-7"}', "--json",
    )  # fmt: skip

    assert resolved.returncode == 0, resolved.stderr
    status = json.loads(resolved.stdout)
    assert (status["status"], status["result"]) == ("succeeded", {"order_id": 7, "sku": "A1"})
    operator = status["attempts"][-1]
    assert (operator["kind"], operator["actor"], operator["reason"]) == (
        "operator",
        "alice",
        "order 7 is in the shop's back office",
    )
    assert operator["evidence"]["operator_evidence"] == {"ticket": "OPS-7"}
    again = deployment.run(*resolve, "--outcome", "failed", *reason)
    assert again.returncode == 1
    assert "only needs_attention and outcome_unknown operations" in _flat(again.stderr)
    missing = deployment.run(
        str(WRITESAFE), "resolve", "nope", "--app", "tests.apps.shop_app:ws",
        "--outcome", "failed", *reason,
    )  # fmt: skip
    assert missing.returncode == 4
    bad = deployment.run(*resolve, "--outcome", "succeeded", "--result", "{oops", *reason)
    assert bad.returncode == 2
    assert "--result is not valid JSON" in _flat(bad.stderr)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_writesafe_reconcile_reports_and_refuses_clearly(deployment: Deployment) -> None:
    run_sync(_seed_unknown(deployment, ["k1", "k2"]))
    run_sync(deployment.shop.seed(["k1"], "A1"))
    reconcile = (str(WRITESAFE), "reconcile", "tests.apps.shop_app:ws")

    unknown_tool = deployment.run(*reconcile, "--tool", "nope")
    assert unknown_tool.returncode == 2
    assert "no tool named 'nope'" in _flat(unknown_tool.stderr)
    database = Path(deployment.ledger_url.removeprefix("sqlite+aiosqlite:///"))
    with SingleWorkerLock(database).held():  # another process's pass is running
        busy = deployment.run(*reconcile, "--once")
    assert busy.returncode == 1
    assert "one reconciler at a time" in _flat(busy.stderr)

    done = deployment.run(*reconcile, "--once")

    assert done.returncode == 0, done.stderr
    assert "reconciliation" in done.stdout
    rows = dict(line.strip("│ ").split("│")[:2] for line in done.stdout.splitlines() if "│" in line)
    counts = {label.strip(): value.strip() for label, value in rows.items()}
    assert (counts["examined"], counts["found (succeeded)"]) == ("2", "1")
    assert counts["absent (failed, may continue)"] == "1"


def _flat(text: str) -> str:
    """The CLI's message without the line breaks rich puts in at the terminal width."""
    return " ".join(text.split())


async def _seed_needs_attention(deployment: Deployment, key: str) -> None:
    await _seed_unknown(deployment, [key])
    ledger = deployment.ledger()
    try:
        async with ledger.engine.begin() as conn:
            await conn.execute(
                operations.update()
                .where(operations.c.key == key)
                .values(status=Status.NEEDS_ATTENTION.value, next_check_at=None, checks=10)
            )
    finally:
        await ledger.close()


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_watching_reconciler_outlives_a_ledger_outage(deployment: Deployment) -> None:
    """With the ledger's table gone for a while, `--watch` keeps trying instead of exiting."""

    async def execute(statement: str) -> None:
        ledger = deployment.ledger()
        try:
            async with ledger.engine.begin() as connection:
                await in_ledger_schema(connection)
                await connection.exec_driver_sql(statement)
        finally:
            await ledger.close()

    run_sync(execute("ALTER TABLE writesafe_operations RENAME TO writesafe_operations_away"))
    worker = deployment.spawn(
        str(WRITESAFE), "reconcile", "tests.apps.shop_app:ws", "--watch", "--interval", "0.1"
    )
    try:
        assert worker.stderr is not None
        first = _line_within(worker.stderr, 60)  # the first failed pass
        assert "ledger failed (ledger_misconfigured" in first, first
        time.sleep(2)  # a few more failed passes
        assert worker.poll() is None, worker.communicate()
    finally:
        run_sync(execute("ALTER TABLE writesafe_operations_away RENAME TO writesafe_operations"))
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr


def _line_within(stream: IO[str], seconds: float) -> str:
    """The next line of a child's output, or "" if none comes in time."""
    ready, _, _ = io_select.select([stream], [], [], seconds)
    return stream.readline() if ready else ""
