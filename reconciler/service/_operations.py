"""`/v1/operations`: status by key, listing, and attempts, each within the API key's scope.

No `from __future__ import annotations`: FastAPI must resolve the routes' local `Annotated` aliases.
"""

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query

from idempotency import MAX_KEY_LENGTH, OperationStatus, WriteSafe, WriteSafeError
from idempotency._errors import invalid_input
from idempotency._keys import validate_key
from ledger import Status
from reconciler import OperationSummary
from reconciler.service._auth import Principal
from reconciler.service._context import ServiceContext
from reconciler.service._cursor import (
    CURSOR_FORMAT,
    CURSOR_PATTERN,
    InvalidCursor,
    decode_cursor,
    encode_cursor,
)
from reconciler.service._models import AttemptList, OperationPage
from reconciler.service._openapi import problems

MAX_PAGE = 500
_TEN_YEARS = 10 * 366 * 24 * 3600

KeyPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_KEY_LENGTH,
        description="The idempotency key (URL-encoded; keys containing `/` cannot be addressed).",
    ),
]


def operations_router(
    ctx: ServiceContext, authenticate: Callable[..., Awaitable[Principal]]
) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["operations"])
    Caller = Annotated[Principal, Depends(authenticate)]

    @router.get(
        "/operations/{key}",
        response_model=OperationStatus,
        responses=problems(401, 404, 422, 503),
        summary="An operation's status, result or error, and attempts",
    )
    async def get_operation(key: KeyPath, caller: Caller) -> OperationStatus:
        return await find(ctx.ws, key, caller.scope)

    @router.get(
        "/operations/{key}/attempts",
        response_model=AttemptList,
        responses=problems(401, 404, 422, 503),
        summary="Every audited attempt of an operation, oldest first",
    )
    async def get_attempts(key: KeyPath, caller: Caller) -> AttemptList:
        found = await find(ctx.ws, key, caller.scope)
        return AttemptList(key=found.key, items=found.attempts)

    @router.get(
        "/operations",
        response_model=OperationPage,
        responses=problems(401, 422, 503),
        summary="Operations by status, tool and age, oldest change first (keyset-paginated)",
    )
    async def list_operations(
        caller: Caller,
        status: Annotated[
            list[Status] | None, Query(description="Only these statuses (repeatable).")
        ] = None,
        tool: Annotated[
            str | None, Query(max_length=MAX_KEY_LENGTH, description="Only this tool.")
        ] = None,
        older_than: Annotated[
            int | None,
            Query(ge=0, le=_TEN_YEARS, description="Only operations unchanged for this many seconds."),
        ] = None,
        cursor: Annotated[
            str | None,
            Query(
                pattern=CURSOR_PATTERN,
                description="`next_cursor` of the previous page (opaque).",
                json_schema_extra={"format": CURSOR_FORMAT},
            ),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Page size.")] = 50,
    ) -> OperationPage:
        try:
            after = None if cursor is None else decode_cursor(cursor)
        except InvalidCursor as error:
            raise invalid_input("cursor", str(error)) from error
        if tool is not None and not _usable(tool):
            return OperationPage(items=[], next_cursor=None)  # no tool can have that name
        await ctx.ws.guard()
        ledger = ctx.ws.ledger
        rows = await ledger.list(
            statuses=status,
            tool=tool,
            scope=caller.scope,
            updated_before=(
                None if older_than is None else ledger.clock.now() - timedelta(seconds=older_than)
            ),
            after=after,
            limit=limit + 1,
        )
        page = rows[:limit]
        return OperationPage(
            items=[OperationSummary.from_record(row) for row in page],
            next_cursor=encode_cursor(page[-1]) if len(rows) > limit else None,
        )

    return router


async def find(ws: WriteSafe, key: str, scope: str) -> OperationStatus:
    """The operation under `key` in `scope`; 404 when absent, in another scope, or unusable."""
    found = await ws.status(key, scope=scope) if _usable(key) else None
    if found is None:
        raise HTTPException(404, "no operation with this key in the API key's scope")
    return found


def _usable(name: str) -> bool:
    # A key or tool name the guard would refuse cannot name anything stored.
    try:
        validate_key(name)
    except WriteSafeError:
        return False
    return True
