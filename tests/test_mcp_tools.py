"""The MCP integration with the real MCP client session against the server in memory (JSON-RPC
over the SDK's in-memory streams), on the embedded default and on PostgreSQL (+Redis)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent

from tests.conftest import MakeWriteSafe
from writesafe import ToolError, WriteSafe
from writesafe.contrib.mcp import add_mcp_tool
from writesafe.reconciler import from_call_tool_result


class Shop:
    """Two guarded tools served over MCP; `effects` records each execution of a write."""

    def __init__(self, ws: WriteSafe, **options: Any) -> None:
        self.ws = ws
        self.effects: list[str] = []
        self.gate: asyncio.Event | None = None

        @ws.tool("submit_order", **options)
        async def submit_order(sku: str, quantity: int = 1) -> dict[str, Any]:
            """Place an order for `quantity` units of `sku`."""
            if self.gate is not None:
                await self.gate.wait()
            if sku == "unknown":
                raise ToolError("INPUT_INVALID", f"no such sku {sku}", field="sku")
            self.effects.append(f"{quantity} {sku}")
            return {"order_id": f"o-{len(self.effects)}", "sku": sku, "quantity": quantity}

        @ws.tool("refund")
        async def refund(order_id: str, amount_cents: int) -> str:
            self.effects.append(f"refund {order_id}")
            return f"refunded {amount_cents} on {order_id}"

        async def tenant(context: Context[Any, Any]) -> str:
            return "tenant-a"

        self.server = MCPServer("shop")
        add_mcp_tool(self.server, submit_order, destructive=False, scope=tenant)
        add_mcp_tool(self.server, refund, destructive=True, require_key=True, open_world=False)


@pytest.fixture
async def shop(make_ws: MakeWriteSafe) -> Shop:
    return Shop(make_ws())


def connect(shop: Shop) -> Client:
    """A real client session over the SDK's in-memory JSON-RPC streams (opened with
    `async with` in the test itself: anyio scopes cannot span pytest fixture tasks)."""
    return Client(shop.server, mode="legacy")


def operation(result: CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    meta: dict[str, Any] = result.meta["writesafe/operation"]
    return meta


def envelope(result: CallToolResult) -> dict[str, Any]:
    """The envelope of an error result: structured and text copies agree and read back valid."""
    assert result.is_error
    assert result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    [block] = result.content
    assert isinstance(block, TextContent)
    assert json.loads(block.text) == error
    assert from_call_tool_result(result).envelope.to_json_dict() == error
    return error


async def test_tools_are_listed_with_the_key_and_truthful_annotations(shop: Shop) -> None:
    async with connect(shop) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        submit, refund = tools["submit_order"], tools["refund"]
        key = submit.input_schema["properties"]["idempotency_key"]
        assert "retrying" in key["description"]
        assert (key["minLength"], key["maxLength"]) == (1, 255)
        assert "idempotency_key" not in submit.input_schema["required"]
        assert "idempotency_key" in refund.input_schema["required"]
        assert submit.description == "Place an order for `quantity` units of `sku`."
        for tool in (submit, refund):
            assert "writesafe_mcp_context" not in json.dumps(tool.input_schema)
            assert tool.annotations is not None
            assert tool.annotations.read_only_hint is False
            assert tool.annotations.idempotent_hint is True
        assert submit.annotations is not None
        assert refund.annotations is not None
        assert (submit.annotations.destructive_hint, submit.annotations.open_world_hint) == (
            False,
            True,
        )
        assert (refund.annotations.destructive_hint, refund.annotations.open_world_hint) == (
            True,
            False,
        )
        assert submit.output_schema is not None
        assert submit.output_schema["type"] == "object"


async def test_a_retried_call_replays_the_first_result(shop: Shop) -> None:
    async with connect(shop) as client:
        arguments = {"sku": "A1", "quantity": 2, "idempotency_key": "ord-7"}
        first = await client.call_tool("submit_order", arguments)
        again = await client.call_tool("submit_order", arguments)
        assert not first.is_error
        assert not again.is_error
        assert first.structured_content == again.structured_content
        assert first.structured_content == {"order_id": "o-1", "sku": "A1", "quantity": 2}
        assert first.content == again.content
        assert operation(first) == {"key": "ord-7", "scope": "tenant-a", "replayed": False}
        assert operation(again)["replayed"] is True
        assert shop.effects == ["2 A1"]
        status = await shop.ws.status("ord-7", scope="tenant-a")
        assert status is not None
        assert status.status == "succeeded"


async def test_without_a_key_identical_calls_are_one_operation(shop: Shop) -> None:
    async with connect(shop) as client:
        first = await client.call_tool("submit_order", {"sku": "A1", "quantity": 2})
        # Key order and an explicit default do not make it another call.
        again = await client.call_tool("submit_order", {"quantity": 2, "sku": "A1"})
        other = await client.call_tool("submit_order", {"sku": "A1", "quantity": 3})
        derived = operation(first)["key"]
        assert derived.startswith("call:")
        assert operation(again) == {**operation(first), "replayed": True}
        assert operation(other)["key"] != derived
        assert shop.effects == ["2 A1", "3 A1"]
        assert await shop.ws.status(derived, scope="tenant-a") is not None


async def test_failures_are_envelopes(shop: Shop) -> None:
    async with connect(shop) as client:
        arguments = {"sku": "unknown", "idempotency_key": "bad-sku"}
        failed = await client.call_tool("submit_order", arguments)
        error = envelope(failed)
        assert (error["code"], error["field"], error["retryable"]) == (
            "INPUT_INVALID",
            "sku",
            False,
        )
        assert error["operation"]["key"] == "bad-sku"
        again = await client.call_tool("submit_order", arguments)
        assert envelope(again) == error  # the stored failure, not a second execution
        assert shop.effects == []


async def test_the_same_key_with_other_arguments_is_key_reused(shop: Shop) -> None:
    async with connect(shop) as client:
        await client.call_tool("submit_order", {"sku": "A1", "idempotency_key": "k"})
        reused = await client.call_tool("submit_order", {"sku": "B2", "idempotency_key": "k"})
        assert envelope(reused)["code"] == "KEY_REUSED"
        assert shop.effects == ["1 A1"]


@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", " padded", "nul\x00", 42, ["k"]])
async def test_bad_keys_are_input_invalid(shop: Shop, key: object) -> None:
    async with connect(shop) as client:
        result = await client.call_tool("submit_order", {"sku": "A1", "idempotency_key": key})
        error = envelope(result)
        assert (error["code"], error["field"]) == ("INPUT_INVALID", "idempotency_key")
        assert shop.effects == []


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"sku": 5}, "sku"),
        ({"sku": "A1", "quantity": "many"}, "quantity"),
        ({"sku": "A1", "quantity": {"n": 1}}, "quantity"),
        ({"sku": ["A1"], "quantity": 2}, "sku"),
    ],
)
async def test_arguments_of_the_wrong_type_are_input_invalid(
    shop: Shop, arguments: dict[str, Any], field: str
) -> None:
    async with connect(shop) as client:
        error = envelope(await client.call_tool("submit_order", arguments))
    assert (error["code"], error["field"], error["next_action"]) == (
        "INPUT_INVALID",
        field,
        "correct_input",
    )
    assert error["operation"] is None  # refused before any operation existed
    assert shop.effects == []


async def test_a_missing_argument_is_refused_by_the_sdk(shop: Shop) -> None:
    async with connect(shop) as client:
        result = await client.call_tool("submit_order", {"quantity": 2})
    assert result.is_error
    assert result.structured_content is None  # the SDK's own prose, not an envelope
    assert shop.effects == []


async def test_a_unicode_key_and_arguments_round_trip(shop: Shop) -> None:
    async with connect(shop) as client:
        arguments = {"sku": "Käse-🧀", "idempotency_key": "заказ-7"}
        first = await client.call_tool("submit_order", arguments)
        again = await client.call_tool("submit_order", arguments)
        assert first.structured_content == again.structured_content
        assert operation(again)["replayed"] is True
        assert shop.effects == ["1 Käse-🧀"]


async def test_a_required_key_is_enforced_by_the_schema(shop: Shop) -> None:
    async with connect(shop) as client:
        result = await client.call_tool("refund", {"order_id": "o-1", "amount_cents": 500})
        assert result.is_error  # the SDK rejects the arguments before the tool runs
        assert shop.effects == []
        ok = await client.call_tool(
            "refund", {"order_id": "o-1", "amount_cents": 500, "idempotency_key": "r-1"}
        )
        assert ok.structured_content == {"result": "refunded 500 on o-1"}
        assert operation(ok)["scope"] == "default"


async def test_concurrent_duplicate_calls_execute_once(make_ws: MakeWriteSafe) -> None:
    shops = [Shop(make_ws(), wait_timeout=5.0), Shop(make_ws(), wait_timeout=5.0)]
    gate = asyncio.Event()
    for shop in shops:
        shop.gate = gate
        await shop.ws.start()  # one at a time: concurrent auto-migration of a new schema races
    arguments = {"sku": "A1", "idempotency_key": "burst"}
    async with (
        Client(shops[0].server, mode="legacy") as one,
        Client(shops[1].server, mode="legacy") as two,
    ):
        calls = [
            asyncio.create_task(client.call_tool("submit_order", arguments))
            for client in (one, two, one, two)
        ]
        await asyncio.sleep(0.05)
        gate.set()
        results = await asyncio.gather(*calls)
    assert shops[0].effects + shops[1].effects == ["1 A1"]
    answers = [r for r in results if not r.is_error]
    assert [operation(r)["replayed"] for r in answers].count(False) == 1
    for result in results:
        if result.is_error:
            assert envelope(result)["code"] == "IN_PROGRESS"
        else:
            assert result.structured_content == answers[0].structured_content


async def test_a_timeout_is_outcome_unknown_and_is_not_run_again(make_ws: MakeWriteSafe) -> None:
    shop = Shop(make_ws(), timeout=0.05)
    shop.gate = asyncio.Event()  # never set: the write hangs past its timeout
    async with Client(shop.server, mode="legacy") as client:
        arguments = {"sku": "A1", "idempotency_key": "hang"}
        results = [await client.call_tool("submit_order", arguments) for _ in "ab"]
    for result in results:
        error = envelope(result)
        assert (error["code"], error["next_action"]) == ("OUTCOME_UNKNOWN", "reconcile")
    assert shop.effects == []
    status = await shop.ws.status("hang", scope="tenant-a")
    assert status is not None
    assert status.executions == 1


def test_reserved_and_variadic_parameters_are_refused(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    @ws.tool("variadic")
    async def variadic(*items: str) -> None: ...

    with pytest.raises(TypeError, match="args"):
        add_mcp_tool(MCPServer("x"), variadic, destructive=False)
