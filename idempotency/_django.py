"""Django: guard your own views with the `Idempotency-Key` header, with the FastAPI integration's
semantics (`_http`): replays marked `Idempotent-Replayed`, problem+json failures, the stored status
and body replayed byte for byte.

The view runs on the request's own thread (a sync tool), so its database connection and any
`transaction.atomic` around it are the request's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase

from writesafe.idempotency._header import HEADER
from writesafe.idempotency._http import (
    GuardedView,
    Refusal,
    StoredResponse,
    body_payload,
    json_body,
    request_payload,
)
from writesafe.idempotency._keys import DEFAULT_SCOPE
from writesafe.idempotency._writesafe import WriteSafe
from writesafe.reconciler import Adapter, LookupOperation, LookupResult

View = TypeVar("View", bound=Callable[..., HttpResponseBase])

# Django's own refusals, raised from views; each is answered before anything is written.
_REFUSALS: tuple[tuple[type[Exception], int], ...] = (
    (Http404, 404),
    (PermissionDenied, 403),
    (BadRequest, 400),
    (SuspiciousOperation, 400),
)


def idempotent_django_view(
    ws: WriteSafe,
    name: str | None = None,
    *,
    scope: Callable[[HttpRequest], str] | None = None,
    required: bool = True,
    lookup: Callable[[LookupOperation], LookupResult] | None = None,
    adapter: Adapter | None = None,
    **options: Any,
) -> Callable[[View], View]:
    """Guard a Django function view by the request's `Idempotency-Key` header.

    `name` (default: the view's name) is the tool name in the ledger; `scope(request)` returns
    the caller's scope (e.g. the tenant of `request.user`). Without a key the view answers 400,
    unless `required=False`, which runs it unguarded. `lookup(op)` returns `Found(body)` when an
    unknown outcome's effect exists downstream. Other `options` are the bounds of `ws.tool`
    (timeout, wait_timeout, ...). The view must answer JSON (e.g. a `JsonResponse`). API clients
    send no CSRF token: put `csrf_exempt` above it where that is what you mean.
    """

    def decorate(view: View) -> View:
        guard = GuardedView(
            ws,
            name or view.__name__,
            required=required,
            lookup=lookup,
            adapter=adapter,
            refusal=_refusal,
            options=options,
        )

        @functools.wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            def respond() -> StoredResponse:
                response = view(request, *args, **kwargs)
                if not isinstance(response, HttpResponse):
                    raise TypeError("a guarded view must answer JSON, not a streamed body")
                return StoredResponse(
                    status_code=response.status_code, body=json_body(response.content)
                )

            key = request.headers.get(HEADER)
            answer = guard.answer(
                [] if key is None else [key],
                lambda: _payload(request),
                respond,
                scope=DEFAULT_SCOPE if scope is None else scope(request),
            )
            if answer is None:
                return view(request, *args, **kwargs)
            return HttpResponse(answer.content, status=answer.status, headers=answer.headers)

        return guarded  # type: ignore[return-value]

    return decorate


def _payload(request: HttpRequest) -> dict[str, Any]:
    query = [(name, value) for name, values in request.GET.lists() for value in values]
    return request_payload(request.method or "", request.path, query, body_payload(request.body))


def _refusal(error: BaseException) -> Refusal | None:
    for kind, status in _REFUSALS:
        if isinstance(error, kind):
            return Refusal(status, str(error) or None)
    return None
