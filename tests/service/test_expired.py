"""A key whose operation retention pruned answers 410 `EXPIRED`, distinctly from a key never used
(404), at every door of its own scope; in any other scope it is a plain 404, like every key there
that does not exist, so no tenant learns which keys another used.
"""

from __future__ import annotations

from datetime import datetime

import httpx

from tests.service.support import Service, assert_problem, expire, on_the_module_loop, seed
from writesafe.ledger import Intent, Role
from writesafe.service._problems import ExpiredProblem

_VERDICT = {"outcome": "failed", "reason": "nothing in the shop"}


async def _doors(client: httpx.AsyncClient, key: str) -> list[httpx.Response]:
    """The status, the attempts and a resolution of `key`: every answer about one key."""
    return [
        await client.get(f"/v1/operations/{key}"),
        await client.get(f"/v1/operations/{key}/attempts"),
        await client.post(f"/v1/operations/{key}/resolve", json=_VERDICT),
    ]


@on_the_module_loop
async def test_a_pruned_key_answers_410_expired_with_when(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    pruned_at = await expire(service.ws, tenant_a, "ok")
    async with service.as_(tenant_a, Role.OPERATOR) as client:
        expired = await _doors(client, "ok")
        never = await _doors(client, "never-used")
    for response in expired:
        body = assert_problem(response, 410)
        assert body["code"] == "EXPIRED"
        assert datetime.fromisoformat(body["expired_at"]) == pruned_at
        assert "a new call with the key is a new operation" in body["detail"]
        ExpiredProblem.model_validate(body)  # the documented shape
    for response in never:
        assert assert_problem(response, 404)["code"] == "NOT_FOUND"


@on_the_module_loop
async def test_a_key_pruned_in_another_tenant_is_a_plain_404(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    await expire(service.ws, tenant_a, "ok")
    async with service.as_(tenant_b, Role.OPERATOR) as client:
        foreign = await _doors(client, "ok")
        never = await _doors(client, "never-used")
    for pruned_elsewhere, unknown in zip(foreign, never, strict=True):
        assert_problem(pruned_elsewhere, 404)
        assert pruned_elsewhere.json() == unknown.json()  # indistinguishable: nothing leaks


@on_the_module_loop
async def test_a_pruned_key_used_again_answers_its_new_operation(service: Service) -> None:
    """The tombstone stays, but the status is what the key holds now. (The claim is made in the
    ledger: with Redis, a call would replay the answer cached before the pruning, documented.)"""
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    await expire(service.ws, tenant_a, "ok")
    again = Intent(
        scope=tenant_a,
        key="ok",
        tool="submit_order",
        fingerprint="f" * 64,
        arguments="{}",
        owner="a-new-caller",
        lease_seconds=15.0,
        max_executions=3,
    )
    await service.ws.ledger.claim(again)
    async with service.as_(tenant_a, Role.READER) as client:
        response = await client.get("/v1/operations/ok")
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "in_flight"
