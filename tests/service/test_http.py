"""The service through real HTTP: every endpoint, both roles, tenant isolation.

Each test runs on every ledger backend (SQLite, PostgreSQL, PostgreSQL+Redis) and through two
transports: httpx against the ASGI app in-process, and httpx against uvicorn on loopback. The
module shares one service per backend and transport, in fresh tenants per test (conftest.py).
"""

from __future__ import annotations

import re
from datetime import datetime

import pytest

from tests.conftest import PG_URL
from tests.service.support import (
    SCOPES,
    Service,
    assert_problem,
    issue_keys,
    on_the_module_loop,
    seed,
    served,
)
from writesafe import WriteSafe
from writesafe.ledger import ApiKeys, Role
from writesafe.service import create_app

pytestmark = on_the_module_loop
READER, OPERATOR, ADMIN = Role.READER, Role.OPERATOR, Role.ADMIN
RESOLVE_BODY = {"outcome": "failed", "reason": "checked"}


async def test_health_needs_no_key(service: Service) -> None:
    async with service.client() as client:
        health = await client.get("/healthz")
        ready = await client.get("/readyz")
    assert health.status_code == 200
    assert health.json() == {"status": "ok"}
    assert ready.status_code == 200
    expected = {"database": "ok"} | ({"redis": "ok"} if service.ws.keystore else {})
    assert ready.json() == {"status": "ready", "checks": expected}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/operations"),
        ("GET", "/v1/operations/ok"),
        ("GET", "/v1/operations/ok/attempts"),
        ("GET", "/metrics"),
        ("POST", "/v1/reconcile"),
        ("POST", "/v1/operations/ok/resolve"),
    ],
)
async def test_every_other_endpoint_needs_a_valid_key(
    service: Service, method: str, path: str
) -> None:
    tenant_a = service.scopes[0]
    revoked_token = service.tokens[tenant_a, OPERATOR]
    store = ApiKeys(service.ws.ledger.engine)
    key_id = revoked_token.split("_")[1]
    assert (await store.revoke(key_id)) is not None
    attempts = {
        "no header": None,
        "unknown key": "wsk_0123456789ab_" + "x" * 43,
        "revoked key": revoked_token,
        "not a key": "hunter2",
        "oversized": "wsk_" + "a" * 10_000,
    }
    for label, token in attempts.items():
        async with service.client(token) as client:
            response = await client.request(method, path, json=RESOLVE_BODY)
        body = assert_problem(response, 401, "AUTH_REQUIRED")
        assert response.headers["www-authenticate"].startswith("Bearer"), label
        assert body["next_action"] == "authenticate"
    async with service.client(headers={"Authorization": "Basic dXNlcjpwYXNz"}) as client:
        assert_problem(await client.request(method, path), 401, "AUTH_REQUIRED")


@pytest.mark.parametrize("role", [READER, OPERATOR])
async def test_status_by_key_for_each_state(service: Service, role: Role) -> None:
    tenant_a = service.scopes[0]
    seeded = await seed(service.ws, tenant_a)
    async with service.as_(tenant_a, role) as client:
        for key, status in seeded.items():
            response = await client.get(f"/v1/operations/{key}")
            assert response.status_code == 200, response.text
            body = response.json()
            assert (body["key"], body["scope"], body["status"]) == (key, tenant_a, status.value)
            assert body["tool"] == "submit_order"
            assert body["attempts"][0]["kind"] == "execution"
    async with service.as_(tenant_a, role) as client:
        ok = (await client.get("/v1/operations/ok")).json()
        denied = (await client.get("/v1/operations/denied")).json()
    assert ok["result"] == {"order_id": "o-1", "sku": "A1"}
    assert ok["error"] is None
    assert denied["error"]["code"] == "ACCESS_DENIED"
    assert denied["result"] is None


