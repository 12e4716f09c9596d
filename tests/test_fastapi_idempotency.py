"""The FastAPI Idempotency-Key integration, through real HTTP (httpx against the ASGI app), on the
embedded default and on PostgreSQL (+Redis)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import httpx
import pytest
from fastapi import FastAPI, Form, Header, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from tests.conftest import MakeWriteSafe
from writesafe import Found, ToolError, WriteSafe
from writesafe.contrib.fastapi import REPLAYED_HEADER, add_problem_handlers, idempotent_route
from writesafe.ledger import ManualClock
from writesafe.reconciler import PROBLEM_MEDIA_TYPE, from_problem


class Order(BaseModel):
    sku: str
    quantity: int = 1
    note: str = ""


class Placed(BaseModel):
    order_id: str
    sku: str
    quantity: int
    note: str
    price: float
    internal: str | None = None


def tenant(x_tenant: Annotated[str, Header()] = "tenant-a") -> str:
    return x_tenant


class Shop:
    """A FastAPI app whose endpoints record each execution of their write in `effects`."""

    def __init__(self, ws: WriteSafe, **options: Any) -> None:
        self.effects: list[str] = []
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()
        app = FastAPI()
        add_problem_handlers(app)

        @app.post("/orders", status_code=201, response_model_exclude_none=True)
        @idempotent_route(ws, "create_order", scope=tenant, **options)
        async def create_order(order: Order) -> Placed:
            self.started.set()
            if self.gate is not None:
                await self.gate.wait()
            if order.sku == "unknown":
                raise HTTPException(404, "no such sku")
            if order.sku == "busy":
                raise ToolError("DEPENDENCY_BUSY", "stock service busy", retry_after_ms=7_000)
            self.effects.append(order.sku)
            return Placed(order_id=f"o-{len(self.effects)}", price=12.5, **order.model_dump())

        @app.post("/orders/{order_id}/refunds")
        @idempotent_route(ws, "refund", scope=tenant)
        async def refund(order_id: str, amount: int) -> JSONResponse:
            self.effects.append(f"refund {order_id} {amount}")
            return JSONResponse({"refund": len(self.effects), "order": order_id}, 202)

        @app.delete("/orders/{order_id}", status_code=204)
        @idempotent_route(ws, "cancel")
        async def cancel(order_id: str) -> None:
            self.effects.append(f"cancel {order_id}")

        @app.post("/subscriptions")
        @idempotent_route(ws, "subscribe")
        async def subscribe(email: Annotated[str, Form()]) -> dict[str, str]:
            self.effects.append(email)
            return {"subscribed": email}

        @app.post("/notes")
        @idempotent_route(ws, "note", required=False)
        async def note(text: str) -> dict[str, str]:
            self.effects.append(text)
            return {"text": text}

        self.app = app

    def client(self) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        return httpx.AsyncClient(transport=transport, base_url="http://shop")


@pytest.fixture
async def shop(make_ws: MakeWriteSafe) -> Shop:
    return Shop(make_ws())


@pytest.fixture
async def client(shop: Shop) -> AsyncIterator[httpx.AsyncClient]:
    async with shop.client() as client:
        yield client


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """A problem+json answer whose body reads back to a valid envelope of `code`."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert from_problem(body).envelope.code == code
    return body


ORDER = {"sku": "A1", "quantity": 2, "note": "gift wrap ✓ — für Oma 🎁"}


async def test_a_retry_replays_the_stored_status_and_body_exactly(
    client: httpx.AsyncClient, shop: Shop
) -> None:
    first = await client.post("/orders", json=ORDER, headers=key('"8e03978e-40d5"'))
    # The same key sent bare, the body's keys in another order: the same request.
    reordered = dict(reversed(list(ORDER.items())))
    again = await client.post("/orders", json=reordered, headers=key("8e03978e-40d5"))
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    assert first.json() == {**ORDER, "order_id": "o-1", "price": 12.5}  # exclude_none applied
    assert REPLAYED_HEADER.lower() not in first.headers
    assert again.headers[REPLAYED_HEADER] == "true"
    assert shop.effects == ["A1"]


