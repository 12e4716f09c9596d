"""Order tools for agents, served over MCP (stdio): `submit_order` and `refund`, write-safe.

An agent that retries a call verbatim, or with the same `idempotency_key`, reaches the same
operation: at most one order or refund per key, and the first result again. Failures come back
as `isError` results carrying the envelope, so the agent branches on `code` and `next_action`.
The tools call the order service of examples/orders over httpx and look it up by client
reference when an outcome is unknown.

Run it: `python -m examples.mcp_server` (see README.md).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import httpx
from mcp.server.mcpserver import MCPServer
from pydantic import Field

from examples.orders.gateway import ADAPTER, Order, OrderGateway, Refund, client
from writesafe import WriteSafe
from writesafe.contrib.mcp import add_mcp_tool

DOWNSTREAM_URL = os.environ.get("SHOP_DOWNSTREAM_URL", "http://127.0.0.1:8001")
DOWNSTREAM_TIMEOUT = float(os.environ.get("SHOP_DOWNSTREAM_TIMEOUT", "2.0"))


def create_server(
    ws: WriteSafe,
    downstream: httpx.AsyncClient,
    *,
    timeout: float = 10.0,
    settle_after: float = 5.0,
) -> MCPServer[None]:
    """The MCP server on `ws`, talking to the order service through `downstream`."""
    gateway = OrderGateway(downstream)

    @asynccontextmanager
    async def lifespan(_server: MCPServer[None]) -> AsyncIterator[None]:
        await ws.start()
        try:
            yield
        finally:
            await downstream.aclose()
            await ws.close()

    server: MCPServer[None] = MCPServer("orders", lifespan=lifespan)

    @ws.tool(
        "submit_order",
        lookup=gateway.find_order,
        adapter=ADAPTER,
        timeout=timeout,
        settle_after=settle_after,
    )
    async def submit_order(
        sku: Annotated[str, Field(min_length=1, max_length=64, description="Product code")],
        quantity: Annotated[int, Field(ge=1, le=1000)],
        postcode: Annotated[str, Field(min_length=1, max_length=16, description="Deliver to")],
    ) -> Order:
        """Order `quantity` units of `sku` for delivery to `postcode`."""
        return await gateway.place_order(sku, quantity, postcode)

    @ws.tool(
        "refund",
        lookup=gateway.find_refund,
        adapter=ADAPTER,
        timeout=timeout,
        settle_after=settle_after,
    )
    async def refund(
        order_id: Annotated[str, Field(min_length=1, max_length=64)],
        amount_cents: Annotated[int, Field(gt=0, description="Amount to pay back, in cents")],
    ) -> Refund:
        """Pay back part of an order. Money leaves the shop: name each refund with its own key."""
        return await gateway.refund(order_id, amount_cents)

    # An order only adds; a refund pays money out for good, so it is declared destructive and
    # agents must name each one with a key (a repeated identical refund is not deduplicated
    # by guessing).
    add_mcp_tool(server, submit_order, destructive=False)
    add_mcp_tool(server, refund, destructive=True, require_key=True)
    return server


def plain_logging() -> None:
    """Warnings and errors only, one plain line each, on stderr (stdout carries the protocol).

    Set before the server is made: MCPServer would otherwise configure rich-formatted INFO
    logging, and every migration step and downstream request would show up in the host's log.
    """
    level = os.environ.get("LOG_LEVEL", "WARNING").upper()
    logging.basicConfig(
        level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )


def main() -> None:
    plain_logging()
    orders = client(base_url=DOWNSTREAM_URL, timeout=DOWNSTREAM_TIMEOUT)
    create_server(WriteSafe(), orders).run()
