"""One task renews every running write's lease in one statement per tick, and drops lost ones."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from tests.conftest import MakeWriteSafe
from writesafe.idempotency._fence import Fence
from writesafe.idempotency._leases import HeldLease, LeaseKeeper
from writesafe.idempotency._recording import LEDGER_ERRORS
from writesafe.ledger import Intent, Outcome, Status

LEASE = 0.3


async def test_held_leases_are_renewed_together_and_a_lost_one_is_dropped(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    await ws.start()
    ledger = ws.ledger
    kept = (await ledger.claim(_intent("kept", "owner-a"))).operation
    lost = (await ledger.claim(_intent("lost", "owner-b"))).operation
    keeper = LeaseKeeper(ledger, ws.keystore, LEASE, LEDGER_ERRORS)
    kept_fence, lost_fence = _fence("kept"), _fence("lost")
    first_deadline = kept_fence.deadline
    keeper.hold(HeldLease(kept.id, "owner-a", "default", "kept", "owner-a/f", kept_fence))
    keeper.hold(HeldLease(lost.id, "owner-b", "default", "lost", "owner-b/f", lost_fence))
    try:
        # Another actor ends the second operation: its owner no longer holds a lease.
        assert await ledger.finish(lost, "owner-b", Outcome(Status.SUCCEEDED, result="1"))
        await asyncio.sleep(LEASE * 3)  # nine ticks: without renewal both leases would lapse
        renewed = await ledger.get("default", "kept")
        finished = await ledger.get("default", "lost")
        assert set(keeper._held) == {kept.id}, "the lost lease is no longer renewed"
    finally:
        await keeper.close()
    assert renewed is not None
    assert renewed.status is Status.IN_FLIGHT
    assert renewed.lease_expires_at is not None
    assert kept.lease_expires_at is not None
    assert renewed.lease_expires_at > kept.lease_expires_at
    assert not renewed.lease_expired(ledger.clock.now())
    assert finished is not None
    assert finished.status is Status.SUCCEEDED
    assert finished.lease_owner is None  # never given back to its old owner
    # Each confirmed renewal moved the fence on; the refused one closed it for good.
    assert kept_fence.deadline > first_deadline + LEASE
    assert kept_fence.is_open()
    assert not lost_fence.is_open()


async def test_the_renewing_task_ends_when_no_lease_is_held(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    await ws.start()
    operation = (await ws.ledger.claim(_intent("k", "owner"))).operation
    keeper = LeaseKeeper(ws.ledger, ws.keystore, LEASE, LEDGER_ERRORS)
    lease = HeldLease(operation.id, "owner", "default", "k", "owner/f", _fence("k"))
    keeper.hold(lease)
    task = keeper._task
    assert task is not None
    keeper.release(lease)
    await asyncio.wait_for(task, LEASE)  # it notices at its next tick and returns
    await keeper.close()


async def test_writes_one_after_another_share_one_renewing_task(make_ws: MakeWriteSafe) -> None:
    """A write that ends before the renewing task's first step (the embedded outcome, committed
    on the caller's thread without suspending) leaves the task to the next write: one task for
    the run, not one per write. Counted through the event loop's task factory."""
    ws = make_ws(lease_seconds=60.0)  # a tick (20 s) longer than the test
    await ws.start()

    @ws.tool("submit")
    async def submit(n: int) -> int:
        return n

    loop = asyncio.get_running_loop()
    renewing: list[asyncio.Task[Any]] = []

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **options: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **options)
        if coro.__qualname__ == LeaseKeeper._renew_while_held.__qualname__:
            renewing.append(task)
        return task

    previous = loop.get_task_factory()
    loop.set_task_factory(factory)
    try:
        for n in range(20):
            assert await submit.key(f"k-{n}")(n) == n
    finally:
        loop.set_task_factory(previous)
    assert len(renewing) == 1
    await ws.close()
    assert renewing[0].done()  # closing the guard ends it


def _intent(key: str, owner: str) -> Intent:
    return Intent(
        scope="default",
        key=key,
        tool="submit",
        fingerprint="f" * 64,
        arguments="{}",
        owner=owner,
        lease_seconds=LEASE,
        max_executions=3,
    )


def _fence(key: str) -> Fence:
    return Fence(key, 1, time.monotonic(), LEASE)
