"""The application factory: one `WriteSafe` in, one FastAPI application out."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException

from writesafe.idempotency import WriteSafe, WriteSafeError
from writesafe.ledger import LedgerNotMigrated
from writesafe.reconciler._causes import KEY_STORE, LEDGER
from writesafe.service._auth import (
    Authenticator,
    admission,
    require_admin,
    require_operator,
    within_tenant_bound,
)
from writesafe.service._console import console_router
from writesafe.service._context import ServiceContext
from writesafe.service._cursor import Cursors
from writesafe.service._headers import JSON_ANSWER_HEADERS, JsonAnswerHeaders
from writesafe.service._health import health_router
from writesafe.service._limits import BodyLimit
from writesafe.service._metrics import RequestMetrics
from writesafe.service._openapi import OVERVIEW, ServiceApp
from writesafe.service._operations import operations_router
from writesafe.service._problems import (
    envelope_error,
    http_error,
    problem_response,
    unavailable,
    validation_error,
)
from writesafe.service._rate_limits import RateLimits
from writesafe.service._reconcile import reconcile_router
from writesafe.service._settings import ServiceSettings
from writesafe.service._work import TenantWork

VERSION = "1.0.0"

logger = logging.getLogger("writesafe.service")


def create_app(ws: WriteSafe, settings: ServiceSettings | None = None) -> ServiceApp:
    """The writesafe HTTP service over `ws`'s ledger (and Redis); the caller owns `ws`'s lifetime.

    Start `ws` before serving (`await ws.start()`) to fail fast on an unreachable ledger; a
    service started without it still answers, with 503 until the ledger does.
    """
    settings = settings or ServiceSettings()
    secret = settings.cursor_secret
    ctx = ServiceContext(
        ws=ws,
        keys=ws.ledger.api_keys(),
        settings=settings,
        cursors=Cursors(None if secret is None else secret.get_secret_value()),
        limits=RateLimits(settings),
    )
    app = ServiceApp(
        title="writesafe",
        version=VERSION,
        summary="Status, reconciliation and operator resolution of write-safe operations.",
        description=OVERVIEW,
        # The document stays public (it holds no data); the UIs load scripts from a CDN, which an
        # offline deployment cannot reach, so they are left out.
        docs_url=None,
        redoc_url=None,
        exception_handlers={
            HTTPException: http_error,
            RequestValidationError: validation_error,
            WriteSafeError: envelope_error,
            LedgerNotMigrated: _not_migrated,
            SQLAlchemyError: _unavailable,
            RedisError: _unavailable,
            OSError: _unavailable,
            Exception: _internal,
        },
    )
    # What reads or settles a tenant's operations (the API's routes) holds its cost of the
    # tenant's bound.
    work = TenantWork(settings.tenant_work_units, enabled=settings.rate_limits)
    authenticate = Authenticator(ctx.keys, ws.start, ctx.limits, work)
    operator = require_operator(authenticate)
    app.include_router(health_router(ctx, require_admin(authenticate)))
    working_operator = within_tenant_bound(work, operator)
    app.include_router(
        operations_router(ctx, within_tenant_bound(work, authenticate), working_operator)
    )
    app.include_router(reconcile_router(ctx, working_operator))
    app.include_router(console_router(ctx, authenticate, operator))
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, admit=admission(authenticate))
    app.add_middleware(RequestMetrics)
    app.add_middleware(JsonAnswerHeaders)  # outermost: on every answer, the limits' too
    return app


async def _unavailable(request: Request, error: Any) -> JSONResponse:
    # The answer names the store (typed) but not why (that may name internals); the log does.
    # redis-py wraps its socket errors in RedisError, so a bare OSError is the ledger's driver.
    logger.warning("%s %s answered 503: %r", request.method, request.url.path, error)
    store = KEY_STORE if isinstance(error, RedisError) else LEDGER
    return unavailable(f"the {store.replace('_', ' ')} did not answer; nothing was changed", store)


async def _not_migrated(_request: Request, _error: Any) -> JSONResponse:
    return unavailable("the ledger schema is not current: run `writesafe db upgrade`", LEDGER)


async def _internal(_request: Request, _error: Any) -> JSONResponse:
    # Never the exception's text: it may carry internals. The server log has the traceback.
    # Starlette answers this one outside every middleware, so it brings its headers itself.
    return problem_response(500, "an internal error; it was logged", headers=JSON_ANSWER_HEADERS)
