"""The Redis copy of a succeeded outcome is written behind the caller's answer, and in order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import REDIS_URL, MakeWriteSafe
from tests.round_trips import count_round_trips
from tests.test_store_faults import echo_tool
from writesafe import Tool, WriteSafe

pytestmark = pytest.mark.parametrize("backend", ["postgres+redis"])


HoldCacheWrites = Callable[[WriteSafe], asyncio.Event]


@pytest.fixture
def hold_cache_writes(
    make_ws: MakeWriteSafe, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HoldCacheWrites]:
    """Make a worker's cache writes wait until the returned event is set (at the latest when the
    test ends, before its workers close: closing waits for them)."""
    releases: list[asyncio.Event] = []

    def hold(ws: WriteSafe) -> asyncio.Event:
        assert ws.keystore is not None
        release = asyncio.Event()
        cache = ws.keystore.cache

        async def held_cache(*args: Any, **kwargs: Any) -> None:
            await release.wait()
            await cache(*args, **kwargs)

        monkeypatch.setattr(ws.keystore, "cache", held_cache)
        releases.append(release)
        return release

    yield hold
    for release in releases:
        release.set()


async def first_call(submit: Tool[int]) -> int:
    """The first call on key "k"; bounded, since it must not wait for a held cache write."""
    return await asyncio.wait_for(submit(1, idempotency_key="k"), timeout=5)


async def stored_value(ws: WriteSafe, key: str) -> bytes:
    """What Redis holds for `key` (empty if nothing), read by a client of its own."""
    assert ws.keystore is not None
    redis = Redis.from_url(REDIS_URL)
    try:
        value: bytes | None = await redis.get(ws.keystore.key("default", key))
        return value or b""
    finally:
        await redis.aclose()


async def test_the_answer_does_not_wait_for_the_cache_write(
    make_ws: MakeWriteSafe, hold_cache_writes: HoldCacheWrites
) -> None:
    ws = make_ws()
    submit, effects = echo_tool(ws)
    release = hold_cache_writes(ws)

    assert await first_call(submit) == 1
    held = await stored_value(ws, "k")
    assert held.startswith(b"L:"), "the lease stays until the fill lands"
    release.set()
    assert await submit(1, idempotency_key="k") == 1
    assert (await stored_value(ws, "k")).startswith(b"O:")
    assert effects == [1]


async def test_a_call_in_the_same_process_waits_for_the_pending_fill(
    make_ws: MakeWriteSafe, hold_cache_writes: HoldCacheWrites, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_ws()
    assert ws.keystore is not None
    submit, effects = echo_tool(ws)
    release = hold_cache_writes(ws)
    await first_call(submit)
    claims = 0
    claim = ws.keystore.claim

    async def counted_claim(*args: Any, **kwargs: Any) -> Any:
        nonlocal claims
        claims += 1
        return await claim(*args, **kwargs)

    monkeypatch.setattr(ws.keystore, "claim", counted_claim)

    duplicate = asyncio.create_task(submit(1, idempotency_key="k"))
    await asyncio.sleep(0.1)
    assert not duplicate.done()
    assert claims == 0, "the duplicate polled the lease instead of waiting for the fill"
    release.set()
    assert await duplicate == 1
    assert claims == 1  # one claim, answered by the cached outcome
    assert effects == [1]


async def test_closing_waits_for_pending_fills(
    make_ws: MakeWriteSafe, hold_cache_writes: HoldCacheWrites
) -> None:
    ws = make_ws()
    submit, _ = echo_tool(ws)
    release = hold_cache_writes(ws)
    await first_call(submit)

    closing = asyncio.create_task(ws.close())
    await asyncio.sleep(0.05)
    assert not closing.done()
    release.set()
    await closing
    assert (await stored_value(ws, "k")).startswith(b"O:")


async def test_a_lease_left_by_a_fill_that_never_ran_does_not_hold_up_a_duplicate(
    make_ws: MakeWriteSafe, hold_cache_writes: HoldCacheWrites
) -> None:
    # Worker A answers and its cache write never runs (its event loop ends first, or it dies):
    # Redis keeps A's lease. Worker B's duplicate is answered from the ledger, not told to wait.
    worker_a, worker_b = make_ws(), make_ws(wait_timeout=0.3)
    submit_a, effects = echo_tool(worker_a)
    hold_cache_writes(worker_a)
    await first_call(submit_a)

    submit_b, effects_b = echo_tool(worker_b)
    assert await submit_b(1, idempotency_key="k") == 1
    assert effects + effects_b == [1]
    await (await worker_b.guard()).flush()
    assert (await stored_value(worker_b, "k")).startswith(b"O:"), "B repaired the cached copy"


async def test_a_fill_rides_with_the_next_claim(
    make_ws: MakeWriteSafe, monkeypatch: pytest.MonkeyPatch
) -> None:
    """First executions back to back: each call's claim carries the previous call's fill in
    its own write, so a first execution costs one Redis round trip, not two."""
    ws = make_ws()
    submit, effects = echo_tool(ws)
    await ws.start()
    sent = count_round_trips(ws.ledger.engine, monkeypatch)

    for n in range(3):
        assert await submit(n, idempotency_key=f"k-{n}") == n
    await (await ws.guard()).flush()

    assert sent == ["redis", "ledger", "ledger"] * 3 + ["redis"]
    for n in range(3):
        assert (await stored_value(ws, f"k-{n}")).startswith(b"O:")
    assert effects == [0, 1, 2]
