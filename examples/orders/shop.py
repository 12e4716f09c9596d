"""The shop: a FastAPI app whose order and refund endpoints are write-safe by `Idempotency-Key`.

Each endpoint calls the order service (`downstream.py`) over httpx. A client that retries with
the same key gets the first answer again (`Idempotent-Replayed: true`); a timeout is answered
504 OUTCOME_UNKNOWN, and the next retry asks the order service by client reference before
anything runs again. The tenant (`X-Tenant`) is the scope: keys of two tenants never meet.

Run it (see README.md): `uvicorn examples.orders.shop:app --port 8000`, with the order service
at `SHOP_DOWNSTREAM_URL` (default http://127.0.0.1:8001) and the ledger from `WRITESAFE_*`
(default: writesafe.db in the working directory).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import httpx
from fastapi import FastAPI, Header
from pydantic import BaseModel, Field

from examples.orders.gateway import ADAPTER, Order, OrderGateway, Refund, client
from writesafe import WriteSafe
from writesafe.contrib.fastapi import add_problem_handlers, idempotent_route

DOWNSTREAM_URL = os.environ.get("SHOP_DOWNSTREAM_URL", "http://127.0.0.1:8001")
DOWNSTREAM_TIMEOUT = float(os.environ.get("SHOP_DOWNSTREAM_TIMEOUT", "2.0"))


TenantHeader = Header(
    pattern=r"^[a-z0-9][a-z0-9-]{0,62}$", description="Your tenant (in a real shop: from auth)"
)


def tenant(x_tenant: Annotated[str, TenantHeader]) -> str:
    """The scope of every key: two tenants' keys never meet."""
    return x_tenant


class OrderRequest(BaseModel):
    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(ge=1, le=1000)
    postcode: str = Field(min_length=1, max_length=16)


class RefundRequest(BaseModel):
    amount_cents: int = Field(gt=0)


def create_app(
    ws: WriteSafe,
    downstream: httpx.AsyncClient,
    *,
    timeout: float = 10.0,
    settle_after: float = 5.0,
) -> FastAPI:
    """The shop on `ws`, talking to the order service through `downstream` (base URL set).

    `timeout` bounds each write; `settle_after` is how long after a write the order service's
    "not found" is believed (a slow write may still land).
    """
    gateway = OrderGateway(downstream)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await ws.start()  # an unreachable or unmigrated ledger stops the shop at startup
        try:
            yield
        finally:
            await downstream.aclose()
            await ws.close()

    app = FastAPI(title="Shop", lifespan=lifespan)
    add_problem_handlers(app)

    @app.post("/orders", status_code=201)
    @idempotent_route(
        ws,
        "place_order",
        scope=tenant,
        lookup=gateway.find_order,
        adapter=ADAPTER,
        timeout=timeout,
        settle_after=settle_after,
    )
    async def place_order(order: OrderRequest) -> Order:
        """Place an order. Send a new `Idempotency-Key` per order; reuse it to retry."""
        return await gateway.place_order(order.sku, order.quantity, order.postcode)

    @app.post("/orders/{order_id}/refunds", status_code=201)
    @idempotent_route(
        ws,
        "refund_order",
        scope=tenant,
        lookup=gateway.find_refund,
        adapter=ADAPTER,
        timeout=timeout,
        settle_after=settle_after,
    )
    async def refund_order(order_id: str, refund: RefundRequest) -> Refund:
        """Refund part of an order. Send a new `Idempotency-Key` per refund; reuse it to retry."""
        return await gateway.refund(order_id, refund.amount_cents)

    return app


ws = WriteSafe()
app = create_app(ws, client(base_url=DOWNSTREAM_URL, timeout=DOWNSTREAM_TIMEOUT))
