"""The OpenAPI of guarded routes tells the truth: every answer a real app gives is documented, with
the media type and a schema it validates against, and every documented error status is given.

Regression: the `Idempotency-Key` header was documented `required: false` and `string | null`
though the route requires it, the 422 was FastAPI's `HTTPValidationError` in `application/json`
while the real answers are `application/problem+json`, and 400, 409 and 504 were missing.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from writesafe import ToolError, WriteSafe, WriteSafeError
from writesafe.contrib._route_openapi import KEY_PATTERN
from writesafe.contrib.fastapi import add_problem_handlers, idempotent_route
from writesafe.idempotency._header import parse_idempotency_key
from writesafe.ledger import ManualClock
from writesafe.reconciler import PROBLEM_MEDIA_TYPE

UNREACHABLE = "postgresql+asyncpg://postgres@127.0.0.1:1/test"


class Order(BaseModel):
    sku: str


class Placed(BaseModel):
    order_id: str
    sku: str


class App:
    """A FastAPI app with one guarded route whose endpoint fails on demand, by sku."""

    def __init__(self, ws: WriteSafe, name: str = "create_order", **options: Any) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.app = FastAPI()
        add_problem_handlers(self.app)

        @self.app.post("/orders", status_code=201)
        @idempotent_route(ws, name, **options)
        async def create_order(order: Order) -> Placed:
            self.started.set()
            if order.sku == "slow":
                await self.gate.wait()
            if order.sku == "boom":
                raise RuntimeError("the endpoint broke")
            if order.sku == "busy":
                raise ToolError("DEPENDENCY_BUSY", "stock service busy", retry_after_ms=1_000)
            return Placed(order_id="o-1", sku=order.sku)

        @self.app.get("/orders/{order_id}")
        async def read_order(order_id: int) -> Placed:
            return Placed(order_id=str(order_id), sku="A1")

    def client(self) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        return httpx.AsyncClient(transport=transport, base_url="http://shop")


def key(value: str) -> dict[str, str]:
    return {"Idempotency-Key": value}


def validate(document: dict[str, Any], schema: dict[str, Any], value: object) -> None:
    """Validate `value` against `schema`, a part of `document` whose refs point into it."""
    Draft202012Validator({**schema, "components": document["components"]}).validate(value)


def check(document: dict[str, Any], method: str, path: str, response: httpx.Response) -> None:
    """`response` is documented for the operation: its status, media type, body and headers."""
    operation = document["paths"][path][method]
    documented = operation["responses"].get(str(response.status_code))
    assert documented is not None, (response.status_code, response.text)
    media = response.headers["content-type"].split(";")[0]
    assert media in documented["content"], (response.status_code, media)
    validate(document, documented["content"][media]["schema"], response.json())
    for name, header in documented.get("headers", {}).items():
        if header.get("required") or name in response.headers:
            validate(document, header["schema"], response.headers[name])


@pytest.fixture
async def ws(tmp_path: Path) -> AsyncIterator[WriteSafe]:
    made = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}", clock=ManualClock())
    yield made
    await made.close()


async def answers(ws: WriteSafe) -> tuple[dict[str, Any], list[httpx.Response]]:
    """The app's document, and a real answer of its guarded route for every status it gives."""
    shop = App(ws, timeout=0.2, wait_timeout=0.05)
    timing_out = App(ws, "create_order_slowly", timeout=0.05)
    async with shop.client() as client, timing_out.client() as hanging:
        collected = [
            await client.post("/orders", json={"sku": "A1"}, headers=key("ok")),
            await client.post("/orders", json={"sku": "A1"}, headers=key("ok")),  # replayed
            await client.post("/orders", json={"sku": "A1"}),  # 400: no key
            await client.post("/orders", json={"sku": "A1"}, headers=key("x" * 256)),  # 400
            await client.post("/orders", content=b"{", headers=key("j")),  # 400: not JSON
            await client.post("/orders", json={"sku": "B2"}, headers=key("ok")),  # 422 reused
            await client.post("/orders", json={"qty": 1}, headers=key("v")),  # 422 invalid
            await client.post("/orders", json={"sku": "boom"}, headers=key("b")),  # 502
            await client.post("/orders", json={"sku": "busy"}, headers=key("r")),  # 503
            await hanging.post("/orders", json={"sku": "slow"}, headers=key("t")),  # 504
        ]
        first = asyncio.create_task(client.post("/orders", json={"sku": "slow"}, headers=key("s")))
        await shop.started.wait()
        collected.append(await client.post("/orders", json={"sku": "slow"}, headers=key("s")))
        shop.gate.set()
        collected.append(await first)
        timing_out.gate.set()
    down = WriteSafe(UNREACHABLE)
    try:
        async with App(down).client() as client:  # 503 TEMP_UNAVAILABLE
            collected.append(await client.post("/orders", json={"sku": "A1"}, headers=key("d")))
    finally:
        await down.close()
    return shop.app.openapi(), collected


