"""The wait between automatic retries: what a cancelled wait leaves, who may run the key during
it, and the time budget that ends a call instead of a long wait. On every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conftest import MakeWriteSafe
from writesafe import Status, WriteSafe, WriteSafeError
from writesafe.ledger import AttemptKind, SystemClock
from writesafe.reconciler import (
    Code,
    DownstreamError,
    ResponseAdapter,
    RetryPolicy,
    Rule,
    SideEffects,
)

BUSY = ResponseAdapter(name="shop", version="1", rules=(Rule(Code.TEMP_UNAVAILABLE, status=503),))


class WaitingClock(SystemClock):
    """Real time, but each wait between retries is announced and then held until `resume`."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.resume = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.waiting.set()
        await self.resume.wait()


class Shop:
    """A downstream that refuses the first connection (nothing sent) and commits the rest."""

    def __init__(self, refusals: int = 1) -> None:
        self.calls = 0
        self.refusals = refusals
        self.orders: list[str] = []

    def tool(self, ws: WriteSafe, **options: Any) -> Any:
        @ws.tool("submit_order", **options)
        async def submit_order(sku: str) -> dict[str, str]:
            self.calls += 1
            if self.calls <= self.refusals:
                raise httpx.ConnectError("connection refused")
            self.orders.append(sku)
            return {"order_id": f"o-{len(self.orders)}", "sku": sku}

        return submit_order


def executions(status: Any) -> list[tuple[int, str | None, str | None]]:
    return [
        (a.execution, a.outcome, a.code) for a in status.attempts if a.kind is AttemptKind.EXECUTION
    ]


async def test_a_call_cancelled_mid_wait_leaves_the_failure_and_the_key_continues_once(
    make_ws: MakeWriteSafe,
) -> None:
    clock = WaitingClock()
    ws, shop = make_ws(clock=clock), Shop()
    submit = shop.tool(ws)

    task = asyncio.create_task(submit("A1", idempotency_key="k"))
    await clock.waiting.wait()  # execution 1 was refused; the call waits for execution 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    status = await ws.status("k")
    assert status is not None
    assert (status.status, status.executions, status.lease_expires_at) == (Status.FAILED, 1, None)
    assert status.error is not None
    assert (status.error.code, status.error.side_effects) == (Code.TEMP_UNAVAILABLE, "none")
    assert executions(status) == [(1, "failed", Code.TEMP_UNAVAILABLE)]

    # A later call with the key (another worker) continues it, and the write runs once.
    later = shop.tool(make_ws())
    assert await later("A1", idempotency_key="k") == {"order_id": "o-1", "sku": "A1"}
    assert await later("A1", idempotency_key="k") == {"order_id": "o-1", "sku": "A1"}
    assert shop.orders == ["A1"]
    status = await ws.status("k")
    assert status is not None
    assert status.status is Status.SUCCEEDED
    assert executions(status) == [(1, "failed", Code.TEMP_UNAVAILABLE), (2, "succeeded", None)]


async def test_a_write_holds_its_lease_only_while_it_runs(make_ws: MakeWriteSafe) -> None:
    """None is renewed while the failed execution waits for its retry, nor after the answer: the
    lease keeper would spend a statement per tick on rows that are no longer running."""
    clock = WaitingClock()
    ws, shop = make_ws(clock=clock), Shop()
    submit = shop.tool(ws)
    leases = (await ws.guard())._leases

    task = asyncio.create_task(submit("A1", idempotency_key="k"))
    await clock.waiting.wait()  # execution 1 was refused; the call waits for execution 2
    held_while_waiting = dict(leases._held)
    clock.resume.set()
    assert await task == {"order_id": "o-1", "sku": "A1"}

    assert held_while_waiting == {}
    assert leases._held == {}


async def test_a_caller_of_the_key_during_the_wait_is_answered_and_the_write_runs_once(
    make_ws: MakeWriteSafe, backend: str
) -> None:
    clock = WaitingClock()
    ws, shop = make_ws(clock=clock), Shop()
    submit = shop.tool(ws)
    other = shop.tool(make_ws(), wait_timeout=0.3)  # another worker, same stores

    first = asyncio.create_task(submit("A1", idempotency_key="k"))
    await clock.waiting.wait()
    try:
        during = await other("A1", idempotency_key="k")
    except WriteSafeError as error:
        during = error
    clock.resume.set()
    answer = await first

    if backend == "postgres+redis":
        # The waiting call still holds the key's Redis lease: the other caller is told to wait.
        assert isinstance(during, WriteSafeError)
        assert during.code == Code.IN_PROGRESS
    else:
        # The ledger's `failed` row is due for a continuation: the other caller runs the key,
        # and the waiting call, whose restart then finds the row changed, answers with its result.
        assert during == answer
    assert answer == {"order_id": "o-1", "sku": "A1"}
    assert shop.orders == ["A1"]
    assert await other("A1", idempotency_key="k") == answer
    status = await ws.status("k")
    assert status is not None
    assert executions(status) == [(1, "failed", Code.TEMP_UNAVAILABLE), (2, "succeeded", None)]


async def test_a_stated_delay_beyond_the_time_budget_ends_the_call_instead_of_sleeping(
    make_ws: MakeWriteSafe,
) -> None:
    ws, calls = make_ws(), 0

    @ws.tool("order", adapter=BUSY)
    async def order(sku: str) -> str:
        nonlocal calls
        calls += 1
        raise DownstreamError(503, "busy", headers={"Retry-After": "600"})

    async with asyncio.timeout(10):  # without the budget the call would sleep ten minutes
        with pytest.raises(WriteSafeError) as raised:
            await order("A1", idempotency_key="k")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.retryable, envelope.side_effects) == (
        Code.TEMP_UNAVAILABLE,
        True,
        SideEffects.NONE,
    )
    assert envelope.retry_after_ms == 600_000
    assert envelope.operation is not None
    assert (envelope.operation.status, envelope.operation.attempts_left) == ("failed", 2)
    assert calls == 1

    # Asked again before the stated delay: the stored failure, nothing executed.
    with pytest.raises(WriteSafeError) as again:
        await order("A1", idempotency_key="k")
    assert again.value.envelope.code == Code.TEMP_UNAVAILABLE
    assert calls == 1


async def test_a_call_out_of_time_continues_after_its_retry_after_and_runs_once(
    make_ws: MakeWriteSafe,
) -> None:
    ws, orders = make_ws(), []

    @ws.tool("order", adapter=BUSY, retry=RetryPolicy(max_elapsed=0.2))
    async def order(sku: str) -> str:
        if not orders:
            orders.append("refused")
            raise DownstreamError(503, "busy", headers={"Retry-After": "1"})
        orders.append(sku)
        return f"ordered {sku}"

    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k")
    assert raised.value.envelope.retry_after_ms == 1_000
    await asyncio.sleep(1.05)
    assert await order("A1", idempotency_key="k") == "ordered A1"
    assert await order("A1", idempotency_key="k") == "ordered A1"
    assert orders == ["refused", "A1"]
