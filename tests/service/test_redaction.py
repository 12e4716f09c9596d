"""Secrets in what a tool or a lookup raised never reach the ledger, nor any answer of the service.

A tool that times out on a URL carrying `?api_key=…` is the case from the field; the others are
the other ways captured text travels (a ToolError's message and evidence, a lookup's exception
and its `Unknown` reason). Each is checked where it could surface: every ledger row, and every
endpoint a reader or an operator of the tenant can call.
"""

from __future__ import annotations

import contextlib
import html
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.conftest import MakeWriteSafe
from tests.service.support import SCOPES, issue_keys, served
from writesafe import ToolError, Unknown, WriteSafe, WriteSafeError
from writesafe.ledger import Role
from writesafe.ledger._models import Base
from writesafe.reconciler import REDACTED
from writesafe.reconciler._redaction import redact_text
from writesafe.service import create_app

A = SCOPES[0]
SECRET = "sk_live_51HqLyjWDarjtT1zdp7dcXzYq"
URL = f"https://api.payments.test/v1/charges?api_key={SECRET}&amount=10"
# The issue's shapes: a dict repr in single quotes with Basic credentials, and httpx's bytes tuples.
HEADERS_REPR = (
    "{'Authorization': 'Basic YWxpY2U6aHVudGVyMg==', 'X-Api-Key': 'key_live_123', "
    "'password': 'hunter2'} [(b'authorization', b'Bearer tok-bytes-77')]"
)
ALL_SECRETS = (
    SECRET,
    "hunter2-pass",
    "Zm9vOmJhcg",
    "sess-4711-cookie",
    "tok_9f8e7d6c5b4a",
    "YWxpY2U6aHVudGVyMg",
    "key_live_123",
    "'hunter2'",
    "tok-bytes-77",
)
KEYS = ("timeout", "refused", "lookup-raises", "headers")


async def _lookup(op: Any) -> Unknown:
    if op.key == "lookup-raises":
        raise httpx.ReadTimeout(f"lookup timed out on {URL}")
    return Unknown(f"asked https://ops:hunter2-pass@api.payments.test/v1/find?key={SECRET}")


def _register(ws: WriteSafe) -> Any:
    @ws.tool("charge", lookup=_lookup)
    async def charge(order: dict[str, Any]) -> dict[str, Any]:
        if order["how"] == "headers":
            raise RuntimeError(f"the gateway answered 401 to {HEADERS_REPR}")
        if order["how"] == "timeout":
            raise httpx.ReadTimeout(f"timed out reading {URL}", request=httpx.Request("GET", URL))
        raise ToolError(
            "ACCESS_DENIED",
            f"the gateway refused Authorization: Basic Zm9vOmJhcg for {URL}",
            evidence={
                "request_headers": {"Cookie": "sess-4711-cookie", "Accept": "application/json"},
                "api_token": "tok_9f8e7d6c5b4a",
                "note": f"sent with Bearer {SECRET}",
            },
        )

    return charge


async def _call_every_way(ws: WriteSafe) -> None:
    charge = _register(ws)
    for key, how in zip(KEYS, ("timeout", "refuse", "timeout", "headers"), strict=True):
        with contextlib.suppress(Exception):
            await charge({"how": how}, idempotency_key=key, scope=A)
    await ws.reconcile()  # both lookups run and record their (failing) evidence


async def _ledger_text(ws: WriteSafe) -> str:
    async with ws.ledger.engine.connect() as conn:
        rows = [
            repr(tuple(row))
            for table in Base.metadata.sorted_tables
            for row in (await conn.execute(select(table))).all()
        ]
    return "\n".join(rows)


