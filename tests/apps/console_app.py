"""A WriteSafe application for the console's browser test, configured by WRITESAFE_* variables
the way `writesafe serve tests.apps.console_app:ws` would be deployed; the test seeds the same
tool through `register` on its own `WriteSafe`."""

from __future__ import annotations

from typing import Any

import httpx

from writesafe import LookupOperation, Tool, ToolError, Unknown, WriteSafe
from writesafe.reconciler import LookupResult


async def find_order(op: LookupOperation) -> LookupResult:
    return Unknown("the shop's search is down")  # nothing settles by itself: a person decides


def register(ws: WriteSafe) -> Tool[dict[str, Any]]:
    @ws.tool("submit_order", lookup=find_order)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        if order.get("refuse"):
            raise ToolError("ACCESS_DENIED", "the shop refused")
        if order.get("lose"):
            raise httpx.ReadTimeout("sent, then the connection went quiet")
        return {"order_id": f"o-{order['n']}", "sku": order.get("sku")}

    return submit_order


ws = WriteSafe()
register(ws)
