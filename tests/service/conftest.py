"""Fixtures of the service tests: a started service on every backend, over ASGI and uvicorn."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conftest import MakeWriteSafe
from tests.service.support import Service, issue_keys, served
from writesafe.service import create_app


@pytest.fixture(params=["asgi", "uvicorn"])
async def service(request: pytest.FixtureRequest, make_ws: MakeWriteSafe) -> AsyncIterator[Service]:
    ws = make_ws()
    await ws.start()
    tokens = await issue_keys(ws)
    async with served(create_app(ws), request.param) as (base_url, transport):
        yield Service(ws, base_url, transport, tokens)
