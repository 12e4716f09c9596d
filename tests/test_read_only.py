"""Read-only tools: advertised as such over MCP, retried by the shipment scenario's recovery policy
(availability retries after the stated delay, within 3 executions), and never recorded."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from examples.shipment_lookup.adapter import SHIPMENT_ADAPTER
from tests.conftest import MakeWriteSafe
from writesafe import WriteSafe, WriteSafeError
from writesafe.contrib.mcp import add_mcp_tool
from writesafe.ledger import ManualClock
from writesafe.reconciler import DownstreamError

START = datetime(2026, 1, 1, tzinfo=UTC)


class Dependency:
    """A scripted delivery-status service: each call answers with the next scripted code."""

    def __init__(self, clock: ManualClock, *script: str) -> None:
        self.clock = clock
        self.script = list(script)
        self.calls: list[float] = []  # when each execution reached it, in ms on the clock

    async def lookup(self, shipment_ref: str) -> dict[str, Any]:
        self.calls.append((self.clock.now() - START).total_seconds() * 1000)
        code = self.script.pop(0)
        if code != "OK":
            raise DownstreamError(400, json={"code": code, "field": "ref"})
        return {"shipment_ref": shipment_ref, "status": "in_transit"}


def lookup_tool(ws: WriteSafe, dependency: Dependency) -> Any:
    @ws.tool("shipment_lookup", adapter=SHIPMENT_ADAPTER, max_executions=3, read_only=True)
    async def shipment_lookup(shipment_ref: str) -> dict[str, Any]:
        return await dependency.lookup(shipment_ref)

    return shipment_lookup


async def nothing_recorded(ws: WriteSafe) -> bool:
    return await ws.ledger.list(tool="shipment_lookup") == []


async def test_a_temporary_failure_is_retried_after_its_delay(make_ws: MakeWriteSafe) -> None:
    clock = ManualClock(START)
    ws = make_ws(clock=clock)
    dependency = Dependency(clock, "TEMP_UNAVAILABLE", "OK")
    lookup = lookup_tool(ws, dependency)
    assert await lookup("SHIP-104") == {"shipment_ref": "SHIP-104", "status": "in_transit"}
    assert dependency.calls == [0, 1000]
    assert await nothing_recorded(ws)


async def test_a_persistent_failure_stops_at_the_budget(make_ws: MakeWriteSafe) -> None:
    clock = ManualClock(START)
    ws = make_ws(clock=clock)
    dependency = Dependency(clock, *["TEMP_UNAVAILABLE"] * 4)
    lookup = lookup_tool(ws, dependency)
    with pytest.raises(WriteSafeError) as raised:
        await lookup("SHIP-104", idempotency_key="temporary_persistent")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.cause) == ("RETRY_EXHAUSTED", "TEMP_UNAVAILABLE")
    assert dependency.calls == [0, 1000, 2000]
    assert await nothing_recorded(ws)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("INVALID_ARGUMENT", "INPUT_INVALID"),
        ("AUTH_REQUIRED", "AUTH_REQUIRED"),
        ("ACCESS_DENIED", "ACCESS_DENIED"),
        ("SHIPMENT_QUANTUM_FLUX", "UNKNOWN_ERROR"),
    ],
)
async def test_other_failures_are_not_retried(
    make_ws: MakeWriteSafe, code: str, expected: str
) -> None:
    clock = ManualClock(START)
    ws = make_ws(clock=clock)
    dependency = Dependency(clock, code, "OK")
    lookup = lookup_tool(ws, dependency)
    with pytest.raises(WriteSafeError) as raised:
        await lookup("ship104")
    assert raised.value.envelope.code == expected
    assert dependency.calls == [0]
    # A corrected or renewed call is simply another read: nothing stored stands in its way.
    assert await lookup("SHIP-104") == {"shipment_ref": "SHIP-104", "status": "in_transit"}
    assert await nothing_recorded(ws)


async def test_read_only_tools_are_advertised_as_such(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    server = MCPServer("shipments")
    add_mcp_tool(server, lookup_tool(ws, Dependency(ManualClock(START), "OK")), destructive=False)
    async with Client(server, mode="legacy") as client:
        [tool] = (await client.list_tools()).tools
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
        result = await client.call_tool("shipment_lookup", {"shipment_ref": "SHIP-104"})
        assert not result.is_error
    assert await nothing_recorded(ws)


def test_a_read_only_tool_has_no_lookup(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    async def find(op: Any) -> Any:
        raise AssertionError

    with pytest.raises(ValueError, match="read-only"):
        ws.tool("shipment_lookup", lookup=find, read_only=True)


async def test_a_read_past_its_timeout_ends_as_outcome_unknown(make_ws: MakeWriteSafe) -> None:
    """The read's task is ended at its timeout: its answer is unknown, and it is not tried again."""
    ws = make_ws()
    started = 0

    @ws.tool("slow_lookup", read_only=True, timeout=0.1, max_executions=3)
    async def slow_lookup(ref: str) -> str:
        nonlocal started
        started += 1
        await asyncio.sleep(30)
        return ref

    with pytest.raises(WriteSafeError) as ended:
        await asyncio.wait_for(slow_lookup("SHIP-1"), 10)
    envelope = ended.value.envelope
    assert envelope.code == "OUTCOME_UNKNOWN"
    assert "did not finish within 0.1s" in envelope.message
    assert started == 1
    assert await ws.ledger.list(tool="slow_lookup") == []
