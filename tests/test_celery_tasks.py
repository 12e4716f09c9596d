"""A Celery task guarded by writesafe, with real worker processes on the machine's Redis broker."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import REDIS_URL
from writesafe import Status, WriteSafe, idempotent_task
from writesafe.ledger import AttemptKind

ROOT = Path(__file__).resolve().parent.parent


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 90.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


@pytest.fixture
def broker_prefix() -> Iterator[str]:
    """This test's own Redis key prefix for the broker's keys, deleted afterwards."""
    prefix = f"wstest-celery-{uuid.uuid4().hex[:8]}:"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.redis
def test_a_worker_killed_mid_effect_is_settled_by_the_lookup_on_redelivery(
    tmp_path: Path, broker_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"{broker_prefix}refunds"
    for name, value in {
        "WRITESAFE_SHOP_WORK": str(tmp_path),
        "WRITESAFE_CELERY_BROKER": REDIS_URL,
        "WRITESAFE_CELERY_PREFIX": broker_prefix,
        "WRITESAFE_CELERY_QUEUE": queue,
    }.items():
        monkeypatch.setenv(name, value)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def worker(name: str) -> subprocess.Popen[bytes]:
        command = ["celery", "-A", "tests.apps.celery_shop", "worker", "--pool", "solo"]
        options = ["-Q", queue, "-n", f"{name}@%h", "-l", "warning", "--without-gossip"]
        return subprocess.Popen(
            [sys.executable, "-m", *command, *options, "--without-mingle", "--without-heartbeat"],
            cwd=ROOT,
            env=env,
        )

    sender = importlib.import_module("tests.apps.celery_shop").app  # the workers' own app
    (tmp_path / "hang").touch()
    first = worker("first")
    second: subprocess.Popen[bytes] | None = None
    ledger = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    try:
        sender.send_task("refund", args=["o-1"], task_id="refund-o-1", queue=queue)
        wait_until(lambda: any(tmp_path.glob("refunded-*")), "the first worker refunded")
        os.kill(first.pid, signal.SIGKILL)  # in the middle of the task: refunded, not answered
        first.wait(timeout=30)
        (tmp_path / "hang").unlink()

        second = worker("second")

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


def test_a_bound_task_is_refused_and_a_direct_call_needs_a_key(tmp_path: Path) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")

    with pytest.raises(TypeError, match="bind=True"):

        @idempotent_task(ws)
        def bound(self: object, order_id: str) -> None: ...

    @idempotent_task(ws, key=lambda order_id: f"refund-{order_id}")
    def refund(order_id: str) -> str:
        return f"r-{order_id}"

    try:
        # Outside a worker (no task id) the key function still names the operation.
        assert refund("o-9") == "r-o-9"
        status = ws.sync.status("refund-o-9")
        assert status is not None
        assert status.status is Status.SUCCEEDED
    finally:
        ws.sync.close()
