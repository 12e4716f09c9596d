"""CacheFills on its own: waiting for a key's fill, closing, and a fill that fails."""

from __future__ import annotations

import asyncio
import logging

import pytest

from writesafe.idempotency._fills import CacheFills

SLOT = ("default", "k")


async def test_closing_waits_for_a_fill_that_a_later_one_replaced() -> None:
    fills = CacheFills()
    first, second = asyncio.Event(), asyncio.Event()
    done: list[str] = []

    async def fill(name: str, release: asyncio.Event) -> None:
        await release.wait()
        done.append(name)

    fills.start(SLOT, fill("first", first))
    fills.start(SLOT, fill("second", second))
    second.set()
    await fills.settled(SLOT)  # the latest fill only
    assert done == ["second"]

    draining = asyncio.create_task(fills.drain())
    await asyncio.sleep(0.01)
    assert not draining.done(), "drain returned before the replaced fill finished"
    first.set()
    await draining
    assert done == ["second", "first"]


async def test_a_failed_fill_is_logged_and_not_raised_into_a_waiting_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fills = CacheFills()

    async def broken() -> None:
        raise RuntimeError("a bug in a fill")

    fills.start(SLOT, broken())
    with caplog.at_level(logging.ERROR, logger="writesafe"):
        await fills.settled(SLOT)
        await asyncio.sleep(0)  # the done callback runs on the next turn of the loop
    assert "a cache fill failed" in caplog.text
    await fills.drain()  # nothing left behind


async def test_a_waiter_that_gives_up_does_not_cancel_the_fill() -> None:
    fills = CacheFills()
    release = asyncio.Event()
    done: list[bool] = []

    async def fill() -> None:
        await release.wait()
        done.append(True)

    fills.start(SLOT, fill())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await fills.settled(SLOT)
    release.set()
    await fills.drain()
    assert done == [True]
