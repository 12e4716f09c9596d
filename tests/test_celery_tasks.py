"""A Celery task guarded by writesafe, with real worker processes on the machine's Redis broker."""

from __future__ import annotations

import gc
import importlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery, Task

from tests.conftest import REDIS_URL
from writesafe import Status, WriteSafe, WriteSafeError
from writesafe.contrib.celery import idempotent_task
from writesafe.ledger import AttemptKind

ROOT = Path(__file__).resolve().parent.parent


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def shop_environment(
    work: Path, broker_prefix: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Configure `tests.apps.celery_shop` (here, for the sender, and for its workers)."""
    for name, value in {
        "WRITESAFE_SHOP_WORK": str(work),
        "WRITESAFE_CELERY_BROKER": REDIS_URL,
        "WRITESAFE_CELERY_PREFIX": broker_prefix,
        "WRITESAFE_CELERY_QUEUE": queue,
    }.items():
        monkeypatch.setenv(name, value)
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def shop_app() -> Celery:
    """The workers' own app, to send with: loaded anew, since it reads this test's environment
    (its broker key prefix) when it is imported."""
    module = importlib.import_module("tests.apps.celery_shop")
    app: Celery = importlib.reload(module).app
    return app


def worker(name: str, queue: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A real worker process of the shop app, consuming `queue`."""
    command = ["celery", "-A", "tests.apps.celery_shop", "worker", "--pool", "solo"]
    options = ["-Q", queue, "-n", f"{name}@%h", "-l", "warning", "--without-gossip"]
    return subprocess.Popen(
        [sys.executable, "-m", *command, *options, "--without-mingle", "--without-heartbeat"],
        cwd=ROOT,
        env=env,
    )


def delete_keys(prefixes: list[str]) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for prefix in prefixes:
            keys = list(client.scan_iter(match=f"{prefix}*"))
            if keys:
                client.delete(*keys)
    finally:
        client.close()


@pytest.fixture(scope="module")
def broker_prefixes() -> Iterator[list[str]]:
    """Every broker prefix of this module's tests, deleted again once they are all done: an
    app a test has closed can still write under its prefix while the next test runs (a
    reloaded module's old app, collected later)."""
    prefixes: list[str] = []
    yield prefixes
    gc.collect()
    delete_keys(prefixes)


@pytest.fixture
def broker_prefix(broker_prefixes: list[str]) -> Iterator[str]:
    """This test's own Redis key prefix for the broker's keys, deleted afterwards."""
    prefix = f"wstest-celery-{uuid.uuid4().hex[:8]}:"
    broker_prefixes.append(prefix)
    yield prefix
    delete_keys([prefix])


@pytest.mark.slow
@pytest.mark.redis
def test_a_worker_killed_mid_effect_is_settled_by_the_lookup_on_redelivery(
    tmp_path: Path, broker_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"{broker_prefix}refunds"
    env = shop_environment(tmp_path, broker_prefix, queue, monkeypatch)
    sender = shop_app()
    (tmp_path / "hang").touch()
    first = worker("first", queue, env)
    second: subprocess.Popen[bytes] | None = None
    ledger = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    try:
        sender.send_task("refund", args=["o-1"], task_id="refund-o-1", queue=queue)
        wait_until(lambda: any(tmp_path.glob("refunded-*")), "the first worker refunded")
        os.kill(first.pid, signal.SIGKILL)  # in the middle of the task: refunded, not answered
        first.wait(timeout=30)
        (tmp_path / "hang").unlink()

        second = worker("second", queue, env)

        def settled() -> bool:
            status = ledger.sync.status("refund-o-1")
            return status is not None and status.status is Status.SUCCEEDED

        wait_until(settled, "the redelivered task settled the operation")
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
        sender.close()

    status = ledger.sync.status("refund-o-1")
    ledger.sync.close()
    assert (tmp_path / "refunds").read_text().split() == ["refund-o-1"]  # one effect
    assert status is not None
    assert status.result == {"refund_id": "r-refund-o-1"}
    assert status.executions == 1
    kinds = [(attempt.kind, attempt.outcome) for attempt in status.attempts]
    assert kinds[0][0] is AttemptKind.EXECUTION, kinds  # the one execution, never answered
    assert kinds[-1] == (AttemptKind.LOOKUP, "found"), kinds  # settled by the lookup


@pytest.mark.slow
@pytest.mark.redis
def test_a_bound_task_delivered_twice_runs_once_keyed_by_its_task_id(
    tmp_path: Path, broker_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"{broker_prefix}charges"
    env = shop_environment(tmp_path, broker_prefix, queue, monkeypatch)
    sender = shop_app()
    process = worker("charges", queue, env)
    ledger = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    try:
        for _ in range(2):  # a redelivery: the same task id again
            sender.send_task("charge", args=["o-2"], task_id="charge-o-2", queue=queue)

        def delivered() -> int:
            path = tmp_path / "delivered"
            return path.read_text().split().count("charge-o-2") if path.exists() else 0

        wait_until(lambda: delivered() == 2, "the worker finished both deliveries")
        status = ledger.sync.status("charge-o-2")  # the task id is the key
    finally:
        process.terminate()
        process.wait(timeout=30)
        sender.close()
        ledger.sync.close()

    assert (tmp_path / "charges").read_text().splitlines() == ["charge-o-2 o-2"]  # one effect
    assert status is not None
    assert status.status is Status.SUCCEEDED
    assert status.result == {"charge_id": "c-o-2", "task_id": "charge-o-2"}


def test_a_bound_task_gets_its_task_and_a_direct_call_needs_a_key(tmp_path: Path) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    app = Celery("direct", set_as_current=False)

    @app.task(bind=True)
    @idempotent_task(ws, key=lambda order_id: f"charge-{order_id}")
    def charge(self: Task[Any, Any], order_id: str) -> str:
        return f"{self.name}:{order_id}"

    @idempotent_task(ws, key=lambda order_id: f"refund-{order_id}")
    def refund(order_id: str) -> str:
        return f"r-{order_id}"

    @idempotent_task(ws)
    def keyless(order_id: str) -> str:
        return order_id

    try:
        # Outside a worker (no task id) the key function still names the operation.
        assert refund("o-9") == "r-o-9"
        assert charge("o-9") == f"{charge.name}:o-9"
        assert charge("o-9") == f"{charge.name}:o-9"  # a replay: `self` is not fingerprinted
        for key in ("refund-o-9", "charge-o-9"):
            status = ws.sync.status(key)
            assert status is not None
            assert (status.status, status.executions) == (Status.SUCCEEDED, 1)
        with pytest.raises(WriteSafeError) as keyless_call:
            keyless("o-9")
        assert keyless_call.value.envelope.code == "INPUT_INVALID"
    finally:
        ws.sync.close()
