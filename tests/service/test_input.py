"""Bad input through real HTTP gets a 4xx problem+json and changes nothing: never a 500.

Oversized keys and bodies, malformed JSON, unknown fields, wrong types, unicode, unknown routes
and methods, on every backend and through both transports.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.service.support import Service, assert_problem, on_the_module_loop, seed
from writesafe import MAX_KEY_LENGTH
from writesafe.ledger import ApiKeys, Role, Status
from writesafe.service import ServiceSettings, create_api_key

pytestmark = on_the_module_loop
OPERATOR, READER = Role.OPERATOR, Role.READER
RESOLVE = "/v1/operations/stuck/resolve"
GOOD = {"outcome": "failed", "reason": "checked with the shop"}


async def test_oversized_and_unusable_keys(service: Service) -> None:
    tenant_a = service.scopes[0]
    async with service.as_(tenant_a, READER) as client:
        too_long = await client.get(f"/v1/operations/{'k' * (MAX_KEY_LENGTH + 1)}")
        control = await client.get("/v1/operations/bad%00key")
        padded = await client.get("/v1/operations/%20padded%20")
        longest = await client.get(f"/v1/operations/{'k' * MAX_KEY_LENGTH}")
    body = assert_problem(too_long, 422, "INPUT_INVALID")
    assert body["field"] == "key"
    assert body["errors"][0]["location"] == "path"
    # A key the guard would never accept names no operation: 404, like any unknown key.
    assert_problem(control, 404)
    assert_problem(padded, 404)
    assert_problem(longest, 404)


async def test_unicode_keys_and_tools(service: Service) -> None:
    tenant_a = service.scopes[0]
    tool = f"заказ·送信·{tenant_a}"

    @service.ws.tool(tool)
    async def submit(order: str) -> str:
        return order[::-1]

    key = "ключ-🔑-鍵"
    await submit("αβγ", idempotency_key=key, scope=tenant_a)
    async with service.as_(tenant_a, READER) as client:
        found = await client.get(f"/v1/operations/{key}")
        listed = await client.get("/v1/operations", params={"tool": tool})
        surrogate = await client.get("/v1/operations/%ED%A0%80")  # UTF-8 of a lone surrogate
    assert found.status_code == 200
    assert (found.json()["key"], found.json()["result"]) == (key, "γβα")
    assert [op["key"] for op in listed.json()["items"]] == [key]
    assert_problem(surrogate, 404)


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 501},
        {"limit": "ten"},
        {"status": "lost"},
        {"older_than": -1},
        {"older_than": 10**12},
        {"tool": "t" * 256},
        {"cursor": "not a cursor!"},
        {"cursor": "123"},
        {"cursor": "123_-1"},
        {"cursor": "999999999999999999_1"},  # past the year 9999
        {"cursor": "1_9999999999999999999"},  # past BIGINT
    ],
)
async def test_bad_listing_parameters(service: Service, params: dict[str, Any]) -> None:
    tenant_a = service.scopes[0]
    async with service.as_(tenant_a, READER) as client:
        response = await client.get("/v1/operations", params=params)
    body = assert_problem(response, 422, "INPUT_INVALID")
    assert body["field"].split(".")[0] == next(iter(params))
    assert body["side_effects"] == "none"


async def test_a_single_valued_parameter_given_twice_is_refused(service: Service) -> None:
    tenant_a = service.scopes[0]
    async with service.as_(tenant_a, READER) as client:
        twice = await client.get("/v1/operations", params=[("limit", 5), ("limit", 6)])
        statuses = await client.get(
            "/v1/operations", params=[("status", "failed"), ("status", "succeeded")]
        )
    assert assert_problem(twice, 422, "INPUT_INVALID")["field"] == "limit"
    assert statuses.status_code == 200


async def test_a_tool_filter_no_tool_can_have_matches_nothing(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with service.as_(tenant_a, READER) as client:
        response = await client.get("/v1/operations", params={"tool": "nul\x00tool"})
    assert response.json() == {"items": [], "next_cursor": None}


@pytest.mark.parametrize(
    ("content", "headers", "field"),
    [
        (b'{"outcome": "failed", "reason": ', {"content-type": "application/json"}, "body"),
        (b"\xff\xfe not utf-8", {"content-type": "application/json"}, "body"),
        (b'{"outcome": "failed"}', {"content-type": "application/json"}, "/reason"),
        (b'{"outcome": "maybe", "reason": "x"}', {"content-type": "application/json"}, "/outcome"),
        (b'{"outcome": "failed", "reason": "   "}', {"content-type": "application/json"}, None),
        (
            b'{"outcome": "failed", "reason": "a\\u0000b"}',
            {"content-type": "application/json"},
            None,
        ),
        (b'{"outcome": "failed", "reason": "\\ud800"}', {"content-type": "application/json"}, None),
        (b'{"outcome": "failed", "reason": "x", "result": 1}', {}, None),  # only succeeded has one
        (b'{"outcome": "failed", "reason": "x", "actor": "me"}', {}, None),  # unknown field
        (b'{"outcome": "succeeded", "reason": "x", "result": "\\udfff"}', {}, None),
        (b"[" * 5_000 + b"]" * 5_000, {"content-type": "application/json"}, None),
        (b'{"outcome": "failed", "reason": "x"}', {"content-type": "text/plain"}, None),
        (b"outcome=failed&reason=x", {"content-type": "application/x-www-form-urlencoded"}, None),
        (b"", {"content-type": "application/json"}, None),
        (b'"just a string"', {"content-type": "application/json"}, None),
    ],
)
async def test_bad_bodies_change_nothing(
    service: Service, content: bytes, headers: dict[str, str], field: str | None
) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with service.as_(tenant_a, OPERATOR) as client:
        response = await client.post(
            RESOLVE, content=content, headers={"content-type": "application/json", **headers}
        )
        after = (await client.get("/v1/operations/stuck")).json()
    body = assert_problem(response, 422, "INPUT_INVALID")
    if field is not None:
        assert body["field"] == field
    assert body["errors"]
    assert after["status"] == Status.NEEDS_ATTENTION
    assert [a["kind"] for a in after["attempts"]] == ["execution"]


async def test_deeply_nested_result_is_refused(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    nested: Any = "x"
    for _ in range(300):
        nested = {"n": nested}
    async with service.as_(tenant_a, OPERATOR) as client:
        response = await client.post(
            RESOLVE, json={"outcome": "succeeded", "reason": "deep", "result": nested}
        )
    assert response.status_code in (200, 422), response.text
    assert response.headers["content-type"].startswith(
        "application/json" if response.status_code == 200 else "application/problem+json"
    )


async def test_unicode_reason_is_kept(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    reason = "Überprüft: 注文は存在しない — 🧾 ticket №7\nsecond line"
    async with service.as_(tenant_a, OPERATOR) as client:
        response = await client.post(RESOLVE, json={"outcome": "failed", "reason": reason})
    assert response.status_code == 200, response.text
    assert response.json()["attempts"][-1]["reason"] == reason


async def test_bodies_over_the_limit_are_refused_before_any_route(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    limit = ServiceSettings().max_body_bytes
    padding = "x" * limit
    big = {"outcome": "failed", "reason": "x", "evidence": {"pad": padding}}

    async def chunks() -> Any:
        for _ in range(4):
            yield b" " * (limit // 2)

    async with service.as_(tenant_a, OPERATOR) as client:
        declared = await client.post(RESOLVE, json=big)
        streamed = await client.post(RESOLVE, content=chunks())
        on_get = await client.request("GET", "/v1/operations", content=b"x" * (limit + 1))
        reconcile = await client.post("/v1/reconcile", content=b"{" + b" " * limit + b"}")
        after = (await client.get("/v1/operations/stuck")).json()
    for response in (declared, streamed, on_get, reconcile):
        assert_problem(response, 413)
    assert after["status"] == Status.NEEDS_ATTENTION


async def test_unknown_fields_in_reconcile_bounds(service: Service) -> None:
    tenant_a = service.scopes[0]
    async with service.as_(tenant_a, OPERATOR) as client:
        unknown = await client.post("/v1/reconcile", json={"limit": 5, "scope": "tenant-b"})
        negative = await client.post("/v1/reconcile", json={"limit": 0})
        huge = await client.post("/v1/reconcile", json={"limit": 10**30})
        nan = await client.post(
            "/v1/reconcile",
            content=b'{"older_than": NaN}',
            headers={"content-type": "application/json"},
        )
    assert assert_problem(unknown, 422, "INPUT_INVALID")["field"] == "/scope"
    assert assert_problem(negative, 422, "INPUT_INVALID")["field"] == "/limit"
    assert_problem(huge, 422, "INPUT_INVALID")
    assert_problem(nan, 422, "INPUT_INVALID")


async def test_unknown_routes_and_methods(service: Service) -> None:
    tenant_a = service.scopes[0]
    async with service.as_(tenant_a, OPERATOR) as client:
        nowhere = await client.get("/v2/operations")
        wrong_method = await client.delete("/v1/operations/ok")
        post_list = await client.post("/v1/operations", json={})
        get_reconcile = await client.get("/v1/reconcile")
    assert_problem(nowhere, 404)
    for response in (wrong_method, post_list):
        assert_problem(response, 405)
        assert "GET" in response.headers["allow"]
    assert_problem(get_reconcile, 405)
    assert response.headers["allow"]


async def test_odd_authorization_headers(service: Service) -> None:
    tenant_a = service.scopes[0]
    token = service.tokens[tenant_a, READER]
    variants = {
        "lowercase scheme": f"bearer {token}",
        "extra spaces": f"Bearer   {token}",
    }
    for label, value in variants.items():
        async with service.client(headers={"Authorization": value}) as client:
            assert (await client.get("/v1/operations")).status_code == 200, label
    refused = [f"Bearer {token}x", f"Bearer {token[:-1]}", "Bearer", f"Token {token}"]
    for value in refused:
        async with service.client(headers={"Authorization": value}) as client:
            assert_problem(await client.get("/v1/operations"), 401, "AUTH_REQUIRED")
    # A non-ASCII header value (sent as Latin-1 bytes) is refused, not a crash.
    async with service.client() as client:
        raw = await client.get(
            "/v1/operations", headers=httpx.Headers([(b"Authorization", "Bearer ключ".encode())])
        )
    assert_problem(raw, 401, "AUTH_REQUIRED")


async def test_a_key_with_the_longest_name_can_resolve(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    _, token = await create_api_key(
        ApiKeys(service.ws.ledger.engine), scope=tenant_a, role=OPERATOR, name="n" * MAX_KEY_LENGTH
    )
    async with service.client(token) as client:
        response = await client.post(RESOLVE, json=GOOD)
    assert response.status_code == 200, response.text
    actor = response.json()["attempts"][-1]["actor"]
    assert actor.startswith("api-key:")
    assert len(actor) == MAX_KEY_LENGTH
