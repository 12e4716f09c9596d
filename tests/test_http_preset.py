"""The HTTP preset: statuses by their RFC 9110 meaning, unrecognised conflicts fail closed, and a
plain `raise_for_status()` tool gets continuations and retries instead of a dead key."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.conftest import MakeWriteSafe
from writesafe import WriteSafeError
from writesafe.ledger import ManualClock
from writesafe.reconciler import (
    CODES,
    HTTP_ADAPTER,
    Code,
    RawResponse,
    Rule,
    SideEffects,
    Untrusted,
    http_adapter,
)

N, U = SideEffects.NONE, SideEffects.UNKNOWN


@pytest.mark.parametrize(
    ("status", "body", "code", "field", "side_effects"),
    [
        (422, {"field": "postcode"}, Code.INPUT_INVALID, "postcode", N),
        (422, {"detail": "nope"}, Code.INPUT_INVALID, "body", N),
        (400, {"field": "sku"}, Code.INPUT_INVALID, "sku", N),
        (400, {"error": "unexpected"}, Code.UNKNOWN_ERROR, None, N),
        (401, {}, Code.AUTH_REQUIRED, None, N),
        (403, {}, Code.ACCESS_DENIED, None, N),
        (404, {}, Code.UNKNOWN_ERROR, None, N),
        (408, {}, Code.TEMP_UNAVAILABLE, None, N),
        (409, {"reason": "NEW_UNKNOWN_CONFLICT"}, Code.UNKNOWN_ERROR, None, U),
        (412, {}, Code.UNKNOWN_ERROR, None, N),
        (429, {}, Code.RATE_LIMITED, None, N),
        (500, {}, Code.UNKNOWN_ERROR, None, U),
        (502, {}, Code.UNKNOWN_ERROR, None, U),
        (503, {}, Code.TEMP_UNAVAILABLE, None, N),
        (504, {}, Code.OUTCOME_UNKNOWN, None, U),
    ],
)
def test_statuses_by_their_meaning(
    status: int, body: dict[str, Any], code: str, field: str | None, side_effects: SideEffects
) -> None:
    response = RawResponse(status, (("content-type", "application/json"),), _json(body))
    envelope = HTTP_ADAPTER.classify_response(response, CODES).envelope
    assert (envelope.code, envelope.field, envelope.side_effects) == (code, field, side_effects)


def test_a_gateway_timeout_is_a_timeout_and_an_unmapped_conflict_says_so() -> None:
    timeout = HTTP_ADAPTER.classify_response(RawResponse(504), CODES).envelope
    assert timeout.cause == "timeout"
    conflict = HTTP_ADAPTER.classify_response(RawResponse(409), CODES).envelope
    assert conflict.cause == Untrusted.NO_RULE


def test_your_exact_rules_come_first() -> None:
    adapter = http_adapter(
        "orders", "3", rules=(Rule(Code.DEPENDENCY_BUSY, status=409, body={"reason": "LOCKED"}),)
    )
    locked = RawResponse(409, (), _json({"reason": "LOCKED"}))
    assert adapter.classify_response(locked, CODES).envelope.code == Code.DEPENDENCY_BUSY
    other = RawResponse(409, (), _json({"reason": "NEW_UNKNOWN_CONFLICT"}))
    assert adapter.classify_response(other, CODES).envelope.code == Code.UNKNOWN_ERROR


def _json(body: dict[str, Any]) -> bytes:
    return httpx.Response(200, json=body).content


START = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_raise_for_status_tool_continues_and_retries(make_ws: MakeWriteSafe) -> None:
    answers = [
        httpx.Response(422, json={"field": "postcode"}),
        httpx.Response(503, headers={"Retry-After": "1"}),
        httpx.Response(201, json={"order": "o-1"}),
    ]
    client = httpx.AsyncClient(
        transport=httpx.MockTransport(lambda request: answers.pop(0)), base_url="http://orders"
    )
    ws = make_ws(clock=ManualClock(START))

    @ws.tool("submit_order", adapter=HTTP_ADAPTER)
    async def submit_order(postcode: str) -> dict[str, Any]:
        response = await client.post("/orders", json={"postcode": postcode})
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    with pytest.raises(WriteSafeError) as raised:
        await submit_order("000000", idempotency_key="ord-1")
    assert (raised.value.envelope.code, raised.value.envelope.field) == (
        "INPUT_INVALID",
        "postcode",
    )
    # The corrected postcode continues the key; the 503 is retried after its stated delay.
    assert await submit_order("560001", idempotency_key="ord-1") == {"order": "o-1"}
    await client.aclose()
