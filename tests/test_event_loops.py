"""One `WriteSafe` used from one event loop after another, as a test suite with a loop per test,
or a script calling `asyncio.run` twice, uses it.

Each loop runs to its end (its connections die with it) before the next one starts, and nobody
calls `close()` in between: the next loop's calls must still be guarded, answered and counted
once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from writesafe import WriteSafe

BURST = 40  # more calls at once than the pools hold connections, so that some wait


def _counting_tool(ws: WriteSafe, effects: list[str]) -> Any:
    @ws.tool("submit_order")
    async def submit_order(sku: str) -> dict[str, str]:
        effects.append(sku)
        await asyncio.sleep(0.005)  # keeps the burst's calls in flight together
        return {"order": sku}

    return submit_order


@pytest.mark.pg_connections(30)  # BURST fills the default pools (10 + 20)
def test_calls_on_a_new_event_loop_are_guarded_like_the_first_loops(
    store_options: dict[str, Any],
) -> None:
    ws = WriteSafe(**store_options)
    effects: list[str] = []
    submit_order = _counting_tool(ws, effects)

    async def burst(first: int) -> list[Any]:
        return await asyncio.gather(
            *(
                submit_order(f"sku-{n}", idempotency_key=f"order-{n}")
                for n in range(first, first + BURST)
            )
        )

    try:
        assert asyncio.run(burst(0)) == [{"order": f"sku-{n}"} for n in range(BURST)]
        # A new loop: replays of the first loop's keys, and new keys, again in a burst.
        assert asyncio.run(burst(BURST // 2)) == [
            {"order": f"sku-{n}"} for n in range(BURST // 2, BURST // 2 + BURST)
        ]
        status = asyncio.run(ws.status("order-0"))
        assert status is not None
        assert status.status == "succeeded"
    finally:
        asyncio.run(ws.close())
    assert sorted(effects) == sorted(f"sku-{n}" for n in range(BURST // 2 + BURST))


def test_close_on_a_new_event_loop_does_not_touch_the_old_loops_connections(
    store_options: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    ws = WriteSafe(**store_options)
    effects: list[str] = []
    submit_order = _counting_tool(ws, effects)
    assert asyncio.run(submit_order("sku-1", idempotency_key="order-1")) == {"order": "sku-1"}
    with caplog.at_level(logging.WARNING):
        # The first loop has ended: its connections can be dropped, not closed on it.
        asyncio.run(ws.close())
    assert [record.getMessage() for record in caplog.records] == []
    # Closed, the WriteSafe opens again on the next call, on yet another loop.
    assert asyncio.run(submit_order("sku-1", idempotency_key="order-1")) == {"order": "sku-1"}
    asyncio.run(ws.close())
    assert effects == ["sku-1"]
