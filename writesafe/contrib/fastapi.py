"""FastAPI: guard your own endpoints with the `Idempotency-Key` header (IETF httpapi draft).

The endpoint's body is the write. Its answer (status code and JSON body) is the operation's stored
result, so every retry of the key gets the same bytes back, marked `Idempotent-Replayed: true`.
FastAPI validates the request and resolves dependencies before the guard runs, so nothing is
recorded for a request that never reached the endpoint.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any

from writesafe._extras import MissingExtra

try:
    from fastapi import Depends, Header, Request, Response
    from fastapi.routing import APIRoute, serialize_response
except ModuleNotFoundError as missing:
    raise MissingExtra(__name__, "fastapi", missing) from missing

from writesafe.contrib._http import (
    MALFORMED_KEY_STATUS,
    REPLAYED_HEADER,
    RefusalAdapter,
    StoredResponse,
    body_payload,
    found_bodies,
    json_body,
    request_payload,
    stored_answer,
    tool_options,
)
from writesafe.contrib._http_errors import (
    add_problem_handlers,
    http_exception_refusal,
    problem_response,
)
from writesafe.contrib._route_openapi import GUARDED
from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._header import HEADER, parse_idempotency_key
from writesafe.idempotency._keys import DEFAULT_SCOPE
from writesafe.reconciler import DEFAULT_ADAPTER, Adapter

if TYPE_CHECKING:
    from writesafe.idempotency._writesafe import WriteSafe

__all__ = ["REPLAYED_HEADER", "add_problem_handlers", "idempotent_route"]

Endpoint = Callable[..., Awaitable[Any]]

_REQUEST = "writesafe_request"
_RESPONSE = "writesafe_response"
_KEY = "writesafe_idempotency_key"
_SCOPE = "writesafe_scope"

_KEY_DESCRIPTION = (
    "A unique value per operation (e.g. a UUID), as an RFC 8941 string or bare. A retry with the "
    "same key and payload gets the first answer back (`Idempotent-Replayed: true`); the same key "
    "with another payload is 422, and while the first request runs, 409."
)


Pending = Callable[[], Awaitable[StoredResponse]]
_pending: ContextVar[Pending | None] = ContextVar("writesafe_pending_endpoint", default=None)


async def _run_endpoint(request: dict[str, Any]) -> StoredResponse:
    """The write of every guarded route: the endpoint call its request put in this task's context.

    `request` (method, path, query and body) is what the operation is fingerprinted and audited by.
    """
    pending = _pending.get()
    if pending is None:
        raise RuntimeError(f"a guarded route runs only inside its HTTP request: {request['path']}")
    return await pending()


def idempotent_route(
    ws: WriteSafe,
    name: str | None = None,
    *,
    scope: Callable[..., Any] | None = None,
    required: bool = True,
    lookup: Callable[[Any], Awaitable[Any]] | None = None,
    adapter: Adapter | None = None,
    **options: Any,
) -> Callable[[Endpoint], Endpoint]:
    """Guard a FastAPI endpoint by the request's `Idempotency-Key` header.

    Put it under the route decorator. `name` (default: the function's name) is the tool name in
    the ledger. `scope` is a FastAPI dependency returning the caller's scope, e.g. the tenant of
    the authenticated user. Without a key the route answers 400, unless `required=False`, which
    runs it unguarded. `lookup(operation)` returns `Found(body)` when the effect of an unknown
    outcome exists downstream. Other `options` are the bounds of `ws.tool` (timeout, ...); a
    duplicate of a running request is 409 at once unless `wait_timeout=` asks it to wait that
    long first. The endpoint's own `HTTPException(4xx)` keeps its status.
    `add_problem_handlers(app)` makes the app's OpenAPI document the header and the problems
    the route answers (400, 409, 422, 502, 503, 504) as they are.
    """

    def decorate(endpoint: Endpoint) -> Endpoint:
        if not inspect.iscoroutinefunction(endpoint):
            raise TypeError(f"{endpoint.__name__}: idempotent_route guards async endpoints")
        signature = _signature(endpoint, scope)
        tool = ws.tool(
            name or endpoint.__name__,
            lookup=None if lookup is None else found_bodies(lookup),
            adapter=RefusalAdapter(adapter or DEFAULT_ADAPTER, http_exception_refusal),
            **tool_options(options),
        )(_run_endpoint)

        async def guarded(**values: Any) -> Any:
            request: Request = values.pop(_REQUEST)
            response: Response = values.pop(_RESPONSE)
            del values[_KEY]  # declared for OpenAPI; read from the raw headers below
            caller_scope = values.pop(_SCOPE, DEFAULT_SCOPE)
            route = request.scope["route"]
            try:
                key = parse_idempotency_key(request.headers.getlist(HEADER), required=required)
            except WriteSafeError as error:
                return problem_response(error.envelope, status=MALFORMED_KEY_STATUS)
            if key is None:
                return await endpoint(**values)
            try:
                payload = await _request_payload(request)
                token = _pending.set(functools.partial(_respond, endpoint, values, route, response))
                try:
                    invocation = await tool.invoke((payload,), {}, key=key, scope=caller_scope)
                finally:
                    _pending.reset(token)
            except WriteSafeError as error:
                return problem_response(error.envelope)
            return _render(invocation.value, route, replayed=invocation.replayed)

        # Like functools.wraps minus __wrapped__: FastAPI must read the signature below.
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(guarded, attribute, getattr(endpoint, attribute))
        guarded.__signature__ = signature  # type: ignore[attr-defined]
        setattr(guarded, GUARDED, required)  # read by the OpenAPI of add_problem_handlers
        return guarded

    return decorate


def _signature(endpoint: Endpoint, scope: Callable[..., Any] | None) -> inspect.Signature:
    """The endpoint's parameters (all keyword-only: FastAPI passes keywords) plus the request,
    the temporal response, the documented header and the scope dependency."""
    signature = inspect.signature(endpoint, eval_str=True)
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = []
    for parameter in signature.parameters.values():
        if parameter.name in (_REQUEST, _RESPONSE, _KEY, _SCOPE):
            raise TypeError(f"{endpoint.__name__}: parameter name {parameter.name} is reserved")
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(f"{endpoint.__name__}: *args/**kwargs cannot be FastAPI parameters")
        parameters.append(parameter.replace(kind=keyword))
    header = Annotated[str | None, Header(alias=HEADER, description=_KEY_DESCRIPTION)]
    parameters += [
        inspect.Parameter(_REQUEST, keyword, annotation=Request),
        inspect.Parameter(_RESPONSE, keyword, annotation=Response),
        inspect.Parameter(_KEY, keyword, annotation=header, default=None),
    ]
    if scope is not None:
        parameters.append(
            inspect.Parameter(_SCOPE, keyword, annotation=Annotated[str, Depends(scope)])
        )
    return signature.replace(parameters=parameters)


async def _request_payload(request: Request) -> dict[str, Any]:
    """The request's fingerprint (see `_http`); a form body FastAPI already streamed into
    `request.form()` counts by its fields."""
    return request_payload(
        request.method, request.url.path, request.query_params.multi_items(), await _body(request)
    )


async def _body(request: Request) -> Any:
    try:
        return body_payload(await request.body())
    except RuntimeError:  # a form body FastAPI already streamed into request.form()
        form = await request.form()
        return {
            "form": sorted(
                (name, value if isinstance(value, str) else f"file:{value.filename}:{value.size}")
                for name, value in form.multi_items()
            )
        }


async def _respond(
    endpoint: Endpoint, values: dict[str, Any], route: APIRoute, response: Response
) -> StoredResponse:
    """Run the endpoint and serialize its answer the way FastAPI would (response model included)."""
    value = await endpoint(**values)
    if isinstance(value, Response):
        return StoredResponse(status_code=value.status_code, body=_json_body(value))
    content = await serialize_response(
        field=route.response_field,
        response_content=value,
        include=route.response_model_include,
        exclude=route.response_model_exclude,
        by_alias=route.response_model_by_alias,
        exclude_unset=route.response_model_exclude_unset,
        exclude_defaults=route.response_model_exclude_defaults,
        exclude_none=route.response_model_exclude_none,
    )
    return StoredResponse(status_code=response.status_code or route.status_code, body=content)


def _json_body(response: Response) -> Any:
    body = getattr(response, "body", None)
    if not isinstance(body, bytes):
        raise TypeError("a guarded endpoint must answer JSON, not a streamed body")
    return json_body(body)


def _render(stored: StoredResponse, route: APIRoute, *, replayed: bool) -> Response:
    answer = stored_answer(stored, default_status=route.status_code or 200, replayed=replayed)
    return Response(answer.content, answer.status, headers=answer.headers)
