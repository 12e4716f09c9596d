"""`POST /v1/reconcile`: one bounded reconciliation pass, on demand."""

from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException

from writesafe.idempotency import ReconcilerBusy, ReconcileReport
from writesafe.ledger import Role
from writesafe.service._auth import Caller, Principal
from writesafe.service._context import ServiceContext
from writesafe.service._metrics import record_pass
from writesafe.service._models import ReconcileRequest
from writesafe.service._openapi import problems


def reconcile_router(ctx: ServiceContext, operator: Caller) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["reconciliation"])

    @router.post(
        "/reconcile",
        response_model=ReconcileReport,
        responses=problems(401, 403, 409, 413, 422, 429, 503),
        summary="One reconciliation pass: the key's scope (operators) or every scope (admins)",
        description=(
            "Asks each tool's lookup about due `outcome_unknown` operations and expired leases, "
            "at most `limit` of them; never executes a write. An operator key's pass looks only "
            "at its own scope, and its report counts only that scope's operations; an admin "
            "key's pass is deployment-wide, like the `writesafe reconcile` worker."
        ),
    )
    async def reconcile(
        caller: Annotated[Principal, Depends(operator)],
        body: Annotated[ReconcileRequest | None, Body()] = None,
    ) -> ReconcileReport:
        bounds = body or ReconcileRequest()
        scope = None if caller.role is Role.ADMIN else caller.scope
        try:
            report = await ctx.ws.reconcile(
                limit=bounds.limit, older_than=bounds.older_than, scope=scope
            )
        except ReconcilerBusy as error:
            raise HTTPException(409, str(error)) from error
        record_pass(report)
        return report

    return router
