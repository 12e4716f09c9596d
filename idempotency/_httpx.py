"""The httpx integration: every request a guarded write sends passes its fence first.

A transport, not an event hook, because a transport runs once per request actually sent
(redirects and auth retries included) and last, immediately before the connection is used. Inside a
guarded write it admits the request through the execution's fence (`LeaseLost` if the lease may
have run out) and forwards the operation's key and fencing token, so a downstream that
deduplicates on the key, or refuses tokens lower than the highest it has seen for a key, is safe
even from a writer that stalled past its fence; with tracing on, the execution span's trace context
goes along (`traceparent`). Outside a guarded write it only passes requests on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from writesafe.idempotency._context import OperationContext, active_operation
from writesafe.idempotency._tracing import inject_trace_context

KEY_HEADER = "Idempotency-Key"
TOKEN_HEADER = "Fencing-Token"

KeyValue = Callable[[OperationContext], str]


def _operation_key(operation: OperationContext) -> str:
    return operation.key


class _Fencing:
    """What both transports do to a request before they send it."""

    def __init__(self, key_value: KeyValue, key_header: str, token_header: str) -> None:
        self._key_value = key_value
        self._key_header = key_header
        self._token_header = token_header

    def admit(self, request: httpx.Request) -> None:
        operation = active_operation()
        if operation is None:
            return
        operation.fence()
        if self._key_header not in request.headers:  # a key the caller set itself stays
            request.headers[self._key_header] = self._key_value(operation)
        request.headers[self._token_header] = str(operation.fencing_token)
        inject_trace_context(request.headers)  # the execution's span, when tracing is on


class FencedTransport(httpx.AsyncBaseTransport):
    """Wraps an async transport (default: httpx's own) so that guarded writes send fenced.

    `key_value` makes the forwarded key of an operation (default: its key; include the scope if
    one downstream serves several tenants). A key header the request already has is kept.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        key_value: KeyValue = _operation_key,
        key_header: str = KEY_HEADER,
        token_header: str = TOKEN_HEADER,
    ) -> None:
        self._transport = transport or httpx.AsyncHTTPTransport()
        self._fencing = _Fencing(key_value, key_header, token_header)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._fencing.admit(request)
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self._transport.aclose()


class SyncFencedTransport(httpx.BaseTransport):
    """`FencedTransport` for `httpx.Client`, for writes that send from synchronous code."""

    def __init__(
        self,
        transport: httpx.BaseTransport | None = None,
        *,
        key_value: KeyValue = _operation_key,
        key_header: str = KEY_HEADER,
        token_header: str = TOKEN_HEADER,
    ) -> None:
        self._transport = transport or httpx.HTTPTransport()
        self._fencing = _Fencing(key_value, key_header, token_header)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._fencing.admit(request)
        return self._transport.handle_request(request)

    def close(self) -> None:
        self._transport.close()


def fenced_client(*, key_value: KeyValue = _operation_key, **options: Any) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` whose requests inside guarded writes are fenced (`options` go to
    the client; a `transport` option is wrapped)."""
    transport = FencedTransport(options.pop("transport", None), key_value=key_value)
    return httpx.AsyncClient(transport=transport, **options)
