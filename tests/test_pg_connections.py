"""The PostgreSQL writer's connection pool: its slots are waited for in turn, for a bounded time."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy.exc import TimeoutError as PoolTimeout

from writesafe.ledger import _pg_connections
from writesafe.ledger._pg_connections import ConnectionPool


class _Connection:
    """Stands in for an asyncpg connection: the pool only asks whether it is closed."""

    def is_closed(self) -> bool:
        return False

    def terminate(self) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    async def connect(**_: Any) -> _Connection:
        return _Connection()

    monkeypatch.setattr(_pg_connections.asyncpg, "connect", connect)


def _pool(size: int, wait_seconds: float = 5.0) -> ConnectionPool:
    return ConnectionPool({}, size, idle_seconds=60.0, wait_seconds=wait_seconds)


async def test_a_released_slot_goes_to_the_caller_waiting_longest() -> None:
    pool = _pool(1)
    held = await pool.acquire()
    order: list[str] = []

    async def take(name: str) -> None:
        connection = await pool.acquire()
        order.append(name)
        pool.release(connection)

    first = asyncio.create_task(take("first"))
    await asyncio.sleep(0)
    second = asyncio.create_task(take("second"))
    await asyncio.sleep(0)
    pool.release(held)
    await asyncio.gather(first, second)
    assert order == ["first", "second"]
    await pool.close()


async def test_a_wait_for_a_busy_pool_ends_as_a_pool_timeout() -> None:
    pool = _pool(1, wait_seconds=0.05)
    held = await pool.acquire()
    with pytest.raises(PoolTimeout, match="stayed in use"):
        await pool.acquire()
    pool.release(held)
    pool.release(await pool.acquire())  # the timed-out wait left no slot taken
    await pool.close()


async def test_a_waiter_cancelled_after_it_was_handed_the_slot_passes_it_on() -> None:
    pool = _pool(1)
    held = await pool.acquire()
    cancelled = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    behind = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    pool.release(held)  # handed to `cancelled`, which has not run since
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    pool.release(await asyncio.wait_for(behind, 1.0))
    await pool.close()


async def test_a_cancelled_waiter_takes_no_slot() -> None:
    pool = _pool(1)
    held = await pool.acquire()
    waiting = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    pool.release(held)
    pool.release(await asyncio.wait_for(pool.acquire(), 1.0))
    await pool.close()


async def test_each_wait_ends_its_own_time_after_it_began() -> None:
    pool = _pool(1, wait_seconds=0.3)
    held = await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.15)
    second = asyncio.create_task(pool.acquire())
    with pytest.raises(PoolTimeout):
        await first
    assert not second.done()  # its own deadline is 0.15 s later
    pool.release(held)
    pool.release(await asyncio.wait_for(second, 1.0))
    pool.release(await pool.acquire())  # every slot came back
    await pool.close()


async def test_a_wait_cancelled_after_it_ran_out_frees_no_slot() -> None:
    pool = _pool(1, wait_seconds=0.01)
    held = await pool.acquire()
    waiting = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)  # it waits, its deadline armed
    time.sleep(0.02)  # noqa: ASYNC251  (held on purpose: the deadline passes meanwhile)
    await asyncio.sleep(0)  # runs before the expiry, which ends the wait in the same turn
    await asyncio.sleep(0)  # runs before the waiter resumes with its timeout
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    taken = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not taken.done()  # it waits: `held` still holds the pool's one slot
    pool.release(held)
    pool.release(await asyncio.wait_for(taken, 1.0))
    await pool.close()


async def test_a_wait_still_runs_out_when_the_pool_closes_meanwhile() -> None:
    pool = _pool(1, wait_seconds=0.05)
    held = await pool.acquire()
    waiting = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0)
    await pool.close()
    with pytest.raises(PoolTimeout):
        await asyncio.wait_for(waiting, 1.0)
    pool.release(held)
