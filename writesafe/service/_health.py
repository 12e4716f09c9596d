"""Liveness, readiness and metrics: what orchestrators and Prometheus ask.

(No `from __future__ import annotations`: FastAPI must resolve the routes' `Depends(admin)`.)
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from writesafe.ledger import LedgerNotMigrated
from writesafe.reconciler._causes import KEY_STORE, LEDGER
from writesafe.service._auth import Principal
from writesafe.service._context import ServiceContext
from writesafe.service._metrics import refresh_pending
from writesafe.service._models import Health, Readiness
from writesafe.service._openapi import problems
from writesafe.service._problems import unavailable
from writesafe.service._rate_limits import client_of
from writesafe.service._reads import read

Check = Callable[[], Awaitable[None]]


def health_router(ctx: ServiceContext, admin: Callable[..., Awaitable[Principal]]) -> APIRouter:
    router = APIRouter(tags=["health"])

    @router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
    async def healthz() -> Health:
        return Health()

    @router.get(
        "/readyz",
        response_model=Readiness,
        responses=problems(429, 503),
        summary="Readiness: the ledger (and Redis, when configured) answer",
    )
    async def readyz(request: Request) -> Readiness | JSONResponse:
        await ctx.limits.spend_anonymous(client_of(request))  # a probe costs two store queries
        checks: dict[str, Check] = {"database": _database(ctx)}
        if ctx.ws.keystore is not None:
            checks["redis"] = _redis(ctx)
        results = {
            name: await _run(check, ctx.settings.ready_timeout) for name, check in checks.items()
        }
        down = [name for name, result in results.items() if result != "ok"]
        if down:
            store = LEDGER if "database" in down else KEY_STORE
            return unavailable(
                f"the {store.replace('_', ' ')} did not answer",
                store,
                extensions={"checks": results},
            )
        return Readiness(checks=results)

    @router.get(
        "/metrics",
        summary="Prometheus metrics (admin keys only: the numbers span every scope)",
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
            **problems(401, 403, 429, 503),
        },
    )
    async def metrics(_caller: Annotated[Principal, Depends(admin)]) -> Response:
        await read("the metrics' pending counts", lambda: refresh_pending(ctx.ws))
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return router


def _database(ctx: ServiceContext) -> Check:
    async def check() -> None:
        await ctx.ws.start()
        await read("the readiness probe", ctx.ws.ledger.ping)

    return check


def _redis(ctx: ServiceContext) -> Check:
    async def check() -> None:
        assert ctx.ws.keystore is not None
        if not await ctx.ws.keystore.ping():
            raise ConnectionError("no PONG")

    return check


async def _run(check: Check, seconds: float) -> str:
    """'ok', or why not: a probe reports any failure as not ready rather than raising."""
    try:
        async with asyncio.timeout(seconds):
            await check()
    except TimeoutError:
        return f"no answer within {seconds:g}s"
    except LedgerNotMigrated:
        return "schema not current: run `writesafe db upgrade`"
    except Exception as error:
        return f"unavailable ({type(error).__name__})"
    return "ok"
