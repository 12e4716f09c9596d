"""Fixtures of the service tests: one started service per backend and transport for a whole
module, which each test meets in two fresh tenants of its own.

Building a service costs a schema, a migration and often a uvicorn; sharing one per module keeps
that cost off every test. Fresh tenants, keys and operation keys keep the tests apart: no test
sees another's operations, keys, sessions or revocations. A test that needs a ledger of its own
(a deployment-wide count, say) builds it itself.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from tests.conftest import BACKENDS, ConnectionBudget, fresh_prefix, fresh_schema, store_arguments
from tests.service.support import Service, issue_keys, served
from writesafe import WriteSafe
from writesafe.service import ServiceSettings, create_app

_tenants = itertools.count()


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=BACKENDS)
async def started(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    connection_budget: ConnectionBudget,
) -> AsyncIterator[WriteSafe]:
    """A started WriteSafe on isolated stores of the backend, for every test of the module."""
    with contextlib.ExitStack() as stack:
        if request.param != "sqlite":
            # The one connection that migrates, and that makes and drops the schema; the tests'
            # own connections count against their slots (see `service`).
            stack.enter_context(connection_budget.hold(1))
        options = store_arguments(
            request.param,
            tmp_path_factory.mktemp("service"),
            lambda: stack.enter_context(fresh_schema()),
            lambda: stack.enter_context(fresh_prefix()),
        )
        ws = WriteSafe(**options)
        try:
            await ws.start()
            yield ws
        finally:
            await ws.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["asgi", "uvicorn"])
async def reached(
    request: pytest.FixtureRequest, started: WriteSafe
) -> AsyncIterator[tuple[str, httpx.AsyncBaseTransport | None]]:
    """The service of `started`, in-process or through one uvicorn on loopback.

    Without rate limits: the module's tests all come from one client, so a limit would count
    them together (test_rate_limits.py shows the limits on a service of its own).
    """
    app = create_app(started, ServiceSettings(rate_limits=False))
    async with served(app, request.param) as base_url_and_transport:
        yield base_url_and_transport


@pytest_asyncio.fixture(loop_scope="module")
async def service(
    started: WriteSafe, reached: tuple[str, httpx.AsyncBaseTransport | None]
) -> AsyncIterator[Service]:
    """The module's service, with two fresh tenants for this test and one key per role in each."""
    n = next(_tenants)
    scopes = (f"tenant-a-{n}", f"tenant-b-{n}")
    tokens = await issue_keys(started, scopes)
    yield Service(started, *reached, tokens, scopes)
    if started.ledger.file is None:
        # Between tests no PostgreSQL connection stays open outside the budget's slots.
        await started.ledger.close()