async def test_an_endpoint_response_and_an_empty_204_replay_exactly(
    client: httpx.AsyncClient, shop: Shop
) -> None:
    refunds = [
        await client.post("/orders/o-9/refunds", params={"amount": 5}, headers=key("r1"))
        for _ in range(2)
    ]
    assert [r.status_code for r in refunds] == [202, 202]
    assert refunds[0].content == refunds[1].content == b'{"refund":1,"order":"o-9"}'
    cancels = [await client.delete("/orders/o-9", headers=key("c1")) for _ in range(2)]
    assert [c.status_code for c in cancels] == [204, 204]
    assert cancels[0].content == cancels[1].content == b""
    assert cancels[1].headers[REPLAYED_HEADER] == "true"
    assert shop.effects == ["refund o-9 5", "cancel o-9"]


async def test_form_bodies_are_fingerprinted_too(client: httpx.AsyncClient, shop: Shop) -> None:
    first = await client.post("/subscriptions", data={"email": "a@example.org"}, headers=key("f"))
    again = await client.post("/subscriptions", data={"email": "a@example.org"}, headers=key("f"))
    other = await client.post("/subscriptions", data={"email": "b@example.org"}, headers=key("f"))
    assert first.content == again.content
    assert again.headers[REPLAYED_HEADER] == "true"
    assert_problem(other, 422, "KEY_REUSED")
    assert shop.effects == ["a@example.org"]


async def test_path_and_query_are_part_of_the_payload(
    client: httpx.AsyncClient, shop: Shop
) -> None:
    ok = await client.post("/orders/ö-1/refunds", params={"amount": 5}, headers=key("r2"))
    assert ok.status_code == 202
    assert ok.json() == {"refund": 1, "order": "ö-1"}
    other_order = await client.post("/orders/ö-2/refunds", params={"amount": 5}, headers=key("r2"))
    assert_problem(other_order, 422, "KEY_REUSED")
    other_amount = await client.post("/orders/ö-1/refunds", params={"amount": 6}, headers=key("r2"))
    assert_problem(other_amount, 422, "KEY_REUSED")
    assert shop.effects == ["refund ö-1 5"]


async def test_a_missing_key_is_400_and_nothing_runs(client: httpx.AsyncClient, shop: Shop) -> None:
    body = assert_problem(await client.post("/orders", json=ORDER), 400, "INPUT_INVALID")
    assert body["field"] == "idempotency_key"
    assert body["side_effects"] == "none"
    assert shop.effects == []


async def test_an_optional_key_may_be_left_out(client: httpx.AsyncClient, shop: Shop) -> None:
    unguarded = [await client.post("/notes", params={"text": "hi"}) for _ in range(2)]
    guarded = [await client.post("/notes", params={"text": "yo"}, headers=key("n1")) for _ in "ab"]
    assert [r.status_code for r in unguarded + guarded] == [200, 200, 200, 200]
    assert guarded[1].headers[REPLAYED_HEADER] == "true"
    assert shop.effects == ["hi", "hi", "yo"]


async def test_the_same_key_with_another_payload_is_422(
    client: httpx.AsyncClient, shop: Shop
) -> None:
    assert (await client.post("/orders", json=ORDER, headers=key("k1"))).status_code == 201
    changed = await client.post("/orders", json={**ORDER, "quantity": 3}, headers=key("k1"))
    body = assert_problem(changed, 422, "KEY_REUSED")
    assert body["field"] == "idempotency_key"
    assert shop.effects == ["A1"]


async def test_a_key_still_in_flight_is_409_with_retry_after(make_ws: MakeWriteSafe) -> None:
    shop = Shop(make_ws(), wait_timeout=0.05)
    shop.gate = asyncio.Event()
    async with shop.client() as client:
        first = asyncio.create_task(client.post("/orders", json=ORDER, headers=key("slow")))
        await shop.started.wait()
        second = await client.post("/orders", json=ORDER, headers=key("slow"))
        body = assert_problem(second, 409, "IN_PROGRESS")
        assert int(second.headers["Retry-After"]) >= 1
        assert body["retryable"] is True
        shop.gate.set()
        assert (await first).status_code == 201
        third = await client.post("/orders", json=ORDER, headers=key("slow"))
        assert third.status_code == 201
        assert third.headers[REPLAYED_HEADER] == "true"
    assert shop.effects == ["A1"]


async def test_an_in_flight_duplicate_is_409_at_once_by_default(make_ws: MakeWriteSafe) -> None:
    """The IETF draft's answer: the route asks for no wait, so the WriteSafe's own (a minute,
    which its Python callers would wait) does not hold the duplicate; the first is held until
    the duplicate has its answer, so a duplicate that waited would never get one in time."""
    shop = Shop(make_ws(wait_timeout=60.0))
    shop.gate = asyncio.Event()
    async with shop.client() as client:
        first = asyncio.create_task(client.post("/orders", json=ORDER, headers=key("now")))
        await shop.started.wait()
        second = client.post("/orders", json=ORDER, headers=key("now"))
        try:
            answer = await asyncio.wait_for(second, timeout=30)
        finally:
            shop.gate.set()
        assert_problem(answer, 409, "IN_PROGRESS")
        assert (await first).status_code == 201
    assert shop.effects == ["A1"]


