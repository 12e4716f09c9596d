"""Which store a call asks first: Redis while a tool's calls are often repeats, else the ledger.

The policy alone (`StoreOrder`), then the guard on PostgreSQL + Redis: a tool of first
executions stops touching Redis, repeats bring Redis back, the two orders meeting on one key
still execute it once, and a restored ledger sends every call to Redis first. On the embedded
ledger, the read before the claim follows the same share.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis

from tests.conftest import PG_URL, REDIS_URL, asyncpg_dsn
from tests.test_sync_tools import race
from writesafe import WriteSafe, WriteSafeError
from writesafe.idempotency._keys import DEFAULT_SCOPE
from writesafe.ledger._restore import declare_restored
from writesafe.reconciler._store_order import StoreOrder

ORDER = StoreOrder()
# First executions from the start until the share is below the threshold: the ledger is asked
# first from the next call on.
UNTIL_LEDGER_FIRST = math.ceil(math.log(ORDER.threshold) / math.log(1 - ORDER.weight))


@given(st.lists(st.booleans(), max_size=200))
def test_the_share_stays_a_share_and_follows_the_calls(repeats: list[bool]) -> None:
    share = ORDER.start
    for repeat in repeats:
        after = ORDER.after(share, repeat=repeat)
        assert 0.0 <= after <= 1.0
        assert after >= share if repeat else after <= share
        share = after


def test_first_executions_turn_to_the_ledger_and_repeats_turn_back_to_redis() -> None:
    share = ORDER.start
    for _ in range(UNTIL_LEDGER_FIRST - 1):
        share = ORDER.after(share, repeat=False)
    assert ORDER.asks_first(share)
    share = ORDER.after(share, repeat=False)
    assert not ORDER.asks_first(share)
    for _ in range(200):
        share = ORDER.after(share, repeat=False)
    turned = 0
    while not ORDER.asks_first(share):
        share = ORDER.after(share, repeat=True)
        turned += 1
    assert 1 < turned <= 10  # a burst of retries turns a quiet tool back within ten calls
    assert all(StoreOrder(threshold=0).asks_first(s) for s in (0.0, 0.5, 1.0))


@pytest.fixture
async def ws(pg_schema: str, redis_prefix: str) -> AsyncIterator[WriteSafe]:
    async with _writesafe(pg_schema, redis_prefix) as made:
        yield made


def _writesafe(schema: str, prefix: str, **options: Any) -> WriteSafe:
    return WriteSafe(
        PG_URL, REDIS_URL, schema=schema, redis_prefix=prefix, auto_migrate=True, **options
    )


async def _in_redis(ws: WriteSafe, key: str) -> bool:
    assert ws.keystore is not None
    async with Redis.from_url(REDIS_URL) as redis:
        return bool(await redis.exists(ws.keystore.key(DEFAULT_SCOPE, key)))


async def test_a_tool_of_first_executions_stops_touching_redis(ws: WriteSafe) -> None:
    @ws.tool("submit")
    async def submit(n: int) -> int:
        return n

    calls = UNTIL_LEDGER_FIRST + 20
    for n in range(calls):
        assert await submit(n, idempotency_key=f"k-{n}") == n
    await ws._guard.flush()
    cached = [await _in_redis(ws, f"k-{n}") for n in range(calls)]
    # Redis first while the share was high: lease, then the copy of the outcome. Then the ledger
    # alone: no lease, no copy.
    assert cached == [True] * UNTIL_LEDGER_FIRST + [False] * 20


async def test_repeats_bring_redis_back_and_it_answers_without_the_ledger(
    ws: WriteSafe, pg_schema: str
) -> None:
    ran: Counter[int] = Counter()

    @ws.tool("submit")
    async def submit(n: int) -> int:
        ran[n] += 1
        return n

    for n in range(200):
        await submit(n, idempotency_key=f"k-{n}")
    key = "k-199"
    assert await submit(199, idempotency_key=key) == 199  # a repeat the ledger answers
    await ws._guard.flush()
    assert not await _in_redis(ws, key)
    for _ in range(15):  # a client retrying: the share climbs, Redis is asked and filled
        assert await submit(199, idempotency_key=key) == 199
    await ws._guard.flush()
    assert await _in_redis(ws, key)
    connection = await asyncpg.connect(asyncpg_dsn())
    try:
        async with connection.transaction():
            await connection.execute(
                f'LOCK TABLE "{pg_schema}".writesafe_operations IN ACCESS EXCLUSIVE MODE'
            )
            async with asyncio.timeout(5):  # the ledger is locked: Redis answers
                assert await submit(199, idempotency_key=key) == 199
    finally:
        await connection.close()
    assert set(ran.values()) == {1}


async def test_callers_asking_either_store_first_execute_each_key_once(
    pg_schema: str, redis_prefix: str
) -> None:
    """One worker asks the ledger first (its tool has seen only first executions), the other
    Redis first (it has just started): duplicates of each key from both run it once."""
    ran: Counter[str] = Counter()
    async with (
        _writesafe(pg_schema, redis_prefix) as ledger_first,
        _writesafe(pg_schema, redis_prefix) as redis_first,
    ):
        tools = []
        for ws in (ledger_first, redis_first):

            @ws.tool("book")
            async def book(seat: str) -> str:
                ran[seat] += 1
                await asyncio.sleep(0.01)
                return seat

            tools.append(book)
        for n in range(UNTIL_LEDGER_FIRST):
            await tools[0](f"warm-{n}", idempotency_key=f"warm-{n}")
        assert not _asks_redis_first(ledger_first, "book")
        assert _asks_redis_first(redis_first, "book")
        seats = [f"seat-{n}" for n in range(40)]

        async def both(seat: str) -> list[object]:
            return await asyncio.gather(
                *(tool(seat, idempotency_key=seat) for tool in (*tools, *tools)),
                return_exceptions=True,
            )

        answers = await asyncio.gather(*(both(seat) for seat in seats))
    # A duplicate that asked the ledger first and met the key in flight is told IN_PROGRESS
    # when the lease outlasts its wait, as on PostgreSQL alone; every other answer is the seat.
    for seat, replies in zip(seats, answers, strict=True):
        for answer in replies:
            if isinstance(answer, WriteSafeError):
                assert answer.code == "IN_PROGRESS"
            else:
                assert answer == seat
    assert all(ran[seat] == 1 for seat in seats)


def _asks_redis_first(ws: WriteSafe, tool: str) -> bool:
    """Whether the next call of `tool` (one string argument) would ask Redis first."""
    call = ws._tools[tool].prepare(("x",), {}, "probe", DEFAULT_SCOPE, None)
    return ws._guard._asks_redis_first(call)


def _peeks_first(ws: WriteSafe, tool: str) -> bool:
    """Whether the next call of `tool` (one argument) would read the embedded ledger first."""
    call = ws._tools[tool].prepare((0,), {}, "probe", DEFAULT_SCOPE, None)
    return ws._guard._peeks_first(call)


async def test_the_embedded_ledger_reads_before_its_claim_only_while_repeats_are_common(
    tmp_path: Path,
) -> None:
    """Without Redis, the embedded ledger's read on the calling thread follows the same share:
    a tool of first executions claims its new keys without reading them first, and repeats
    (answered by the claim's write meanwhile) bring the read back. Each key runs once."""
    ran: Counter[int] = Counter()
    async with WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}") as ws:

        @ws.tool("submit")
        async def submit(n: int) -> int:
            ran[n] += 1
            return n

        assert _peeks_first(ws, "submit")
        firsts = UNTIL_LEDGER_FIRST + 20
        for n in range(firsts):
            assert await submit(n, idempotency_key=f"k-{n}") == n
            assert _peeks_first(ws, "submit") == (n < UNTIL_LEDGER_FIRST - 1)
        # The statements on the calling thread's connection (the peeks, and outcomes written
        # there while calls come one at a time): no read of a new key once the share is low.
        statements: list[str] = []
        for connection in ws._guard.ledger.writer._here:
            connection.set_trace_callback(statements.append)
        assert await submit(firsts, idempotency_key=f"k-{firsts}") == firsts
        assert statements, "the outcome was written on the calling thread"
        assert not [s for s in statements if s.lstrip().startswith("SELECT")]
        turned = 0
        while not _peeks_first(ws, "submit"):
            assert await submit(turned, idempotency_key=f"k-{turned}") == turned
            turned += 1
        assert 1 < turned <= 10
        statements.clear()
        assert await submit(0, idempotency_key="k-0") == 0  # a repeat read before its claim
        assert [s for s in statements if s.lstrip().startswith("SELECT")], "peeked"
    assert sum(ran.values()) == firsts + 1
    assert set(ran.values()) == {1}


