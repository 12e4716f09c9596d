"""Flask: guard your own views with the `Idempotency-Key` header, with the FastAPI integration's
semantics (`_http`): replays marked `Idempotent-Replayed`, problem+json failures, the stored status
and body replayed byte for byte.

The view runs on the request's own thread (a sync tool), inside its request context.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from writesafe._extras import MissingExtra

try:
    from flask import Response, current_app, request
    from werkzeug.exceptions import HTTPException
except ModuleNotFoundError as missing:
    raise MissingExtra(__name__, "flask", missing) from missing

from writesafe.contrib._http import (
    REPLAYED_HEADER,
    GuardedView,
    Refusal,
    StoredResponse,
    body_payload,
    json_body,
    request_payload,
)
from writesafe.idempotency._header import HEADER
from writesafe.idempotency._keys import DEFAULT_SCOPE
from writesafe.idempotency._writesafe import WriteSafe
from writesafe.reconciler import Adapter, LookupOperation, LookupResult

__all__ = ["REPLAYED_HEADER", "idempotent_flask_view"]

View = TypeVar("View", bound=Callable[..., Any])


def idempotent_flask_view(
    ws: WriteSafe,
    name: str | None = None,
    *,
    scope: Callable[[], str] | None = None,
    required: bool = True,
    lookup: Callable[[LookupOperation], LookupResult] | None = None,
    adapter: Adapter | None = None,
    **options: Any,
) -> Callable[[View], View]:
    """Guard a Flask view by the request's `Idempotency-Key` header.

    Put it under `@app.post(...)`. `name` (default: the view's name) is the tool name in the
    ledger; `scope()` returns the caller's scope (e.g. the tenant of `flask.g.user`). Without a
    key the view answers 400, unless `required=False`, which runs it unguarded. `lookup(op)`
    returns `Found(body)` when an unknown outcome's effect exists downstream. Other `options` are
    the bounds of `ws.tool` (timeout, ...); a duplicate of a running request is 409 at once
    unless `wait_timeout=` asks it to wait that long first. The view must answer JSON; its own
    `abort(4xx)` keeps its status.
    """

    def decorate(view: View) -> View:
        guard = GuardedView(ws, view, name, required, lookup, adapter, _refusal, options)

        @functools.wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            def respond() -> StoredResponse:
                response = current_app.make_response(view(*args, **kwargs))
                if response.is_streamed:
                    raise TypeError("a guarded view must answer JSON, not a streamed body")
                return StoredResponse(
                    status_code=response.status_code, body=json_body(response.get_data())
                )

            answer = guard.answer(
                request.headers.getlist(HEADER),
                _payload,
                respond,
                scope=DEFAULT_SCOPE if scope is None else scope(),
                content_type=request.content_type,
                raw_body=request.get_data(cache=True),
            )
            if answer is None:
                return view(*args, **kwargs)
            return Response(answer.content, answer.status, headers=answer.headers)

        return guarded  # type: ignore[return-value]

    return decorate


def _payload() -> dict[str, Any]:
    body = body_payload(request.get_data(cache=True))  # cached: the view can still read it
    return request_payload(request.method, request.path, request.args.items(multi=True), body)


def _refusal(error: BaseException) -> Refusal | None:
    """A view's `abort(...)` (a werkzeug `HTTPException`), as the refusal it says."""
    if not isinstance(error, HTTPException) or error.code is None:
        return None
    retry_after = dict(error.get_headers()).get("Retry-After")
    return Refusal(error.code, error.description, retry_after)
