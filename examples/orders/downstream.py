"""A fake order service the shop calls over HTTP: orders and refunds keyed by client reference.

It honours nothing itself: a second POST with the same reference is a second write. So `writes`
counts exactly what the callers' at-most-once guarantee must protect. `POST /_faults` queues
faults for the next writes:

- `reject`: 503 with `Retry-After: 1` before anything is written (no effect, retryable);
- `commit_then_timeout`: the write is committed, then the answer stalls past the caller's timeout;
- `hang`: nothing is written and the answer stalls past the caller's timeout.

Run it: `uvicorn examples.orders.downstream:app --port 8001`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from enum import StrEnum
from typing import Annotated, Any

from fastapi import FastAPI, Header, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

SERVED_POSTCODES = frozenset({"560001", "10115", "75001"})
UNIT_PRICE_CENTS = 1250

Reference = Annotated[str, Header(alias="Idempotency-Key", min_length=1, max_length=600)]


class Fault(StrEnum):
    REJECT = "reject"
    COMMIT_THEN_TIMEOUT = "commit_then_timeout"
    HANG = "hang"


class OrderIn(BaseModel):
    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(ge=1, le=1000)
    postcode: str = Field(max_length=16)


class RefundIn(BaseModel):
    order_id: str
    amount_cents: int = Field(gt=0)


class Faults(BaseModel):
    faults: list[Fault]


class OrderService:
    """The service's state, visible to tests: what was written, and the faults still queued."""

    def __init__(self, *, stall_seconds: float = 30.0) -> None:
        self.stall_seconds = stall_seconds
        self.orders: list[dict[str, Any]] = []
        self.refunds: list[dict[str, Any]] = []
        self.faults: deque[Fault] = deque()

    @property
    def writes(self) -> int:
        return len(self.orders) + len(self.refunds)

    def first(self, table: list[dict[str, Any]], reference: str) -> dict[str, Any] | None:
        return next((row for row in table if row["reference"] == reference), None)

    async def write(self, table: list[dict[str, Any]], row: dict[str, Any]) -> JSONResponse:
        """Commit `row` unless a queued fault says otherwise."""
        fault = self.faults.popleft() if self.faults else None
        if fault is Fault.REJECT:
            return JSONResponse({"error": "unavailable"}, 503, headers={"Retry-After": "1"})
        if fault is Fault.HANG:
            await asyncio.sleep(self.stall_seconds)
            return JSONResponse({"error": "gave up"}, 504)
        table.append(row)
        if fault is Fault.COMMIT_THEN_TIMEOUT:
            await asyncio.sleep(self.stall_seconds)
        return JSONResponse(row, 201)


def create_app(service: OrderService) -> FastAPI:
    app = FastAPI(title="Order service (fake downstream)")

    @app.post("/orders", status_code=201)
    async def create_order(order: OrderIn, reference: Reference) -> JSONResponse:
        if order.postcode not in SERVED_POSTCODES:
            body = {"code": "POSTCODE_INVALID", "field": "postcode"}
            return JSONResponse(body, 422)
        row = {
            "order_id": f"ord-{len(service.orders) + 1}",
            "reference": reference,
            "total_cents": order.quantity * UNIT_PRICE_CENTS,
            **order.model_dump(),
        }
        return await service.write(service.orders, row)

    @app.get("/orders")
    async def find_order(reference: Annotated[str, Query()]) -> JSONResponse:
        row = service.first(service.orders, reference)
        return JSONResponse(row) if row else JSONResponse({"error": "not found"}, 404)

    @app.post("/refunds", status_code=201)
    async def create_refund(refund: RefundIn, reference: Reference) -> JSONResponse:
        order = next((o for o in service.orders if o["order_id"] == refund.order_id), None)
        if order is None:
            return JSONResponse({"code": "ORDER_UNKNOWN", "field": "order_id"}, 422)
        earlier = [r for r in service.refunds if r["order_id"] == refund.order_id]
        if sum(r["amount_cents"] for r in earlier) + refund.amount_cents > order["total_cents"]:
            return JSONResponse({"code": "AMOUNT_TOO_HIGH", "field": "amount_cents"}, 422)
        row = {"refund_id": f"ref-{len(service.refunds) + 1}", "reference": reference}
        return await service.write(service.refunds, {**row, **refund.model_dump()})

    @app.get("/refunds")
    async def find_refund(reference: Annotated[str, Query()]) -> JSONResponse:
        row = service.first(service.refunds, reference)
        return JSONResponse(row) if row else JSONResponse({"error": "not found"}, 404)

    @app.post("/_faults", status_code=204)
    async def inject(faults: Faults) -> None:
        service.faults.extend(faults.faults)

    @app.get("/_stats")
    async def stats() -> dict[str, Any]:
        return {"writes": service.writes, "orders": service.orders, "refunds": service.refunds}

    return app


service = OrderService()
app = create_app(service)
