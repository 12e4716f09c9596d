"""An in-process downstream shop for reconciliation tests: it counts effects and lookups.

Faults are scripted per execution: `commit_then_timeout` (the order exists, the answer is lost),
`timeout_before_commit` (sent, nothing happened) and `unclassified` (an error nobody classified).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from idempotency import Found, LookupOperation, NotFound, Tool, WriteSafe, WriteSafeError
from reconciler import LookupResult

Order = dict[str, str]


@dataclass
class Shop:
    orders: dict[str, Order] = field(default_factory=dict)
    placed: int = 0
    lookups: int = 0
    faults: list[str] = field(default_factory=list)
    lookup_answer: Callable[[LookupOperation], Awaitable[LookupResult]] | None = None

    async def place(self, reference: str, sku: str) -> Order:
        fault = self.faults.pop(0) if self.faults else "ok"
        if fault == "timeout_before_commit":
            raise httpx.ReadTimeout("no answer, and nothing was written")
        if fault == "unclassified":
            raise RuntimeError("the shop answered something nobody classified")
        self.placed += 1
        order = {"order_id": f"o-{self.placed}", "sku": sku}
        self.orders[reference] = order
        if fault == "commit_then_timeout":
            raise httpx.ReadTimeout("written, but the answer was lost")
        return order

    async def find(self, op: LookupOperation) -> LookupResult:
        self.lookups += 1
        if self.lookup_answer is not None:
            return await self.lookup_answer(op)
        order = self.orders.get(op.key)
        return NotFound() if order is None else Found(order)


def order_tool(
    ws: WriteSafe, shop: Shop, *, with_lookup: bool = True, **options: Any
) -> Tool[Order]:
    """`submit_order(sku)`: places an order under the idempotency key as client reference."""
    options.setdefault("settle_after", 0.0)

    @ws.tool("submit_order", lookup=shop.find if with_lookup else None, **options)
    async def submit_order(sku: str, idempotency_key: str) -> Order:
        return await shop.place(idempotency_key, sku)

    return submit_order


async def unknown_outcome(call: Awaitable[Any]) -> WriteSafeError:
    """Await a call that must end in OUTCOME_UNKNOWN and return its error."""
    with pytest.raises(WriteSafeError) as raised:
        await call
    assert raised.value.code == "OUTCOME_UNKNOWN", raised.value.envelope
    return raised.value
