"""Schemathesis against the service's own OpenAPI, through uvicorn on loopback.

Every operation is fuzzed with schema-valid and schema-violating requests (with an admin key,
and without one) and every response is checked: no server error, a documented status, content
type, headers and body. Bounded in examples so the run stays well under a minute.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from schemathesis.checks import positive_data_acceptance

from tests.loopback import loopback_socket
from tests.service.support import SCOPES, issue_keys, seed
from writesafe import WriteSafe
from writesafe.ledger import Role
from writesafe.service import ServiceSettings, create_app

CONFIG = schemathesis.Config.from_dict(
    {
        "generation": {"max-examples": 100, "database": "none"},
        "phases": {"stateful": {"enabled": False}},
        "checks": {"max_response_time": 10.0},
    }
)


@dataclass
class Running:
    base_url: str
    token: str


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """The service over a seeded embedded ledger, served by uvicorn in its own thread and loop."""
    database = tmp_path_factory.mktemp("schemathesis") / "ledger.db"
    sock = loopback_socket()
    port = sock.getsockname()[1]
    started: queue.Queue[str | BaseException] = queue.Queue()
    holder: dict[str, uvicorn.Server] = {}

    async def serve() -> None:
        async with WriteSafe(f"sqlite+aiosqlite:///{database}") as ws:
            try:
                tokens = await issue_keys(ws)
                await seed(ws, SCOPES[0])
                # No rate limits: 429s (documented; test_rate_limits) would cut the coverage.
                app = create_app(ws, ServiceSettings(rate_limits=False))
                server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
                holder["server"] = server
            except BaseException as error:
                started.put(error)
                raise
            started.put(tokens[SCOPES[0], Role.ADMIN])
            await server.serve(sockets=[sock])

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    token = started.get(timeout=30)
    if isinstance(token, BaseException):
        raise token
    server = holder["server"]
    while not server.started:
        threading.Event().wait(0.01)
    try:
        yield Running(f"http://127.0.0.1:{port}", token)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


# Loaded at import (schemathesis parametrizes at collection); the test below checks that the
# running service serves exactly this document.
OPENAPI = create_app(WriteSafe()).openapi()
schema = schemathesis.openapi.from_dict(OPENAPI, config=CONFIG)


@schema.hook
def filter_query(_context: schemathesis.HookContext, query: dict[str, Any] | None) -> bool:
    """Drop generated queries that cannot reach the wire: an extra parameter whose value is an
    empty list (or None) is not serialized at all, so the "unknown parameter" is never sent and
    the server is blamed for accepting a request it never received."""
    return not query or all(value not in ([], None) for value in query.values())


@schema.parametrize()
def test_the_service_honours_its_openapi(case: schemathesis.Case, running: Running) -> None:
    # A cursor is valid only if this service sealed it for this key: one generated from its
    # pattern is well-formed but not genuine, and its 422 is the point (test_cursors).
    sealed_only = [positive_data_acceptance] if "cursor" in (case.query or {}) else []
    case.call_and_validate(
        base_url=running.base_url,
        headers={"Authorization": f"Bearer {running.token}"},
        excluded_checks=sealed_only,
    )


def test_the_schema_is_the_one_served_and_documents_every_route(running: Running) -> None:
    assert httpx.get(f"{running.base_url}/openapi.json").json() == OPENAPI
    operations = {f"{op.ok().method.upper()} {op.ok().path}" for op in schema.get_all_operations()}
    assert operations == {
        "GET /healthz",
        "GET /readyz",
        "GET /metrics",
        "GET /v1/operations",
        "GET /v1/operations/{key}",
        "GET /v1/operations/{key}/attempts",
        "POST /v1/operations/{key}/resolve",
        "POST /v1/reconcile",
    }