async def test_every_answer_of_a_guarded_route_is_documented_and_every_status_given(
    ws: WriteSafe,
) -> None:
    document, collected = await answers(ws)
    for response in collected:
        check(document, "post", "/orders", response)
    codes = {r.json()["code"] for r in collected if r.status_code >= 400}
    assert codes == {
        "INPUT_INVALID",
        "KEY_REUSED",
        "IN_PROGRESS",
        "UNKNOWN_ERROR",
        "RETRY_EXHAUSTED",
        "TEMP_UNAVAILABLE",
        "OUTCOME_UNKNOWN",
    }
    documented = set(document["paths"]["/orders"]["post"]["responses"])
    assert documented == {str(r.status_code) for r in collected}
    assert {r.headers["content-type"] for r in collected if r.status_code >= 400} == {
        PROBLEM_MEDIA_TYPE
    }


def test_the_key_header_is_required_and_a_string_unless_the_route_makes_it_optional(
    ws: WriteSafe,
) -> None:
    document = App(ws).app.openapi()
    header = {p["name"]: p for p in document["paths"]["/orders"]["post"]["parameters"]}
    assert header["Idempotency-Key"]["required"] is True
    assert header["Idempotency-Key"]["schema"]["type"] == "string"
    optional = App(ws, "optional", required=False).app.openapi()
    parameters = optional["paths"]["/orders"]["post"]["parameters"]
    assert [p["required"] for p in parameters if p["name"] == "Idempotency-Key"] == [False]


async def test_unguarded_routes_document_their_validation_problem_too(ws: WriteSafe) -> None:
    shop = App(ws)
    document = shop.app.openapi()
    async with shop.client() as client:
        invalid = await client.get("/orders/not-a-number")
        ok = await client.get("/orders/7")
    assert invalid.status_code == 422
    for response in (invalid, ok):
        check(document, "get", "/orders/{order_id}", response)
    assert "HTTPValidationError" not in document["components"]["schemas"]
    assert "Idempotency-Key" not in str(document["paths"]["/orders/{order_id}"])


@given(
    st.text(st.characters(min_codepoint=0x1F, max_codepoint=0x80), max_size=260)
    | st.text(st.sampled_from('ab "\\'), max_size=8).map(lambda s: f'"{s}"')
    | st.builds(lambda n, q: f'"{"y" * n}"' if q else "y" * n, st.integers(250, 260), st.booleans())
)
def test_the_documented_key_pattern_is_exactly_what_the_guard_accepts(value: str) -> None:
    try:
        parse_idempotency_key([value], required=True)
    except WriteSafeError:
        accepted = False
    else:
        accepted = True
    # The header's surrounding blanks are not part of its value (HTTP strips them).
    assert (re.fullmatch(KEY_PATTERN, value.strip(" \t")) is not None) is accepted