async def test_two_workers_with_one_key_execute_once(make_ws: MakeWriteSafe) -> None:
    """Two app instances (own WriteSafe, own pools) meet only in the stores."""
    workers = [make_ws(), make_ws()]
    for ws in workers:
        await ws.start()  # one at a time: concurrent auto-migration of a new schema races
    shops = [Shop(ws, wait_timeout=0.05) for ws in workers]
    gate = asyncio.Event()
    for shop in shops:
        shop.gate = gate
    async with shops[0].client() as one, shops[1].client() as two:
        first = asyncio.create_task(one.post("/orders", json=ORDER, headers=key("dup")))
        await shops[0].started.wait()
        second = await two.post("/orders", json=ORDER, headers=key("dup"))
        assert_problem(second, 409, "IN_PROGRESS")
        gate.set()
        assert (await first).status_code == 201
        replay = await two.post("/orders", json=ORDER, headers=key("dup"))
    assert replay.status_code == 201
    assert replay.headers[REPLAYED_HEADER] == "true"
    assert replay.content == (await first).content
    assert shops[0].effects + shops[1].effects == ["A1"]


async def test_concurrent_duplicates_get_one_effect_and_the_replay_or_409(
    client: httpx.AsyncClient, shop: Shop
) -> None:
    responses = await asyncio.gather(
        *(client.post("/orders", json=ORDER, headers=key("burst")) for _ in range(8))
    )
    executed = [r for r in responses if r.status_code == 201 and REPLAYED_HEADER not in r.headers]
    others = [r for r in responses if r not in executed]
    assert len(executed) == 1, [(r.status_code, r.headers, r.text) for r in responses]
    for response in others:
        if response.status_code == 201:
            assert response.content == executed[0].content
        else:
            assert_problem(response, 409, "IN_PROGRESS")
    assert shop.effects == ["A1"]


async def test_scope_comes_from_the_dependency(client: httpx.AsyncClient, shop: Shop) -> None:
    a = await client.post("/orders", json=ORDER, headers={**key("k"), "X-Tenant": "tenant-a"})
    b = await client.post("/orders", json=ORDER, headers={**key("k"), "X-Tenant": "tenant-b"})
    assert a.status_code == b.status_code == 201
    assert REPLAYED_HEADER not in b.headers
    assert (a.json()["order_id"], b.json()["order_id"]) == ("o-1", "o-2")


async def test_failures_are_problems_and_replay_unchanged(
    client: httpx.AsyncClient, shop: Shop
) -> None:
    refused = await client.post("/orders", json={"sku": "unknown"}, headers=key("u"))
    body = assert_problem(refused, 404, "INPUT_INVALID")  # the endpoint's own status
    assert (body["message"], body["cause"]) == ("no such sku", "http_404")
    assert body["operation"]["status"] == "failed"
    again = await client.post("/orders", json={"sku": "unknown"}, headers=key("u"))
    assert (again.status_code, again.content) == (404, refused.content)


