"""Two versions of a fake order service, speaking the recorded wire formats.

`POST /orders` takes `{"postcode", "authenticated", "fault", ...}` and the caller's
`Idempotency-Key`; it checks authentication, then the postcode, then plays the requested fault,
then writes the order. `GET /orders?reference=KEY` finds an order by that key. `writes` counts
orders created: the effect a recovery policy must never duplicate.

backend1 rejects a postcode with 422 `{"code": "POSTCODE_INVALID", "field": "postcode"}`;
backend2 with 409 `{"reason": "INVALID_POSTCODE", "field": "shipping.postcode"}` and knows one
more conflict, `NEW_UNKNOWN_CONFLICT`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

SERVED_POSTCODES = frozenset({"560001"})

_COMMON_FAULTS = frozenset(
    {"none", "locked_once", "locked_always", "unexpected_400", "commit_then_timeout"}
)


@dataclass(slots=True)
class OrderService:
    """One running instance of a backend version."""

    version: int
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    _locked_seen: set[str] = field(default_factory=set)

    @property
    def name(self) -> str:
        return f"backend{self.version}"

    @property
    def writes(self) -> int:
        return len(self.orders)

    def supports(self, fault: str) -> bool:
        """Whether this version can produce `fault` at all (cases it cannot are not applicable)."""
        return fault in _COMMON_FAULTS or (self.version >= 2 and fault == "unknown_conflict")

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            found = self.orders.get(request.url.params.get("reference", ""))
            return httpx.Response(200, json=found) if found else httpx.Response(404, json={})
        return self._submit(request)

    def _submit(self, request: httpx.Request) -> httpx.Response:
        order = json.loads(request.content)
        reference = request.headers.get("Idempotency-Key", "")
        if reference in self.orders:  # the service itself honours Idempotency-Key
            return httpx.Response(200, json=self.orders[reference])
        if not order.get("authenticated"):
            return httpx.Response(401, json={"error": "unauthenticated"})
        if order.get("postcode") not in SERVED_POSTCODES:
            return self._postcode_rejected()
        fault = order.get("fault", "none")
        if fault == "locked_always" or (
            fault == "locked_once" and reference not in self._locked_seen
        ):
            self._locked_seen.add(reference)
            return httpx.Response(409, json={"reason": "LOCKED"})
        if fault == "unexpected_400":
            return httpx.Response(400, json={"error": "unexpected"})
        if fault == "unknown_conflict" and self.version >= 2:
            return httpx.Response(409, json={"reason": "NEW_UNKNOWN_CONFLICT"})
        created = {"order_id": f"o-{len(self.orders) + 1}", "reference": reference, **order}
        self.orders[reference] = created
        if fault == "commit_then_timeout":
            raise httpx.ReadTimeout(
                "the order was written; its response never arrived", request=request
            )
        return httpx.Response(201, json=created)

    def _postcode_rejected(self) -> httpx.Response:
        if self.version == 1:
            return httpx.Response(422, json={"code": "POSTCODE_INVALID", "field": "postcode"})
        return httpx.Response(
            409, json={"reason": "INVALID_POSTCODE", "field": "shipping.postcode"}
        )


def backend1() -> OrderService:
    return OrderService(version=1)


def backend2() -> OrderService:
    return OrderService(version=2)
