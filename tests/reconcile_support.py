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

from writesafe import Found, LookupOperation, NotFound, Status, Tool, WriteSafe, WriteSafeError
from writesafe.ledger import Claim, Intent, OperationRecord, Outcome
from writesafe.reconciler import LookupResult

Order = dict[str, str]
DEAD_WORKER = "dead-worker"


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


async def claimed_by_a_dead_worker(
    ws: WriteSafe, shop: Shop, submit_order: Tool[Order], key: str, *, lease_seconds: float
) -> Claim:
    """A worker claimed `key`, placed the order for "A1", and died before recording anything.

    The inline gate and the reconcile pass must both recover this; they start from the same crash.
    """
    await ws.start()
    call = submit_order.prepare(("A1",), {}, key, "default", None)
    intent = Intent(
        scope="default",
        key=key,
        tool="submit_order",
        fingerprint=call.fingerprint,
        arguments=call.bound.arguments_json,
        owner=DEAD_WORKER,
        lease_seconds=lease_seconds,
        max_executions=3,
    )
    claim = await ws.ledger.claim(intent)
    await shop.place(key, "A1")
    return claim


async def late_failure_report(ws: WriteSafe, claim: Claim) -> OperationRecord | None:
    """The dead worker's report arriving after all; None when it was fenced off."""
    return await ws.ledger.finish(claim.operation, DEAD_WORKER, Outcome(Status.FAILED))


async def unknown_evidence(ws: WriteSafe, key: str) -> dict[str, Any]:
    """The evidence of the last attempt of `key`, which must still be OUTCOME_UNKNOWN."""
    status = await ws.status(key)
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN
    evidence = status.attempts[-1].evidence
    assert evidence is not None
    return evidence