async def test_secrets_in_raised_text_reach_neither_ledger_nor_api(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()
    await ws.start()
    await _call_every_way(ws)
    stored = await _ledger_text(ws)
    assert "httpx.ReadTimeout" in stored  # the evidence still says what happened …
    assert "api.payments.test/v1/charges?" + REDACTED in stored  # … and where
    tokens = await issue_keys(ws)
    answers: list[str] = []
    async with served(create_app(ws), "asgi") as (base_url, transport):
        for role in (Role.READER, Role.OPERATOR):
            headers = {"Authorization": f"Bearer {tokens[A, role]}"}
            async with httpx.AsyncClient(
                base_url=base_url, transport=transport, headers=headers
            ) as client:
                for key in KEYS:
                    answers.append((await client.get(f"/v1/operations/{key}")).text)
                    answers.append((await client.get(f"/v1/operations/{key}/attempts")).text)
                answers.append((await client.get("/v1/operations")).text)
            assert all('"key"' in answer for answer in answers)  # real answers, not refusals
            async with httpx.AsyncClient(base_url=base_url, transport=transport) as browser:
                login = await browser.post(
                    "/console/login",
                    data={"api_key": tokens[A, role]},
                    headers={"Origin": base_url},
                )
                assert login.status_code == 303, login.text
                for key in KEYS:
                    page = await browser.get(f"/console/operations/{key}")
                    assert page.status_code == 200, page.text
                    answers.append(html.unescape(page.text))
    assert "RuntimeError" in answers[-1]  # the timeline shows the failure, redacted
    for secret in ALL_SECRETS:
        assert secret not in stored, secret
        assert not any(secret in answer for answer in answers), secret


async def _message_kept(ws: WriteSafe, raised: str) -> Any:
    """The evidence message kept for a tool that raised `raised`."""
    await ws.start()

    @ws.tool("pay")
    async def pay() -> None:
        raise RuntimeError(raised)

    with pytest.raises(WriteSafeError):
        await pay(idempotency_key="k", scope=A)
    status = await ws.status("k", scope=A)
    assert status is not None
    evidence = status.attempts[0].evidence
    assert evidence is not None
    return evidence["message"]


async def test_a_deployment_adds_its_own_redactor(make_ws: MakeWriteSafe) -> None:
    ws = make_ws(redact=lambda text: text.replace("amount=10", "amount=[customer data]"))
    kept = await _message_kept(ws, "declined: amount=10 for card 4242")
    assert kept == "declined: amount=[customer data] for card 4242"


async def test_a_failing_redactor_drops_the_text(make_ws: MakeWriteSafe) -> None:
    def broken(text: str) -> str:
        raise ValueError("bug in the deployment's rule")

    ws = make_ws(redact=broken)
    assert await _message_kept(ws, "card 4242 4242 4242 4242 declined") == REDACTED
    # The card number with its spaces: a bare "4242" can be a timestamp's microseconds.
    assert "4242 4242" not in (await _ledger_text(ws))


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("GET https://h.test/p?api_key=abc&x=1 failed", "abc"),
        ("GET https://h.test/p#access_token=abc failed", "access_token=abc"),
        ("dsn postgresql://app:s3cr3t@db.test/prod", "s3cr3t"),
        ("Authorization: Bearer abc.def", "abc.def"),
        ("proxy-authorization: Basic dXNlcjpw", "dXNlcjpw"),
        ("Set-Cookie: sid=31d4d96e407aad42; Path=/", "31d4d96e"),
        ('{"x-api-key": "k-123", "ok": 1}', "k-123"),
        ("password=hunter2&user=bob", "hunter2"),
        ("client_secret: abc-def", "abc-def"),
        ("key ghp_16C7e42F292c6912E7710c838347Ae178B4a in config", "ghp_16C7e42F"),
        ("slack xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
        ("aws AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "eyJhbGciOiJIUzI1NiJ9"),
        ("hex 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c", "9f86d081884c7d65"),
    ],
)
def test_built_in_rules(text: str, secret: str) -> None:
    redacted = redact_text(text)
    assert secret not in redacted
    assert REDACTED in redacted
    assert redact_text(redacted) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "the order ord-7 failed: postcode is not served",
        "request 3f2b8a1c-1d2e-4f5a-9b8c-7d6e5f4a3b2c timed out after 5.0s",
        "POST https://h.test/v1/orders returned 502",
        "writesafe.service._operations raised ConnectionResetError",
    ],
)
def test_text_without_secrets_is_kept(text: str) -> None:
    assert redact_text(text) == text