async def test_retryable_failures_are_retried_inside_the_request(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(clock=ManualClock())  # the stated 7 s between executions pass at once
    shop = Shop(ws)
    async with shop.client() as client:
        busy = await client.post("/orders", json={"sku": "busy"}, headers=key("b"))
    body = assert_problem(busy, 503, "RETRY_EXHAUSTED")
    assert body["operation"]["attempt"] == 3
    status = await ws.status("b", scope="tenant-a")
    assert status is not None
    assert [a.code for a in status.attempts] == ["DEPENDENCY_BUSY"] * 3


async def test_a_timeout_is_outcome_unknown_and_never_runs_twice(make_ws: MakeWriteSafe) -> None:
    shop = Shop(make_ws(), timeout=0.05)
    shop.gate = asyncio.Event()  # never set: the endpoint hangs past its timeout
    async with shop.client() as client:
        responses = [await client.post("/orders", json=ORDER, headers=key("t")) for _ in "ab"]
    for response in responses:
        body = assert_problem(response, 504, "OUTCOME_UNKNOWN")
        assert body["next_action"] == "reconcile"
        assert body["side_effects"] == "unknown"
    assert shop.effects == []


@pytest.mark.parametrize(
    "header",
    [
        b"",
        b'""',
        b"x" * 256,
        b'"' + b"x" * 256 + b'"',
        b"caf\xc3\xa9",  # UTF-8 on the wire: the draft's sf-string is ASCII
        b'"caf\xc3\xa9"',
        b"two words",
        b'"unterminated',
        b'"bad \\escape"',
        b'"a"trailing',
        b"tab\there",
    ],
)
async def test_bad_keys_are_400_problems(
    client: httpx.AsyncClient, shop: Shop, header: bytes
) -> None:
    response = await client.post("/orders", json=ORDER, headers=[(b"Idempotency-Key", header)])
    body = assert_problem(response, 400, "INPUT_INVALID")
    assert body["field"] == "idempotency_key"
    assert shop.effects == []


async def test_two_key_headers_are_400(client: httpx.AsyncClient, shop: Shop) -> None:
    headers = [(b"Idempotency-Key", b"a"), (b"Idempotency-Key", b"b")]
    assert_problem(await client.post("/orders", json=ORDER, headers=headers), 400, "INPUT_INVALID")
    assert shop.effects == []


async def test_quoted_keys_unescape(client: httpx.AsyncClient, shop: Shop) -> None:
    quoted = await client.post("/orders", json=ORDER, headers=key(r'"a \"quoted\" key"'))
    bare = await client.post("/orders", json=ORDER, headers=key('"a \\"quoted\\" key"'))
    assert quoted.status_code == bare.status_code == 201
    assert bare.headers[REPLAYED_HEADER] == "true"
    assert shop.effects == ["A1"]


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b'{"sku": "A1",', 400, "body"),
        (b"\xff\xfe not utf-8", 400, "body"),
        (b'{"sku": 5}', 422, "sku"),
        (b'{"quantity": 1}', 422, "sku"),
        (b"[]", 422, "body"),
        (b'{"sku": "A1", "quantity": "many"}', 422, "quantity"),
    ],
)
async def test_malformed_bodies_are_problems_and_record_nothing(
    client: httpx.AsyncClient, shop: Shop, body: bytes, status: int, field: str
) -> None:
    headers = {**key("m"), "Content-Type": "application/json"}
    response = await client.post("/orders", content=body, headers=headers)
    problem = assert_problem(response, status, "INPUT_INVALID")
    assert problem["field"] == field
    # Nothing was recorded under the key: a corrected request runs normally.
    fixed = await client.post("/orders", json=ORDER, headers=key("m"))
    assert fixed.status_code == 201
    assert REPLAYED_HEADER not in fixed.headers


async def test_status_reads_the_route_operation(
    client: httpx.AsyncClient, shop: Shop, make_ws: MakeWriteSafe
) -> None:
    response = await client.post("/orders", json=ORDER, headers=key("s1"))
    status = await make_ws().status("s1", scope="tenant-a")
    assert status is not None
    assert status.status == "succeeded"
    assert status.tool == "create_order"
    assert status.result == {"status_code": 201, "body": response.json()}


def test_openapi_documents_the_header_and_keeps_the_model(shop: Shop) -> None:
    operation = shop.app.openapi()["paths"]["/orders"]["post"]
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert "Idempotency-Key" in parameters
    assert "x-tenant" in parameters
    assert operation["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Placed"
    }
    assert "writesafe_request" not in json.dumps(operation)


async def test_a_lookup_finds_the_route_body(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    seen: list[object] = []

    async def find(operation: object) -> Found:
        seen.append(operation)
        return Found(Placed(order_id="o-7", sku="A1", quantity=1, note="", price=1.0))

    @idempotent_route(ws, "with_lookup", lookup=find)
    async def endpoint() -> None: ...

    lookup: Callable[[object], Any] | None = ws.tools["with_lookup"].spec.lookup
    assert lookup is not None
    found = await lookup("op")
    assert seen == ["op"]
    assert isinstance(found, Found)
    assert found.result.status_code is None  # rendered with the route's own status
    assert found.result.body["order_id"] == "o-7"


def test_reserved_parameter_names_and_sync_endpoints_are_refused(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    async def clash(writesafe_request: str) -> None: ...

    def sync() -> None: ...

    with pytest.raises(TypeError, match="reserved"):
        idempotent_route(ws, "clash")(clash)
    with pytest.raises(TypeError, match="async"):
        idempotent_route(ws, "sync")(sync)  # type: ignore[arg-type]
