"""`/v1/operations`: status by key, listing, attempts and resolution, within the key's scope.

No `from __future__ import annotations`: FastAPI must resolve the routes' local `Annotated` aliases.
"""

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError

from writesafe.idempotency import (
    MAX_KEY_LENGTH,
    OperationNotFound,
    OperationStatus,
    ResolutionRefused,
    WriteSafe,
    WriteSafeError,
)
from writesafe.idempotency._keys import validate_key
from writesafe.reconciler import OperationSummary
from writesafe.service._auth import Caller, Principal
from writesafe.service._context import ServiceContext
from writesafe.service._cursor import CursorInvalid
from writesafe.service._metrics import RESOLUTIONS
from writesafe.service._models import (
    AttemptList,
    ListQuery,
    OperationPage,
    ResolveRequest,
    ResolveSucceeded,
)
from writesafe.service._openapi import problems
from writesafe.service._problems import Expired
from writesafe.service._reads import read

KeyPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        description="The idempotency key (URL-encoded; keys containing `/` cannot be addressed).",
    ),
]


def operations_router(
    ctx: ServiceContext,
    authenticate: Caller,
    operator: Caller,
) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["operations"])

    @router.get(
        "/operations/{key}",
        response_model=OperationStatus,
        responses=problems(401, 404, 410, 422, 429, 503),
        summary="An operation's status, result or error, and attempts",
    )
    async def get_operation(
        key: KeyPath, caller: Annotated[Principal, Depends(authenticate)]
    ) -> OperationStatus:
        return await find(ctx.ws, key, caller.scope)

    @router.get(
        "/operations/{key}/attempts",
        response_model=AttemptList,
        responses=problems(401, 404, 410, 422, 429, 503),
        summary="Every audited attempt of an operation, oldest first",
    )
    async def get_attempts(
        key: KeyPath, caller: Annotated[Principal, Depends(authenticate)]
    ) -> AttemptList:
        found = await find(ctx.ws, key, caller.scope)
        return AttemptList(key=found.key, items=found.attempts)

    @router.get(
        "/operations",
        response_model=OperationPage,
        responses=problems(401, 422, 429, 503),
        summary="Operations by status, tool and age, oldest change first (keyset-paginated)",
    )
    async def list_operations(
        request: Request,
        caller: Annotated[Principal, Depends(authenticate)],
        query: Annotated[ListQuery, Query()],
    ) -> OperationPage:
        _refuse_repeated(request)
        return await list_page(ctx, caller.scope, query)

    @router.post(
        "/operations/{key}/resolve",
        response_model=OperationStatus,
        responses=problems(401, 403, 404, 409, 410, 413, 422, 429, 503),
        summary=(
            "Resolve a needs_attention operation, or an outcome_unknown one with evidence, as "
            "succeeded or failed (operators; audited)"
        ),
    )
    async def resolve_operation(
        key: KeyPath,
        body: Annotated[ResolveRequest, Body()],
        caller: Annotated[Principal, Depends(operator)],
    ) -> OperationStatus:
        return await resolve(ctx, key, caller, body)

    return router


_NOT_FOUND = "no operation with this key in the API key's scope"


async def find(ws: WriteSafe, key: str, scope: str) -> OperationStatus:
    """The operation under `key` in `scope`; 410 when retention pruned it, 404 when absent, in
    another scope, or unusable."""
    if not _usable(key):
        raise HTTPException(404, _NOT_FOUND)
    found = await read("a status", lambda: ws.status(key, scope=scope))
    if found is None:
        raise await _missing(ws, key, scope)
    return found


async def _missing(ws: WriteSafe, key: str, scope: str) -> HTTPException:
    """Why `key` has no operation in `scope`: 410 `EXPIRED` if retention pruned it there, so a
    client can tell a key it used from one it never did; else 404. Only `scope`'s tombstones are
    read: a key another tenant used, pruned or not, stays a plain 404."""
    pruned = await read("a tombstone", lambda: ws.expired(key, scope=scope))
    return HTTPException(404, _NOT_FOUND) if pruned is None else Expired(pruned)


def _position(ctx: ServiceContext, cursor: str, scope: str) -> tuple[datetime, int]:
    """Where the page starts; an edited or foreign cursor is bad input (422), like any other."""
    try:
        return ctx.cursors.open(cursor, scope)
    except CursorInvalid as error:
        raise RequestValidationError(
            [{"type": "cursor_invalid", "loc": ("query", "cursor"), "msg": str(error)}]
        ) from error


async def list_page(ctx: ServiceContext, scope: str, query: ListQuery) -> OperationPage:
    """One page of `scope`'s operations matching `query` (the API's listing and the console's)."""
    if query.tool is not None and not _usable(query.tool):
        return OperationPage(items=[], next_cursor=None)  # no tool can have that name
    after = None if query.cursor is None else _position(ctx, query.cursor, scope)
    await ctx.ws.guard()
    ledger = ctx.ws.ledger
    updated_before = (
        None
        if query.older_than is None
        else await ledger.now() - timedelta(seconds=query.older_than)
    )
    rows = await read(
        "a listing",
        lambda: ledger.list(
            statuses=query.status,
            tool=query.tool,
            scope=scope,
            updated_before=updated_before,
            after=after,
            limit=query.limit + 1,
        ),
    )
    page = rows[: query.limit]
    return OperationPage(
        items=[OperationSummary.from_record(row) for row in page],
        next_cursor=ctx.cursors.seal(page[-1], scope) if len(rows) > query.limit else None,
    )


async def resolve(
    ctx: ServiceContext, key: str, caller: Principal, body: ResolveRequest
) -> OperationStatus:
    """`caller`'s verdict on `key` in its scope, audited; 404 when absent, 410 when pruned, 409
    when settled."""
    if not _usable(key):
        raise HTTPException(404, _NOT_FOUND)
    try:
        resolved = await ctx.ws.resolve(
            key,
            scope=caller.scope,
            outcome=body.outcome,
            reason=body.reason,
            actor=caller.actor,
            result=body.result if isinstance(body, ResolveSucceeded) else None,
            evidence=body.evidence,
        )
    except OperationNotFound as error:
        raise await _missing(ctx.ws, key, caller.scope) from error
    except ResolutionRefused as error:
        raise HTTPException(409, str(error)) from error
    RESOLUTIONS.labels(body.outcome).inc()
    return resolved


def _refuse_repeated(request: Request) -> None:
    """A single-valued parameter given twice is ambiguous (FastAPI would keep the last): 422."""
    repeated = [
        name
        for name in ListQuery.model_fields.keys() - ListQuery.REPEATABLE
        if len(request.query_params.getlist(name)) > 1
    ]
    if repeated:
        raise RequestValidationError(
            [
                {"type": "repeated", "loc": ("query", name), "msg": "given more than once"}
                for name in sorted(repeated)
            ]
        )


def _usable(name: str) -> bool:
    # A key or tool name the guard would refuse cannot name anything stored.
    try:
        validate_key(name)
    except WriteSafeError:
        return False
    return True
