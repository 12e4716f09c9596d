"""Listing cursors are opaque and sealed to the tenant that got them; edited or foreign: 422."""

from __future__ import annotations

import base64
import re
import struct

import httpx
from pydantic import SecretStr

from tests.conftest import MakeWriteSafe
from tests.service.support import (
    SCOPES,
    Service,
    assert_problem,
    issue_keys,
    on_the_module_loop,
    served,
)
from writesafe import WriteSafe
from writesafe.ledger import Role
from writesafe.service import ServiceSettings, create_app

A = SCOPES[0]


async def _fill(ws: WriteSafe, scope: str, count: int) -> None:
    @ws.tool(f"noop-{scope}")
    async def noop(n: int) -> int:
        return n

    for n in range(count):
        await noop(n, idempotency_key=f"k{n}", scope=scope)


async def _first_cursor(client: httpx.AsyncClient) -> str:
    page = (await client.get("/v1/operations", params={"limit": 2})).json()
    assert page["next_cursor"] is not None, page
    return str(page["next_cursor"])


def _refused_cursor(response: httpx.Response) -> None:
    body = assert_problem(response, 422, "INPUT_INVALID")
    assert body["field"] == "cursor"
    assert body["errors"][0]["location"] == "query"


@on_the_module_loop
async def test_a_cursor_shows_no_position(service: Service) -> None:
    tenant_a = service.scopes[0]
    await _fill(service.ws, tenant_a, 5)
    async with service.as_(tenant_a, Role.READER) as client:
        first, again = await _first_cursor(client), await _first_cursor(client)
    last = await service.ws.ledger.get(tenant_a, "k1")
    assert last is not None
    assert re.fullmatch(r"[A-Za-z0-9_-]{59}", first)
    raw = base64.urlsafe_b64decode(first + "=")
    assert struct.pack(">q", last.id) not in raw  # the global row id is not readable …
    assert first != again  # … nor is the same position spelled the same way twice


@on_the_module_loop
async def test_an_edited_cursor_is_refused(service: Service) -> None:
    tenant_a = service.scopes[0]
    await _fill(service.ws, tenant_a, 5)
    async with service.as_(tenant_a, Role.READER) as client:
        cursor = await _first_cursor(client)
        flipped = cursor[:20] + ("A" if cursor[20] != "A" else "B") + cursor[21:]
        edited = await client.get("/v1/operations", params={"cursor": flipped})
        old_style = await client.get("/v1/operations", params={"cursor": "1764580000000000_1"})
        honest = await client.get("/v1/operations", params={"cursor": cursor, "limit": 2})
    _refused_cursor(edited)
    _refused_cursor(old_style)
    assert [op["key"] for op in honest.json()["items"]] == ["k2", "k3"]


@on_the_module_loop
async def test_another_tenants_cursor_is_refused(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await _fill(service.ws, tenant_a, 5)
    await _fill(service.ws, tenant_b, 5)
    async with service.as_(tenant_a, Role.READER) as client:
        cursor = await _first_cursor(client)
    async with service.as_(tenant_b, Role.OPERATOR) as client:
        _refused_cursor(await client.get("/v1/operations", params={"cursor": cursor}))


async def test_replicas_sharing_the_secret_share_cursors(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    await ws.start()
    tokens = await issue_keys(ws)
    await _fill(ws, A, 5)
    shared = ServiceSettings(cursor_secret=SecretStr("the deployment's cursor secret"))
    other = ServiceSettings(cursor_secret=SecretStr("another deployment"))
    headers = {"Authorization": f"Bearer {tokens[A, Role.READER]}"}
    answers = []
    cursor = None
    for settings in (shared, shared, other):
        async with (
            served(create_app(ws, settings), "asgi") as (base_url, transport),
            httpx.AsyncClient(base_url=base_url, transport=transport, headers=headers) as client,
        ):
            if cursor is None:
                cursor = await _first_cursor(client)
            answers.append(await client.get("/v1/operations", params={"cursor": cursor}))
    assert [r.status_code for r in answers] == [200, 200, 422]
