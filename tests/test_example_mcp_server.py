"""examples/mcp_server: the order tools with the real MCP client session.

In memory (JSON-RPC over the SDK's in-memory streams, the order service in-process) on every
backend, and once as README.md runs it: `python -m examples.mcp_server` over stdio, with the
order service behind uvicorn on loopback.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult

from examples.mcp_server import server
from examples.mcp_server.server import create_server
from examples.orders import downstream, gateway
from tests.conftest import MakeWriteSafe
from tests.loopback import on_loopback
from writesafe import WriteSafe
from writesafe.reconciler import from_call_tool_result

ROOT = Path(__file__).resolve().parent.parent
ORDER = {"sku": "A1", "quantity": 2, "postcode": "560001"}


def rig(ws: WriteSafe) -> tuple[MCPServer[None], downstream.OrderService]:
    service = downstream.OrderService(stall_seconds=30.0)
    transport = httpx.ASGITransport(app=downstream.create_app(service))
    client = gateway.client(transport, base_url="http://orders")
    return create_server(ws, client, timeout=0.3), service


def error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    envelope: dict[str, Any] = from_call_tool_result(result).envelope.to_json_dict()
    assert result.structured_content == {"error": envelope}
    return envelope


async def test_tools_say_what_they_do(make_ws: MakeWriteSafe) -> None:
    server, _ = rig(make_ws())
    async with Client(server, mode="legacy") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    submit, refund = tools["submit_order"], tools["refund"]
    assert submit.annotations is not None
    assert refund.annotations is not None
    assert (submit.annotations.destructive_hint, refund.annotations.destructive_hint) == (
        False,
        True,
    )
    assert submit.annotations.idempotent_hint
    assert refund.annotations.idempotent_hint
    assert "idempotency_key" not in submit.input_schema["required"]
    assert "idempotency_key" in refund.input_schema["required"]
    assert submit.input_schema["properties"]["quantity"]["minimum"] == 1


async def test_an_agent_retrying_gets_one_order(make_ws: MakeWriteSafe) -> None:
    server, service = rig(make_ws())
    async with Client(server, mode="legacy") as client:
        first = await client.call_tool("submit_order", ORDER)
        again = await client.call_tool("submit_order", ORDER)  # a verbatim retry, no key
        refund = {"order_id": "ord-1", "amount_cents": 500, "idempotency_key": "refund-1"}
        refunds = [await client.call_tool("refund", refund) for _ in "ab"]
    assert first.structured_content == again.structured_content
    assert first.structured_content is not None
    assert first.structured_content["order_id"] == "ord-1"
    assert again.meta is not None
    assert again.meta["writesafe/operation"]["replayed"] is True
    assert refunds[0].structured_content == refunds[1].structured_content
    assert (len(service.orders), len(service.refunds)) == (1, 1)


async def test_failures_reach_the_agent_as_envelopes(make_ws: MakeWriteSafe) -> None:
    server, service = rig(make_ws())
    async with Client(server, mode="legacy") as client:
        rejected = await client.call_tool("submit_order", {**ORDER, "postcode": "000000"})
        service.faults.append(downstream.Fault.HANG)
        hung = await client.call_tool("submit_order", {**ORDER, "idempotency_key": "o-2"})
        missing = await client.call_tool("refund", {"order_id": "ord-9", "amount_cents": 1})
    assert (error(rejected)["code"], error(rejected)["field"]) == ("INPUT_INVALID", "postcode")
    unknown = error(hung)
    assert (unknown["code"], unknown["next_action"]) == ("OUTCOME_UNKNOWN", "reconcile")
    assert missing.is_error  # no key for a refund: refused by the input schema, nothing ran
    assert service.writes == 0


@pytest.mark.slow
async def test_the_server_runs_over_stdio(tmp_path: Path) -> None:
    service = downstream.OrderService()
    async with on_loopback(downstream.create_app(service)) as orders_url:
        first, again = await call_twice_over_stdio(orders_url, tmp_path)
    assert not first.is_error, first.content
    assert first.structured_content == again.structured_content
    assert first.structured_content is not None
    assert first.structured_content["order_id"] == "ord-1"
    assert again.meta is not None
    assert again.meta["writesafe/operation"]["replayed"] is True
    assert service.writes == 1


async def call_twice_over_stdio(
    orders_url: str, tmp_path: Path
) -> tuple[CallToolResult, CallToolResult]:
    """`python -m examples.mcp_server` as README.md runs it, called twice with one key."""
    environment = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SHOP_DOWNSTREAM_URL": orders_url,
        "WRITESAFE_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}",
    }
    command = StdioServerParameters(
        command=sys.executable, args=["-m", "examples.mcp_server"], env=environment, cwd=ROOT
    )
    async with Client(command) as client:
        arguments = {**ORDER, "idempotency_key": "stdio-1"}
        return (
            await client.call_tool("submit_order", arguments),
            await client.call_tool("submit_order", arguments),
        )


def test_the_server_logs_warnings_plainly(tmp_path: Path) -> None:
    """Its stderr is the host's log: no rich boxes, no INFO line per migration and request."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers = []  # as in a fresh process (pytest's own capture handlers set aside)
    try:
        server.plain_logging()
        create_server(WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'l.db'}"), httpx.AsyncClient())
        assert [type(h) for h in root.handlers] == [logging.StreamHandler]
        assert root.level == logging.WARNING
    finally:
        root.handlers, level = saved
        root.setLevel(level)
