"""The shop's client of the order service (`downstream.py`), shared by the shop and the MCP server.

The client is a `fenced_client` (`client()`): each write's request passes the operation's
send-time fence and carries its client reference as `Idempotency-Key` and its fencing token, so the
lookups can ask the service whether an unknown outcome happened. Failures are raised as they came
(`raise_for_status`) and classified by `ADAPTER`, the HTTP preset; timeouts and lost connections
by the built-in exception rules (sent, then lost: OUTCOME_UNKNOWN).
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx
from pydantic import BaseModel

from writesafe import FencedTransport, Found, NotFound, OperationContext, Unknown
from writesafe.reconciler import LookupResult, http_adapter

ADAPTER = http_adapter("order-service", "2")
"""The HTTP preset: 422 {"code": ..., "field": ...} is INPUT_INVALID naming the field, 503 with
Retry-After is TEMP_UNAVAILABLE, 401/403 their codes; anything it cannot vouch for fails closed."""


class Order(BaseModel):
    order_id: str
    sku: str
    quantity: int
    postcode: str
    total_cents: int


class Refund(BaseModel):
    refund_id: str
    order_id: str
    amount_cents: int


class Operation(Protocol):
    """What a lookup needs of the operation it is asked about."""

    @property
    def key(self) -> str: ...

    @property
    def scope(self) -> str: ...


def reference(scope: str, key: str) -> str:
    """The client reference a write is filed under: unique across tenants (scopes have no '/')."""
    return f"{scope}/{key}"


def operation_reference(operation: OperationContext) -> str:
    """The client reference the fenced transport sends for the operation executing a write."""
    return reference(operation.scope, operation.key)


def client(transport: httpx.AsyncBaseTransport | None = None, **options: Any) -> httpx.AsyncClient:
    """A client of the order service whose writes are fenced and carry their client reference."""
    fenced = FencedTransport(transport, key_value=operation_reference)
    return httpx.AsyncClient(transport=fenced, **options)


class OrderGateway:
    """Writes and lookups against the order service at `client.base_url`."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def place_order(self, sku: str, quantity: int, postcode: str) -> Order:
        body = {"sku": sku, "quantity": quantity, "postcode": postcode}
        return Order.model_validate(await self._write("/orders", body))

    async def refund(self, order_id: str, amount_cents: int) -> Refund:
        body = {"order_id": order_id, "amount_cents": amount_cents}
        return Refund.model_validate(await self._write("/refunds", body))

    async def find_order(self, operation: Operation) -> LookupResult:
        """Found(Order) if the service has an order under the operation's reference."""
        return await self._find("/orders", operation, Order)

    async def find_refund(self, operation: Operation) -> LookupResult:
        return await self._find("/refunds", operation, Refund)

    async def _write(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.client.post(path, json=body)
        response.raise_for_status()
        row: dict[str, Any] = response.json()
        return row

    async def _find(self, path: str, operation: Operation, model: type[BaseModel]) -> LookupResult:
        params = {"reference": reference(operation.scope, operation.key)}
        response = await self.client.get(path, params=params)
        if response.status_code == 200:
            return Found(model.model_validate(response.json()))
        if response.status_code == 404:
            return NotFound()
        return Unknown(f"the order service answered {response.status_code}")
