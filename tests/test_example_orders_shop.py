"""examples/orders: the shop against its fake order service, through real HTTP.

In-process (httpx against both ASGI apps, time simulated) on every backend, and once end to end
with both apps served by uvicorn on loopback, where the shop's own httpx timeout fires.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from examples.orders import downstream, gateway, shop
from tests.conftest import MakeWriteSafe
from tests.loopback import on_loopback
from writesafe import Found, NotFound, WriteSafe
from writesafe.contrib.fastapi import REPLAYED_HEADER
from writesafe.ledger import ManualClock
from writesafe.reconciler import PROBLEM_MEDIA_TYPE, from_problem

ORDER = {"sku": "A1", "quantity": 2, "postcode": "560001"}
SETTLE = 5.0


@dataclass
class Rig:
    """The shop and the order service it calls, both in this process."""

    ws: WriteSafe
    clock: ManualClock
    service: downstream.OrderService
    client: httpx.AsyncClient

    async def order(self, key: str, body: dict[str, Any] = ORDER, tenant: str = "acme") -> Any:
        headers = {"Idempotency-Key": key, "X-Tenant": tenant}
        return await self.client.post("/orders", json=body, headers=headers)

    async def refund(self, key: str, order_id: str, cents: int) -> httpx.Response:
        headers = {"Idempotency-Key": key, "X-Tenant": "acme"}
        body = {"amount_cents": cents}
        return await self.client.post(f"/orders/{order_id}/refunds", json=body, headers=headers)


def in_process(app: FastAPI, base_url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)


@pytest.fixture
async def rig(make_ws: MakeWriteSafe) -> AsyncIterator[Rig]:
    clock = ManualClock()  # Retry-After waits and settle windows pass without sleeping
    ws = make_ws(clock=clock)
    service = downstream.OrderService(stall_seconds=30.0)
    orders = gateway.client(
        httpx.ASGITransport(app=downstream.create_app(service)), base_url="http://orders"
    )
    app = shop.create_app(ws, orders, timeout=0.3, settle_after=SETTLE)
    async with in_process(app, "http://shop") as client:
        yield Rig(ws, clock, service, client)
    await orders.aclose()


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    body: dict[str, Any] = response.json()
    assert from_problem(body).envelope.code == code
    return body


async def test_an_order_is_placed_once_and_replayed(rig: Rig) -> None:
    first = await rig.order("ord-1")
    again = await rig.order("ord-1")
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    assert again.headers[REPLAYED_HEADER] == "true"
    assert first.json() == {"order_id": "ord-1", "total_cents": 2500, **ORDER}
    assert rig.service.orders[0]["reference"] == "acme/ord-1"
    assert rig.service.writes == 1


async def test_tenants_do_not_share_keys(rig: Rig) -> None:
    assert (await rig.order("k", tenant="acme")).json()["order_id"] == "ord-1"
    assert (await rig.order("k", tenant="globex")).json()["order_id"] == "ord-2"
    assert rig.service.writes == 2


async def test_a_rejected_postcode_can_be_corrected_under_the_same_key(rig: Rig) -> None:
    rejected = await rig.order("ord-2", {**ORDER, "postcode": "000000"})
    body = problem(rejected, 422, "INPUT_INVALID")
    assert (body["field"], body["side_effects"]) == ("postcode", "none")
    corrected = await rig.order("ord-2")
    assert corrected.status_code == 201
    assert rig.service.writes == 1


async def test_a_rejection_is_retried_inside_the_request(rig: Rig) -> None:
    rig.service.faults.append(downstream.Fault.REJECT)
    placed = await rig.order("ord-3")
    assert placed.status_code == 201
    status = await rig.ws.status("ord-3", scope="acme")
    assert status is not None
    assert [a.code for a in status.attempts if a.kind == "execution"] == ["TEMP_UNAVAILABLE", None]
    assert rig.service.writes == 1


async def test_a_timeout_is_outcome_unknown_and_does_not_run_again(rig: Rig) -> None:
    rig.service.faults.append(downstream.Fault.COMMIT_THEN_TIMEOUT)
    lost = await rig.order("ord-4")
    body = problem(lost, 504, "OUTCOME_UNKNOWN")
    assert (body["next_action"], body["side_effects"]) == ("reconcile", "unknown")
    assert rig.service.writes == 1  # the order exists; the shop just never heard back
    again = await rig.order("ord-4")
    if again.status_code == 201:  # the lookup, asked before any replay, found the order
        assert again.headers[REPLAYED_HEADER] == "true"
        assert again.json()["order_id"] == rig.service.orders[0]["order_id"]
    else:  # no inline lookup: the key waits for reconciliation
        problem(again, 504, "OUTCOME_UNKNOWN")
    assert rig.service.writes == 1


async def test_the_registered_lookups_ask_the_order_service(rig: Rig) -> None:
    rig.service.faults.extend([downstream.Fault.COMMIT_THEN_TIMEOUT, downstream.Fault.HANG])
    problem(await rig.order("landed"), 504, "OUTCOME_UNKNOWN")
    problem(await rig.order("lost", {**ORDER, "quantity": 3}), 504, "OUTCOME_UNKNOWN")
    lookup = rig.ws.tools["place_order"].spec.lookup
    assert lookup is not None
    landed = await rig.ws.status("landed", scope="acme")
    lost = await rig.ws.status("lost", scope="acme")
    found, absent = await lookup(landed), await lookup(lost)
    assert isinstance(found, Found)
    assert found.result.status_code is None  # replayed with the route's own 201
    assert found.result.body == {k: v for k, v in rig.service.orders[0].items() if k != "reference"}
    assert isinstance(absent, NotFound)


async def test_refunds_are_write_safe(rig: Rig) -> None:
    order_id = (await rig.order("ord-5")).json()["order_id"]
    first = await rig.refund("ref-1", order_id, 1000)
    again = await rig.refund("ref-1", order_id, 1000)
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    assert first.json() == {"refund_id": "ref-1", "order_id": order_id, "amount_cents": 1000}
    too_much = await rig.refund("ref-2", order_id, 5000)
    assert problem(too_much, 422, "INPUT_INVALID")["field"] == "amount_cents"
    reused = await rig.refund("ref-1", order_id, 900)
    problem(reused, 422, "KEY_REUSED")
    assert len(rig.service.refunds) == 1


async def test_concurrent_duplicates_place_one_order(rig: Rig) -> None:
    responses = await asyncio.gather(*(rig.order("burst") for _ in range(6)))
    assert {r.status_code for r in responses} <= {201, 409}
    assert len({r.content for r in responses if r.status_code == 201}) == 1
    assert rig.service.writes == 1


@pytest.mark.parametrize(
    ("headers", "body", "status"),
    [
        ({"X-Tenant": "acme"}, ORDER, 400),  # no key
        ({"Idempotency-Key": "k"}, ORDER, 422),  # no tenant
        ({"Idempotency-Key": "k", "X-Tenant": "Not A Slug"}, ORDER, 422),
        ({"Idempotency-Key": "x" * 300, "X-Tenant": "acme"}, ORDER, 400),
        ({"Idempotency-Key": "k", "X-Tenant": "acme"}, {**ORDER, "quantity": 0}, 422),
        ({"Idempotency-Key": "k", "X-Tenant": "acme"}, {**ORDER, "sku": "é" * 65}, 422),
    ],
)
async def test_bad_requests_are_problems_and_reach_nothing(
    rig: Rig, headers: dict[str, str], body: dict[str, Any], status: int
) -> None:
    response = await rig.client.post("/orders", json=body, headers=headers)
    problem(response, status, "INPUT_INVALID")
    assert rig.service.writes == 0


async def test_malformed_json_is_400(rig: Rig) -> None:
    headers = {"Idempotency-Key": "k", "X-Tenant": "acme", "Content-Type": "application/json"}
    response = await rig.client.post("/orders", content=b'{"sku": ', headers=headers)
    problem(response, 400, "INPUT_INVALID")
    assert rig.service.writes == 0


# -- end to end: both apps behind uvicorn on loopback ---------------------------------------------


@pytest.mark.slow
async def test_the_shop_over_loopback(make_ws: MakeWriteSafe) -> None:
    service = downstream.OrderService(stall_seconds=2.0)
    ws = make_ws()
    async with on_loopback(downstream.create_app(service)) as orders_url:
        orders = gateway.client(base_url=orders_url, timeout=0.3)  # the shop's lifespan closes it
        app = shop.create_app(ws, orders, timeout=5.0, settle_after=SETTLE)
        async with on_loopback(app) as shop_url, httpx.AsyncClient(base_url=shop_url) as client:
            key = '"8e03978e-40d5-43e8-bc93-6894a57f9324"'
            headers = {"Idempotency-Key": key, "X-Tenant": "acme"}
            first = await client.post("/orders", json=ORDER, headers=headers)
            again = await client.post("/orders", json=ORDER, headers=headers)
            assert first.status_code == again.status_code == 201
            assert first.content == again.content
            assert again.headers[REPLAYED_HEADER] == "true"

            service.faults.append(downstream.Fault.COMMIT_THEN_TIMEOUT)
            headers["Idempotency-Key"] = "t"
            problem(
                await client.post("/orders", json=ORDER, headers=headers), 504, "OUTCOME_UNKNOWN"
            )
            status = await ws.status("t", scope="acme")
    assert service.writes == 2
    assert status is not None
    [execution] = [a for a in status.attempts if a.kind == "execution"]
    assert execution.evidence is not None
    assert execution.evidence["exception"].endswith("ReadTimeout")  # the shop's httpx timeout
