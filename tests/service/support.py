"""Support for the HTTP service tests: a seeded ledger, keys of both roles in two scopes, and
clients that reach the app either in-process (ASGI) or through uvicorn on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from tests.loopback import on_loopback
from writesafe import Found, Tool, ToolError, Unknown, WriteSafe
from writesafe.ledger import ApiKeys, Role, Status, prune
from writesafe.ledger._writer import operations
from writesafe.reconciler import PROBLEM_MEDIA_TYPE
from writesafe.service import create_api_key
from writesafe.service._problems import SERVICE_CODES

SCOPES = ("tenant-a", "tenant-b")
MINUTE = 60.0
# A test that meets the shared `service` (see conftest.py) runs on its module's event loop, the
# loop that service was started on.
on_the_module_loop = pytest.mark.asyncio(loop_scope="module")


@dataclass
class Service:
    """A running service: its WriteSafe, its base URL and transport, one key per scope+role, and
    the two tenants (scopes) of those keys."""

    ws: WriteSafe
    base_url: str
    transport: httpx.AsyncBaseTransport | None
    tokens: dict[tuple[str, Role], str] = field(default_factory=dict)
    scopes: tuple[str, str] = SCOPES

    def client(
        self, token: str | None = None, headers: dict[str, str] | None = None
    ) -> httpx.AsyncClient:
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(
            base_url=self.base_url,
            transport=self.transport,
            headers={**auth, **(headers or {})},
            timeout=10,
        )

    def as_(self, scope: str, role: Role) -> httpx.AsyncClient:
        return self.client(self.tokens[scope, role])


async def clear_of_a_minute_edge(margin: float = 10.0) -> None:
    """Wait, if need be, until `margin` seconds remain of the wall clock's minute.

    The service counts with the `limits` sliding-window counter, whose windows start on whole
    minutes: a test that counts requests exactly against an N/minute limit and crosses that edge
    sees its earlier requests weighted down, and one more request admitted.
    """
    remaining = MINUTE - time.time() % MINUTE
    if remaining < margin:
        await asyncio.sleep(remaining + 0.05)


async def issue_keys(ws: WriteSafe, scopes: Sequence[str] = SCOPES) -> dict[tuple[str, Role], str]:
    store = ApiKeys(ws.ledger.engine)
    tokens = {}
    for scope in scopes:
        for role in Role:
            _, tokens[scope, role] = await create_api_key(
                store, scope=scope, role=role, name=f"{scope}-{role.value}"
            )
    return tokens


async def seed(ws: WriteSafe, scope: str, prefix: str = "") -> dict[str, Status]:
    """One operation per status in `scope` (keys `<prefix>ok`, `<prefix>denied`, …); the tool's
    lookup finds the `lost` order and cannot tell about the `stuck` one. The tool is registered
    on the first seed of `ws` and reused by later ones (of other scopes)."""
    name = f"{prefix}submit_order"
    submit_order = ws.tools.get(name) or _order_tool(ws, name)
    await submit_order({"n": 1, "sku": "A1"}, idempotency_key=f"{prefix}ok", scope=scope)
    for key, order in ((f"{prefix}denied", {"fail": True}), (f"{prefix}lost", {"lose": True})):
        with contextlib.suppress(Exception):
            await submit_order(order, idempotency_key=key, scope=scope)
    with contextlib.suppress(Exception):
        await submit_order({"lose": True}, idempotency_key=f"{prefix}stuck", scope=scope)
    stuck = await ws.ledger.get(scope, f"{prefix}stuck")
    assert stuck is not None
    assert await ws.ledger.transition(stuck, Status.NEEDS_ATTENTION) is not None
    return {
        f"{prefix}ok": Status.SUCCEEDED,
        f"{prefix}denied": Status.FAILED,
        f"{prefix}lost": Status.OUTCOME_UNKNOWN,
        f"{prefix}stuck": Status.NEEDS_ATTENTION,
    }


async def expire(ws: WriteSafe, scope: str, key: str) -> datetime:
    """Prune `key`'s final operation in `scope` as retention does a day later; when it did.
    (Only that row is aged, so the pass prunes nothing of the module's other tests; on SQLite
    it must not be the newest operation, which waits for a newer one.)"""
    day_old = await ws.ledger.now() - timedelta(hours=25)
    async with ws.ledger.engine.begin() as conn:
        await conn.execute(
            update(operations)
            .where(operations.c.scope == scope, operations.c.key == key)
            .values(created_at=day_old, updated_at=day_old)
        )
    await prune(ws.ledger, timedelta(hours=24))
    assert await ws.status(key, scope=scope) is None
    pruned_at = await ws.expired(key, scope=scope)
    assert pruned_at is not None
    return pruned_at


def _order_tool(ws: WriteSafe, name: str) -> Tool[dict[str, Any]]:
    async def find_order(op: Any) -> Found | Unknown:
        # The shop did take the order whose response was lost; the stuck one nobody can tell.
        return Found({"order_id": "o-found"}) if op.key.endswith("lost") else Unknown("no idea")

    @ws.tool(name, lookup=find_order)
    async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
        if order.get("fail"):
            raise ToolError("ACCESS_DENIED", "the shop refused")
        if order.get("lose"):
            raise httpx.ReadTimeout("sent, then lost")
        return {"order_id": f"o-{order['n']}", "sku": order.get("sku")}

    return submit_order


@contextlib.asynccontextmanager
async def served(
    app: FastAPI, transport: str
) -> AsyncIterator[tuple[str, httpx.AsyncBaseTransport | None]]:
    """The app reached in-process (`asgi`) or through a real uvicorn on 127.0.0.1:<ephemeral>."""
    if transport == "asgi":
        yield "http://service.test", httpx.ASGITransport(app=app)
        return
    async with on_loopback(app, lifespan="off") as url:
        yield url, None


def assert_problem(
    response: httpx.Response, status: int, code: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    body = response.json()
    assert body["status"] == status
    assert isinstance(body["title"], str)
    assert body["title"]
    if code is None:  # a plain problem still carries a code to branch on: the service's own
        assert body["type"] == "about:blank"
        assert body["code"] == SERVICE_CODES[status]
        assert "schema" not in body
    else:
        assert body["code"] == code
        assert body["schema"] == "writesafe.error/1"
        assert body["type"].endswith(code)
    return dict(body)