async def test_a_restored_ledger_sends_every_call_to_redis_first(
    ws: WriteSafe, pg_schema: str
) -> None:
    """Redis may remember what the restore made the ledger forget: a tool that asked the ledger
    first replays from Redis while the restore is open, instead of refusing the key."""
    ran: Counter[str] = Counter()

    @ws.tool("notify")  # no lookup: a key the restored ledger forgot cannot be settled by one
    async def notify(text: str) -> str:
        ran[text] += 1
        return text

    assert await notify("hello", idempotency_key="n-0") == "hello"
    for n in range(1, UNTIL_LEDGER_FIRST + 1):
        await notify(f"warm-{n}", idempotency_key=f"n-{n}")
    await ws._guard.flush()
    connection = await asyncpg.connect(asyncpg_dsn())
    try:  # the restore lost n-0's row; its answer is still in Redis
        await connection.execute(
            f'DELETE FROM "{pg_schema}".writesafe_attempts WHERE operation_id IN'
            f' (SELECT id FROM "{pg_schema}".writesafe_operations WHERE key = $1)',
            "n-0",
        )
        await connection.execute(
            f'DELETE FROM "{pg_schema}".writesafe_operations WHERE key = $1', "n-0"
        )
    finally:
        await connection.close()
    await declare_restored(ws.ledger, datetime.now(UTC), timedelta(days=1))
    await ws._guard.check_restores()
    try:
        assert await notify("hello", idempotency_key="n-0") == "hello"
    except WriteSafeError as refused:  # pragma: no cover - the failure this test guards against
        pytest.fail(f"the restored key was refused, not replayed from Redis: {refused}")
    assert ran["hello"] == 1


async def test_sync_callers_of_a_tool_that_asks_the_ledger_first_execute_once(
    ws: WriteSafe,
) -> None:
    """The sync face's first look skips Redis too (PostgreSQL has no local read: the loop's
    claim decides), and eight threads racing one key still cause one effect."""
    effects: list[str] = []

    @ws.tool("submit_order")
    def submit_order(order: str) -> str:
        effects.append(order)
        time.sleep(0.2)  # every duplicate arrives while the write runs
        return order

    def warm() -> None:
        for n in range(UNTIL_LEDGER_FIRST):
            submit_order(f"warm-{n}", idempotency_key=f"warm-{n}")

    await asyncio.to_thread(warm)
    twin = ws.sync._loop_thread().twin  # the sync face's guard runs in a twin of `ws`
    assert not _asks_redis_first(twin, "submit_order")
    effects.clear()
    answers = await asyncio.to_thread(race, 8, lambda: submit_order("A1", idempotency_key="o-1"))
    assert answers == ["A1"] * 8
    assert effects == ["A1"]
