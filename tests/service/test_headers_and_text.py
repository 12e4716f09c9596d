"""Every JSON answer says `nosniff` and `no-store`; hidden characters never reach the record.

A status or a problem is one tenant's data: no cache keeps it and no browser sniffs another type
into it. Control and format characters (Unicode Cc and Cf: U+202E reverses the text after it,
U+200B hides in it) are refused in what operators write and in every key, so the console and the
envelopes callers get show the text as it was meant.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import MakeWriteSafe
from tests.service.support import Service, assert_problem, on_the_module_loop, seed
from writesafe import WriteSafe, WriteSafeError
from writesafe.idempotency._keys import HIDDEN_CATEGORIES, hidden_characters, validate_key
from writesafe.ledger import Role, Status
from writesafe.service import create_app


def _assert_json_headers(response: httpx.Response) -> None:
    assert response.headers["content-type"].startswith(("application/json", "application/problem"))
    assert response.headers["x-content-type-options"] == "nosniff", response.request.url
    assert response.headers["cache-control"] == "no-store", response.request.url


@on_the_module_loop
async def test_every_json_answer_is_nosniff_and_no_store(service: Service) -> None:
    tenant = service.scopes[0]
    await seed(service.ws, tenant)
    async with service.as_(tenant, Role.READER) as client:
        answers = [
            await client.get("/v1/operations/ok"),
            await client.get("/v1/operations/ok/attempts"),
            await client.get("/v1/operations"),
            await client.get("/v1/operations/missing"),  # 404
            await client.get("/v1/operations", params={"limit": "x"}),  # 422
            await client.post("/v1/operations/stuck/resolve", json={}),  # 403
            await client.delete("/v1/operations/ok"),  # 405
            await client.get("/openapi.json"),
            await client.get("/healthz"),
        ]
    async with service.client("wsk_0123456789ab_" + "x" * 43) as stranger:
        answers.append(await stranger.get("/v1/operations"))  # 401
    assert [r.status_code for r in answers] == [200, 200, 200, 404, 422, 403, 405, 200, 200, 401]
    for response in answers:
        _assert_json_headers(response)


async def test_an_internal_error_is_nosniff_and_no_store_too(make_ws: MakeWriteSafe) -> None:
    app = create_app(make_ws())

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a bug")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://service.test") as client:
        response = await client.get("/boom")
    assert_problem(response, 500)
    _assert_json_headers(response)


HIDDEN = ["\u202e", "\u200b", "\u2066", "\ufeff", "\x1b", "\x07", "\u00ad"]


@pytest.mark.parametrize("char", HIDDEN)
def test_keys_and_names_with_hidden_characters_are_refused(char: str) -> None:
    for field in ("idempotency_key", "scope", "name"):
        with pytest.raises(WriteSafeError) as refused:
            validate_key(f"order{char}-7", field)
        assert refused.value.envelope.field == field
        assert f"U+{ord(char):04X}" in refused.value.envelope.message


def test_the_hidden_characters_are_this_pythons_control_and_format_characters() -> None:
    # Every Cc and Cf character of this Python's Unicode is refused, and nothing else it has
    # assigned: the table may only add characters a newer Unicode made hidden.
    hidden = re.compile(f"[{hidden_characters(allowed=chr(9))}]")
    for code in range(sys.maxunicode + 1):
        char, category = chr(code), unicodedata.category(chr(code))
        if char == chr(9):
            assert not hidden.match(char)
        elif category in HIDDEN_CATEGORIES:
            assert hidden.match(char), f"U+{code:04X} ({category}) is not refused"
        elif hidden.match(char):
            assert category == "Cn", f"U+{code:04X} ({category}) is refused"


@on_the_module_loop
@pytest.mark.parametrize("char", ["\u202e", "\u200b", "\x1b"])
async def test_a_reason_with_a_hidden_character_is_refused(service: Service, char: str) -> None:
    tenant = service.scopes[0]
    await seed(service.ws, tenant)
    body = {"outcome": "failed", "reason": f"checked{char} with the shop"}
    async with service.as_(tenant, Role.OPERATOR) as client:
        response = await client.post("/v1/operations/stuck/resolve", json=body)
    problem = assert_problem(response, 422, "INPUT_INVALID")
    assert problem["field"] == "reason"
    assert f"U+{ord(char):04X}" in problem["message"]
    stuck = await service.ws.ledger.get(tenant, "stuck")
    assert stuck is not None
    assert stuck.status is Status.NEEDS_ATTENTION  # nothing was changed


@on_the_module_loop
async def test_a_reason_may_have_lines(service: Service) -> None:
    tenant = service.scopes[0]
    await seed(service.ws, tenant)
    body = {"outcome": "failed", "reason": "checked with the shop:\r\n\tno such order"}
    async with service.as_(tenant, Role.OPERATOR) as client:
        response = await client.post("/v1/operations/stuck/resolve", json=body)
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "failed"


@on_the_module_loop
async def test_hidden_characters_are_refused_in_actors_and_never_name_an_operation(
    service: Service,
) -> None:
    ws: WriteSafe = service.ws
    tenant = service.scopes[0]
    await seed(ws, tenant)
    with pytest.raises(WriteSafeError) as actor:
        await ws.resolve(
            "stuck", scope=tenant, outcome="failed", reason="checked", actor="alice\u202e"
        )
    assert actor.value.envelope.field == "actor"
    with pytest.raises(WriteSafeError) as key:
        await ws.tools["submit_order"]({"n": 2}, idempotency_key="order\u200b2", scope=tenant)
    assert key.value.envelope.field == "idempotency_key"
    async with service.as_(tenant, Role.READER) as client:
        assert_problem(await client.get("/v1/operations/" + quote("ok\u202e")), 404)
