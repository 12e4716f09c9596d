"""Operator resolution: a result must fit what the tool stores, an unknown outcome can be settled
with evidence, and the status shows who resolved it and why.

Regression: resolving an `idempotent_route` operation with a bare body answered 200, and every
client retry of that key then got a text/plain 500 (the route stores status and body).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from tests.conftest import run_sync
from tests.service.support import assert_problem
from writesafe import WriteSafe, WriteSafeError
from writesafe.cli import app as cli_app
from writesafe.contrib.fastapi import REPLAYED_HEADER, idempotent_route
from writesafe.ledger import ApiKeys, Role, Status
from writesafe.service import create_api_key, create_app

EVIDENCE = {"order": "ord-77", "checked": "the shop's back office"}


def shop(ws: WriteSafe) -> FastAPI:
    """A route whose write commits and then answers too late: its outcome is unknown."""
    app = FastAPI()

    @app.post("/orders", status_code=201)
    @idempotent_route(ws, "create_order", timeout=0.05)
    async def create_order(order: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(1)
        return {"order_id": "never-seen"}

    return app


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shop.test")


async def unknown_order(ws: WriteSafe, app: FastAPI, key: str) -> None:
    async with client(app) as http:
        first = await http.post("/orders", json={"sku": "A1"}, headers={"Idempotency-Key": key})
    assert first.json()["code"] == "OUTCOME_UNKNOWN"
    found = await ws.status(key)
    assert found is not None
    assert found.status is Status.OUTCOME_UNKNOWN


async def test_a_route_result_must_fit_its_stored_form(tmp_path: Path) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    app = shop(ws)
    try:
        await unknown_order(ws, app, "ord-77")
        settle = {
            "outcome": "succeeded",
            "reason": "found it",
            "actor": "ops",
            "evidence": EVIDENCE,
        }
        with pytest.raises(WriteSafeError) as refused:
            await ws.resolve("ord-77", result={"order_id": "ord-77"}, **settle)
        assert refused.value.envelope.code == "INPUT_INVALID"
        assert refused.value.envelope.field == "result"
        assert "status_code" in refused.value.envelope.message
        answer = {"status_code": 201, "body": {"order_id": "ord-77"}}
        resolved = await ws.resolve("ord-77", result=answer, **settle)
        assert resolved.status is Status.SUCCEEDED
        async with client(app) as http:
            retry = await http.post(
                "/orders", json={"sku": "A1"}, headers={"Idempotency-Key": "ord-77"}
            )
        assert retry.status_code == 201, retry.text
        assert retry.json() == {"order_id": "ord-77"}
        assert retry.headers[REPLAYED_HEADER] == "true"
    finally:
        await ws.close()


async def test_an_unknown_outcome_is_settled_only_with_evidence(tmp_path: Path) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    app = shop(ws)
    try:
        await unknown_order(ws, app, "ord-8")
        settle = {"outcome": "failed", "reason": "no such order downstream", "actor": "ops"}
        with pytest.raises(WriteSafeError) as refused:
            await ws.resolve("ord-8", **settle)
        assert refused.value.envelope.field == "evidence"
        resolved = await ws.resolve("ord-8", evidence=EVIDENCE, **settle)
        assert resolved.status is Status.FAILED
        audit = resolved.attempts[-1]
        assert (audit.actor, audit.reason) == ("ops", "no such order downstream")
        assert audit.evidence is not None
        assert audit.evidence["operator_evidence"] == EVIDENCE
        assert audit.evidence["previous_status"] == "outcome_unknown"
    finally:
        await ws.close()


def test_the_service_refuses_a_result_that_does_not_fit_with_422(tmp_path: Path) -> None:
    async def scenario() -> None:
        ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
        try:
            await unknown_order(ws, shop(ws), "ord-9")
            _, token = await create_api_key(
                ApiKeys(ws.ledger.engine), scope="default", role=Role.OPERATOR, name="ops"
            )
            body = {"outcome": "succeeded", "reason": "found", "evidence": EVIDENCE}
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app=create_app(ws)),
                base_url="http://service.test",
                headers={"Authorization": f"Bearer {token}"},
            ) as http:
                bare = await http.post(
                    "/v1/operations/ord-9/resolve", json={**body, "result": {"order_id": "o"}}
                )
                fitting = await http.post(
                    "/v1/operations/ord-9/resolve",
                    json={**body, "result": {"status_code": 201, "body": {"order_id": "o"}}},
                )
            problem = assert_problem(bare, 422, "INPUT_INVALID")
            assert problem["field"] == "result"
            assert fitting.status_code == 200, fitting.text
            assert fitting.json()["status"] == "succeeded"
        finally:
            await ws.close()

    run_sync(scenario())


def test_status_shows_who_resolved_it_and_why(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}"

    async def resolved() -> None:
        ws = WriteSafe(url)
        try:
            await unknown_order(ws, shop(ws), "ord-10")
            await ws.resolve(
                "ord-10", outcome="failed", reason="ticket T-12", actor="dana", evidence=EVIDENCE
            )
        finally:
            await ws.close()

    run_sync(resolved())
    result = CliRunner().invoke(cli_app, ["status", "ord-10", "--database-url", url])
    assert result.exit_code == 0, result.output
    assert "dana" in result.stdout
    assert "ticket T-12" in result.stdout
