"""Django: guard your own views with the `Idempotency-Key` header — a decorator per view, or a
middleware for the views named in settings — with the FastAPI integration's semantics (`_http`):
replays marked `Idempotent-Replayed`, problem+json failures, the stored status and body replayed
byte for byte.

The view runs on the request's own thread (a sync tool), so its database connection and any
`transaction.atomic` around it are the request's.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from writesafe._extras import MissingExtra

try:
    from django.conf import settings
    from django.core.exceptions import (
        BadRequest,
        ImproperlyConfigured,
        PermissionDenied,
        SuspiciousOperation,
    )
    from django.http import Http404, HttpRequest, HttpResponse
    from django.http.response import HttpResponseBase
    from django.utils.module_loading import import_string
except ModuleNotFoundError as missing:
    raise MissingExtra(__name__, "django", missing) from missing

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

__all__ = ["REPLAYED_HEADER", "IdempotencyMiddleware", "idempotent_django_view"]

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
    (timeout, ...); a duplicate of a running request is 409 at once unless `wait_timeout=` asks
    it to wait that long first. The view must answer JSON (e.g. a `JsonResponse`). API clients
    send no CSRF token: put `csrf_exempt` above it where that is what you mean.
    """

    def decorate(view: View) -> View:
        guard = GuardedView(ws, view, name, required, lookup, adapter, _refusal, options)

        @functools.wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            chosen = DEFAULT_SCOPE if scope is None else scope(request)
            return _guarded_response(guard, request, chosen, lambda: view(request, *args, **kwargs))

        return guarded  # type: ignore[return-value]

    return decorate


class IdempotencyMiddleware:
    """Guard the views named in `settings.WRITESAFE_IDEMPOTENCY`, as `idempotent_django_view`
    guards one view, without decorating them:

        WRITESAFE_IDEMPOTENCY = {
            "writesafe": "shop.guards.ws",  # a WriteSafe, or its dotted path
            "views": {
                "orders": {"timeout": 10.0},  # a URL pattern's name (with its namespace)
                "/refunds": {"name": "refund", "scope": "shop.guards.tenant"},  # a path
            },
        }

    Each entry's options are `idempotent_django_view`'s (`name` defaults to the entry's key;
    `scope`, `lookup` and `adapter` may be dotted paths). Put it last in `MIDDLEWARE`: it answers
    from `process_view`, so the middleware after it see no view. A view named here is guarded
    from its first request on; an `async def` one is refused then, with ImproperlyConfigured.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        config: Any = getattr(settings, "WRITESAFE_IDEMPOTENCY", None)
        if not isinstance(config, dict) or "writesafe" not in config or "views" not in config:
            raise ImproperlyConfigured(
                "IdempotencyMiddleware needs settings.WRITESAFE_IDEMPOTENCY = "
                '{"writesafe": ..., "views": {...}}'
            )
        ws = _imported(config["writesafe"])
        if not isinstance(ws, WriteSafe):
            raise ImproperlyConfigured("WRITESAFE_IDEMPOTENCY['writesafe'] is not a WriteSafe")
        self._ws = ws
        self._routes: dict[str, dict[str, Any]] = {
            route: {
                "name": route,
                **{k: _imported(v) if k in _DOTTED else v for k, v in options.items()},
            }
            for route, options in config["views"].items()
        }
        self._guards: dict[str, tuple[GuardedView, Callable[[HttpRequest], str] | None]] = {}
        self._lock = threading.Lock()
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., HttpResponseBase],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        """The guarded answer of a configured view; None lets Django run any other view."""
        match = request.resolver_match
        route = request.path_info if match is None else match.view_name
        if route not in self._routes:
            route = request.path_info
            if route not in self._routes:
                return None
        guard, scope = self._guard(route, view)
        chosen = DEFAULT_SCOPE if scope is None else scope(request)
        return _guarded_response(guard, request, chosen, lambda: view(request, *args, **kwargs))

    def _guard(
        self, route: str, view: Callable[..., Any]
    ) -> tuple[GuardedView, Callable[[HttpRequest], str] | None]:
        with self._lock:  # one tool per route, however many threads ask first
            if route not in self._guards:
                options = dict(self._routes[route])
                name, scope = options.pop("name"), options.pop("scope", None)
                required = options.pop("required", True)
                lookup, adapter = options.pop("lookup", None), options.pop("adapter", None)
                try:
                    guard = GuardedView(
                        self._ws, view, name, required, lookup, adapter, _refusal, options
                    )
                except (TypeError, ValueError) as error:
                    raise ImproperlyConfigured(
                        f"WRITESAFE_IDEMPOTENCY[{route!r}]: {error}"
                    ) from error
                self._guards[route] = (guard, scope)
            return self._guards[route]


# The options of a settings entry that may name a function by its dotted path.
_DOTTED = frozenset({"scope", "lookup", "adapter"})


def _imported(value: Any) -> Any:
    """A setting's value, or what it names when it is a dotted path."""
    return import_string(value) if isinstance(value, str) else value


def _guarded_response(
    guard: GuardedView,
    request: HttpRequest,
    scope: str,
    view: Callable[[], HttpResponseBase],
) -> HttpResponseBase:
    """The decorator's and the middleware's flow: the view's answer, guarded by the key."""

    def respond() -> StoredResponse:
        response = view()
        if not isinstance(response, HttpResponse):
            raise TypeError("a guarded view must answer JSON, not a streamed body")
        return StoredResponse(status_code=response.status_code, body=json_body(response.content))

    key = request.headers.get(HEADER)
    answer = guard.answer(
        [] if key is None else [key],
        lambda: _payload(request),
        respond,
        scope=scope,
        content_type=request.content_type,
        raw_body=request.body,
    )
    if answer is None:
        return view()
    return HttpResponse(answer.content, status=answer.status, headers=answer.headers)


def _payload(request: HttpRequest) -> dict[str, Any]:
    query = [(name, value) for name, values in request.GET.lists() for value in values]
    return request_payload(request.method or "", request.path, query, body_payload(request.body))


def _refusal(error: BaseException) -> Refusal | None:
    for kind, status in _REFUSALS:
        if isinstance(error, kind):
            return Refusal(status, str(error) or None)
    return None
