"""Rate limits per API key and per client without a valid key: 429 RATE_LIMITED with Retry-After."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from tests.conftest import MakeWriteSafe
from tests.service.support import (
    SCOPES,
    assert_problem,
    clear_of_a_minute_edge,
    issue_keys,
    served,
)
from writesafe.idempotency import SettingsRefused
from writesafe.ledger import Role
from writesafe.service import ServiceSettings, create_app

A, B = SCOPES
UNKNOWN_KEY = "wsk_0123456789ab_" + "x" * 43

Client = Callable[[str | None], httpx.AsyncClient]


@asynccontextmanager
async def _service(
    make_ws: MakeWriteSafe, **settings: object
) -> AsyncIterator[tuple[Client, dict[tuple[str, Role], str]]]:
    ws = make_ws()
    await ws.start()
    tokens = await issue_keys(ws)
    await clear_of_a_minute_edge()  # every limit here is counted per minute
    async with served(create_app(ws, ServiceSettings(**settings)), "asgi") as (url, transport):

        def client(token: str | None) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.AsyncClient(base_url=url, transport=transport, headers=headers)

        yield client, tokens


def _assert_rate_limited(response: httpx.Response) -> None:
    body = assert_problem(response, 429, "RATE_LIMITED")
    assert body["retryable"] is True
    assert body["next_action"] == "retry_after_delay"
    assert body["side_effects"] == "none"
    seconds = int(response.headers["Retry-After"])
    assert 1 <= seconds <= 60
    assert body["retry_after_ms"] == seconds * 1000


async def test_each_api_key_has_its_own_limit(make_ws: MakeWriteSafe) -> None:
    async with _service(make_ws, rate_limit_per_key="3/minute") as (client, tokens):
        async with client(tokens[A, Role.READER]) as reader:
            answers = [await reader.get("/v1/operations") for _ in range(4)]
        async with client(tokens[A, Role.OPERATOR]) as operator:
            other_key = await operator.get("/v1/operations")
    assert [r.status_code for r in answers[:3]] == [200, 200, 200]
    _assert_rate_limited(answers[3])
    assert "API key" in answers[3].json()["message"]
    assert other_key.status_code == 200  # the same tenant's other key is not spent


async def test_probes_and_unknown_keys_share_the_clients_limit(make_ws: MakeWriteSafe) -> None:
    async with _service(make_ws, rate_limit_anonymous="3/minute") as (client, tokens):
        async with client(None) as anonymous:
            ready = [await anonymous.get("/readyz") for _ in range(2)]
        async with client(UNKNOWN_KEY) as guesser:
            guessed = await guesser.get("/v1/operations")
            over = await guesser.get("/v1/operations")
        async with client(tokens[A, Role.READER]) as reader:
            # The address is over its limit, but a valid key from it is not refused.
            valid_from_there = await reader.get("/v1/operations")
        async with client(None) as anonymous:
            probe = await anonymous.get("/readyz")
        async with client(None) as anonymous:
            healthz = await anonymous.get("/healthz")
    assert [r.status_code for r in ready] == [200, 200]
    assert_problem(guessed, 401, "AUTH_REQUIRED")
    assert valid_from_there.status_code == 200, valid_from_there.text
    for refused in (over, probe):
        _assert_rate_limited(refused)
    assert healthz.status_code == 200  # liveness costs nothing and is never limited


async def test_a_flood_of_bad_keys_never_refuses_a_valid_key(make_ws: MakeWriteSafe) -> None:
    # Behind a proxy or a NAT every tenant shares one address with whoever floods it.
    async with _service(make_ws, rate_limit_anonymous="5/minute") as (client, tokens):
        flood, valid = [], []
        async with client(UNKNOWN_KEY) as guesser, client(tokens[B, Role.READER]) as tenant:
            for _ in range(20):
                flood.append(await guesser.get("/v1/operations"))
                valid.append(await tenant.get("/v1/operations"))
    assert [r.status_code for r in valid] == [200] * 20
    assert [r.status_code for r in flood] == [401] * 5 + [429] * 15  # still limited per address
    _assert_rate_limited(flood[-1])


async def test_a_request_costs_what_it_asks_for(make_ws: MakeWriteSafe) -> None:
    # A 500-row page costs 11 units of the key's budget; a status read costs 1.
    async with (
        _service(make_ws, rate_limit_per_key="30/minute") as (client, tokens),
        client(tokens[A, Role.READER]) as reader,
    ):
        pages = [await reader.get("/v1/operations", params={"limit": 500}) for _ in range(3)]
        small = [await reader.get("/v1/operations", params={"limit": 10}) for _ in range(8)]
        over = await reader.get("/v1/operations")
    assert [r.status_code for r in pages[:2]] == [200, 200]
    _assert_rate_limited(pages[2])  # 33 units would be over 30
    assert [r.status_code for r in small] == [200] * 8  # 22 + 8 = 30: the limit exactly
    _assert_rate_limited(over)


async def test_limits_switch_off(make_ws: MakeWriteSafe) -> None:
    settings = {"rate_limits": False, "rate_limit_per_key": "1/minute"}
    async with _service(make_ws, **settings, rate_limit_anonymous="1/minute") as (client, tokens):
        async with client(tokens[A, Role.READER]) as reader:
            answers = [await reader.get("/v1/operations") for _ in range(5)]
        async with client(None) as anonymous:
            answers += [await anonymous.get("/readyz") for _ in range(5)]
    assert {r.status_code for r in answers} == {200}


def test_a_limit_the_limiter_cannot_read_is_refused_at_start() -> None:
    with pytest.raises(
        SettingsRefused, match=r"^rate_limit_per_key \(WRITESAFE_SERVICE_RATE_LIMIT"
    ):
        ServiceSettings(rate_limit_per_key="plenty")
