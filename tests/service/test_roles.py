"""Deployment-wide actions need an admin key; a tenant operator acts on its own scope only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import MakeWriteSafe
from tests.service.support import SCOPES, Service, assert_problem, issue_keys, seed, served
from writesafe.ledger import AttemptKind, Role, Status
from writesafe.service import create_app

A, B = SCOPES


@pytest.fixture(params=["asgi", "uvicorn"])
async def service(request: pytest.FixtureRequest, make_ws: MakeWriteSafe) -> AsyncIterator[Service]:
    """A service on a ledger of its own: an admin's reconciliation spans every scope in it."""
    ws = make_ws()
    await ws.start()
    tokens = await issue_keys(ws)
    async with served(create_app(ws), request.param) as (base_url, transport):
        yield Service(ws, base_url, transport, tokens)


async def _lookups_of(service: Service, scope: str, key: str) -> int:
    operation = await service.ws.ledger.get(scope, key)
    assert operation is not None
    attempts = await service.ws.ledger.attempts(operation.id)
    return sum(attempt.kind is AttemptKind.LOOKUP for attempt in attempts)


async def test_a_tenant_operators_reconcile_touches_only_its_scope(service: Service) -> None:
    await seed(service.ws, A)
    await seed(service.ws, B, prefix="b_")
    async with service.as_(A, Role.OPERATOR) as client:
        response = await client.post("/v1/reconcile", json={"limit": 100})
    assert response.status_code == 200, response.text
    report = response.json()
    assert (report["examined"], report["found"]) == (1, 1)  # A's lost order, not B's
    other = await service.ws.ledger.get(B, "b_lost")
    assert other is not None
    assert other.status is Status.OUTCOME_UNKNOWN
    assert await _lookups_of(service, B, "b_lost") == 0  # B's lookup was not even asked
    async with service.as_(B, Role.OPERATOR) as client:
        own = (await client.post("/v1/reconcile", json={})).json()
    assert (own["examined"], own["found"]) == (1, 1)
    assert await _lookups_of(service, B, "b_lost") == 1


async def test_an_admins_reconcile_spans_every_scope(service: Service) -> None:
    await seed(service.ws, A)
    await seed(service.ws, B, prefix="b_")
    async with service.as_(A, Role.ADMIN) as client:
        report = (await client.post("/v1/reconcile", json={})).json()
    assert (report["examined"], report["found"]) == (2, 2)
    for scope, key in ((A, "lost"), (B, "b_lost")):
        found = await service.ws.ledger.get(scope, key)
        assert found is not None
        assert found.status is Status.SUCCEEDED


async def test_an_admin_still_reads_and_resolves_only_its_own_scope(service: Service) -> None:
    await seed(service.ws, B, prefix="b_")
    body = {"outcome": "failed", "reason": "checked with the shop"}
    async with service.as_(A, Role.ADMIN) as client:
        read = await client.get("/v1/operations/b_stuck")
        resolved = await client.post("/v1/operations/b_stuck/resolve", json=body)
    assert_problem(read, 404)
    assert_problem(resolved, 404)