async def test_attempts_of_an_operation(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with service.as_(tenant_a, READER) as client:
        response = await client.get("/v1/operations/lost/attempts")
    assert response.status_code == 200
    body = response.json()
    assert body["key"] == "lost"
    [attempt] = body["items"]
    assert (attempt["kind"], attempt["execution"], attempt["code"]) == (
        "execution",
        1,
        "OUTCOME_UNKNOWN",
    )
    assert attempt["error"]["side_effects"] == "unknown"


async def test_a_key_never_sees_another_scope(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    async with service.as_(tenant_b, OPERATOR) as client:
        foreign = await client.get("/v1/operations/ok")
        missing = await client.get("/v1/operations/never-used")
        foreign_attempts = await client.get("/v1/operations/ok/attempts")
        listing = await client.get("/v1/operations")
    # Another scope's operation is indistinguishable from one that does not exist.
    assert_problem(foreign, 404)
    assert_problem(foreign_attempts, 404)
    assert foreign.json() == missing.json()
    assert listing.json() == {"items": [], "next_cursor": None}


async def test_listing_filters_and_stays_in_scope(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    seeded = await seed(service.ws, tenant_a)
    await seed(service.ws, tenant_b, prefix="b-")
    async with service.as_(tenant_a, READER) as client:
        everything = (await client.get("/v1/operations")).json()
        unknown = (await client.get("/v1/operations", params={"status": "outcome_unknown"})).json()
        two = await client.get(
            "/v1/operations", params=[("status", "succeeded"), ("status", "needs_attention")]
        )
        by_tool = (await client.get("/v1/operations", params={"tool": "submit_order"})).json()
        other_tool = (await client.get("/v1/operations", params={"tool": "b-submit_order"})).json()
        recent = (await client.get("/v1/operations", params={"older_than": 3600})).json()
        old_enough = (await client.get("/v1/operations", params={"older_than": 0})).json()
    assert {op["key"] for op in everything["items"]} == set(seeded)
    assert all(op["scope"] == tenant_a and "attempts" not in op for op in everything["items"])
    assert [op["key"] for op in unknown["items"]] == ["lost"]
    assert {op["key"] for op in two.json()["items"]} == {"ok", "stuck"}
    assert {op["key"] for op in by_tool["items"]} == set(seeded)
    assert other_tool["items"] == []  # tenant B's tool, invisible to tenant A
    assert recent["items"] == []  # nothing is an hour old
    assert {op["key"] for op in old_enough["items"]} == set(seeded)
    stamps = [datetime.fromisoformat(op["updated_at"]) for op in everything["items"]]
    assert stamps == sorted(stamps)


async def test_keyset_pagination_walks_every_row_once(service: Service) -> None:
    tenant_a, tenant_b = service.scopes

    @service.ws.tool(f"noop-{tenant_a}")
    async def noop(n: int) -> int:
        return n

    for n in range(7):
        await noop(n, idempotency_key=f"k{n}", scope=tenant_a)
    seen: list[str] = []
    cursor: str | None = None
    async with service.as_(tenant_a, READER) as client:
        for _ in range(10):
            params: dict[str, str | int] = {"limit": 3}
            if cursor:
                params["cursor"] = cursor
            page = (await client.get("/v1/operations", params=params)).json()
            seen += [op["key"] for op in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            # A row changed after the page was read moves to the end; it is not lost.
        # The other tenant's key cannot use the cursor to see tenant A's rows.
    assert seen == [f"k{n}" for n in range(7)]
    async with service.as_(tenant_b, READER) as client:
        first = (await client.get("/v1/operations", params={"limit": 3})).json()
    assert first == {"items": [], "next_cursor": None}


def _pending(metrics: str) -> dict[str, float]:
    found = re.findall(r'writesafe_operations_pending\{status="(\w+)"\} (\S+)', metrics)
    return {status: float(count) for status, count in found}


async def test_metrics_are_for_admins(service: Service) -> None:
    tenant_a = service.scopes[0]
    async with service.as_(tenant_a, ADMIN) as client:
        before = _pending((await client.get("/metrics")).text)
    await seed(service.ws, tenant_a)
    for role in (READER, OPERATOR):  # a tenant's operator must not see every tool's volumes
        async with service.as_(tenant_a, role) as client:
            assert_problem(await client.get("/metrics"), 403, "ACCESS_DENIED")
    async with service.as_(tenant_a, ADMIN) as client:
        await client.get("/v1/operations/ok")
        response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    # The gauge counts the whole ledger, which the module's other tests share: the seed adds
    # one operation that needs attention and one of unknown outcome, and none in flight.
    after = _pending(text)
    assert {status: after[status] - before[status] for status in after} == {
        "in_flight": 0,
        "needs_attention": 1,
        "outcome_unknown": 1,
    }
    requests = r'writesafe_http_requests_total\{method="GET",route="/v1/operations/\{key\}"'
    assert re.search(requests + r',status="200"\} [1-9]', text)
    assert "writesafe_http_request_seconds_bucket" in text
    assert 'writesafe_calls_total{answer="executed",tool="submit_order"}' in text


async def test_reconcile_is_one_bounded_pass_for_operators(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with service.as_(tenant_a, READER) as client:
        assert_problem(await client.post("/v1/reconcile", json={}), 403, "ACCESS_DENIED")
    async with service.as_(tenant_a, OPERATOR) as client:
        response = await client.post("/v1/reconcile", json={"limit": 10})
        lost = (await client.get("/v1/operations/lost")).json()
        again = (await client.post("/v1/reconcile")).json()  # the body is optional
    assert response.status_code == 200, response.text
    report = response.json()
    assert (report["examined"], report["found"]) == (1, 1)
    assert lost["status"] == "succeeded"
    assert lost["result"] == {"order_id": "o-found"}
    assert [a["kind"] for a in lost["attempts"]] == ["execution", "lookup"]
    assert again["examined"] == 0  # nothing left due
    async with service.as_(tenant_a, ADMIN) as client:
        metrics = (await client.get("/metrics")).text
    assert re.search(r'writesafe_reconciled_total\{verdict="found"\} [1-9]', metrics)
    assert "writesafe_reconcile_pass_seconds_count" in metrics


async def test_resolve_is_for_operators_of_the_scope_and_audited(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    body = {
        "outcome": "succeeded",
        "reason": "ticket T-1: the shop has order o-9",
        "result": {"order_id": "o-9"},
    }
    async with service.as_(tenant_a, READER) as client:
        assert_problem(
            await client.post("/v1/operations/stuck/resolve", json=body), 403, "ACCESS_DENIED"
        )
    async with service.as_(tenant_b, OPERATOR) as client:
        foreign = await client.post("/v1/operations/stuck/resolve", json=body)
    assert_problem(foreign, 404)
    async with service.as_(tenant_a, OPERATOR) as client:
        response = await client.post(
            "/v1/operations/stuck/resolve", json={**body, "evidence": {"ticket": "T-1"}}
        )
        twice = await client.post("/v1/operations/stuck/resolve", json=body)
        not_escalated = await client.post("/v1/operations/ok/resolve", json=body)
        missing = await client.post("/v1/operations/never-used/resolve", json=body)
    assert response.status_code == 200, response.text
    resolved = response.json()
    assert (resolved["status"], resolved["result"]) == ("succeeded", {"order_id": "o-9"})
    audit = resolved["attempts"][-1]
    key_id = service.tokens[tenant_a, OPERATOR].split("_")[1]
    assert audit["kind"] == "operator"
    assert audit["actor"] == f"api-key:{key_id} ({tenant_a}-operator)"
    assert audit["reason"] == body["reason"]
    assert audit["evidence"]["operator_evidence"] == {"ticket": "T-1"}
    assert_problem(twice, 409)
    assert_problem(not_escalated, 409)
    assert_problem(missing, 404)


async def test_resolve_as_failed(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with service.as_(tenant_a, OPERATOR) as client:
        response = await client.post(
            "/v1/operations/stuck/resolve",
            json={"outcome": "failed", "reason": "the shop has no such order"},
        )
    assert response.status_code == 200, response.text
    resolved = response.json()
    assert resolved["status"] == "failed"
    assert resolved["error"]["side_effects"] == "none"


@pytest.mark.postgres
@pytest.mark.redis
async def test_readiness_names_the_store_that_does_not_answer(pg_schema: str) -> None:
    ws = WriteSafe(PG_URL, "redis://127.0.0.1:1/0", schema=pg_schema, auto_migrate=True)
    try:
        await ws.start()
        tokens = await issue_keys(ws)
        async with served(create_app(ws), "asgi") as (base_url, transport):
            service = Service(ws, base_url, transport, tokens)
            async with service.client() as client:
                ready = await client.get("/readyz")
            async with service.as_(SCOPES[0], READER) as client:
                listing = await client.get("/v1/operations")
    finally:
        await ws.close()
    body = assert_problem(ready, 503, "TEMP_UNAVAILABLE")
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("unavailable")
    assert body["cause"] == "key_store"  # the store at fault, typed
    assert ready.headers["retry-after"] == "1"
    assert listing.status_code == 200  # Redis only accelerates; the ledger still answers


@pytest.mark.parametrize("transport", ["asgi", "uvicorn"])
async def test_an_unreachable_ledger_is_503_not_500(transport: str) -> None:
    ws = WriteSafe("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    token = "wsk_0123456789ab_" + "x" * 43
    try:
        async with served(create_app(ws), transport) as (base_url, client_transport):
            service = Service(ws, base_url, client_transport)
            async with service.client() as client:
                ready = await client.get("/readyz")
                health = await client.get("/healthz")
            async with service.client(token) as client:
                listing = await client.get("/v1/operations")
            async with service.client("not-a-key") as client:
                refused = await client.get("/v1/operations")
    finally:
        await ws.close()
    assert health.status_code == 200
    readiness = assert_problem(ready, 503, "TEMP_UNAVAILABLE")
    assert readiness["checks"]["database"].startswith("unavailable")
    assert readiness["cause"] == "ledger"
    assert assert_problem(listing, 503, "TEMP_UNAVAILABLE")["cause"] == "ledger"
    assert listing.headers["retry-after"] == "1"
    assert_problem(refused, 401, "AUTH_REQUIRED")  # a malformed key needs no database


@pytest.mark.postgres
async def test_an_unmigrated_ledger_says_so(pg_schema: str) -> None:
    ws = WriteSafe(PG_URL, schema=pg_schema)
    try:
        async with served(create_app(ws), "asgi") as (base_url, transport):
            service = Service(ws, base_url, transport)
            async with service.client() as client:
                ready = await client.get("/readyz")
            async with service.client("wsk_0123456789ab_" + "x" * 43) as client:
                listing = await client.get("/v1/operations")
    finally:
        await ws.close()
    assert (
        "writesafe db upgrade"
        in assert_problem(ready, 503, "TEMP_UNAVAILABLE")["checks"]["database"]
    )
    body = assert_problem(listing, 503, "TEMP_UNAVAILABLE")
    assert "writesafe db upgrade" in body["message"]
    assert body["cause"] == "ledger"


async def test_only_health_readiness_and_the_openapi_document_are_open(service: Service) -> None:
    async with service.client() as client:
        document = await client.get("/openapi.json")
        ui = await client.get("/docs")
    assert document.status_code == 200
    assert_problem(ui, 404)
    for path, operations in document.json()["paths"].items():
        for method, operation in operations.items():
            opened = path in ("/healthz", "/readyz")
            assert ("security" not in operation) == opened, (method, path)
