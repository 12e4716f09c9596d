"""The httpx integration: every request a guarded write sends passes its fence first.

A transport, not an event hook, because a transport runs once per request actually sent
(redirects and auth retries included). Inside a guarded write it refuses a request whose fence has
closed, admits it, and checks the fence again at the last moment: httpcore's `trace` extension
at `send_request_headers`, right before the first byte is written with no await in between, so a
request that waited for a connection past the fence (a stall, a blocked loop) is refused, not
sent. It forwards the operation's key and fencing token, so a downstream that deduplicates on the
key, or refuses tokens lower than the highest it has seen for a key, is safe even from a writer
that stalls after the admission; with tracing on, the execution span's trace context goes along
(`traceparent`). Outside a guarded write it only passes requests on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from writesafe.idempotency._context import OperationContext, active_operation, fence_of
from writesafe.idempotency._fence import Fence
from writesafe.idempotency._tracing import inject_trace_context

KEY_HEADER = "Idempotency-Key"
TOKEN_HEADER = "Fencing-Token"

KeyValue = Callable[[OperationContext], str]
AsyncTrace = Callable[[str, dict[str, Any]], Awaitable[None]]
SyncTrace = Callable[[str, dict[str, Any]], None]

# httpcore's trace event just before a request's first byte is written (`http11.`, `http2.`).
_WRITE_STARTS = ".send_request_headers.started"


def _operation_key(operation: OperationContext) -> str:
    return operation.key


class _Fencing:
    """What both transports do to a request before they send it."""

    def __init__(self, key_value: KeyValue, key_header: str, token_header: str) -> None:
        self._key_value = key_value
        self._key_header = key_header
        self._token_header = token_header

    def prepare(self, request: httpx.Request) -> Fence | None:
        """Admit `request` through its write's fence and mark it; the fence to check again as it
        is written (None outside a guarded write)."""
        operation = active_operation()
        if operation is None:
            return None
        fence = fence_of(operation)
        fence.admit()  # refused before it waits for a connection
        if self._key_header not in request.headers:  # a key the caller set itself stays
            request.headers[self._key_header] = self._key_value(operation)
        request.headers[self._token_header] = str(operation.fencing_token)
        inject_trace_context(request.headers)  # the execution's span, when tracing is on
        return fence


class _WriteCheck:
    """Checks a request's fence again, once, as its write starts (httpcore's `trace` event); a
    transport that is not httpcore's never calls it: its requests are fenced once, when admitted."""

    def __init__(self, fence: Fence) -> None:
        self._fence = fence
        self._checked = False  # one admission is checked (and withdrawn) at most once

    def __call__(self, event: str) -> None:
        if not self._checked and event.endswith(_WRITE_STARTS):
            self._checked = True
            self._fence.recheck()


def _rechecking(fence: Fence, trace: AsyncTrace | None) -> AsyncTrace:
    """The request's `trace` callback: the check at the write, then the request's own callback,
    if it had one (which must not wait: it runs between the check and the write)."""
    check = _WriteCheck(fence)

    async def check_then_trace(event: str, info: dict[str, Any]) -> None:
        check(event)
        if trace is not None:
            await trace(event, info)

    return check_then_trace


def _rechecking_sync(fence: Fence, trace: SyncTrace | None) -> SyncTrace:
    """`_rechecking` for the sync transport."""
    check = _WriteCheck(fence)

    def check_then_trace(event: str, info: dict[str, Any]) -> None:
        check(event)
        if trace is not None:
            trace(event, info)

    return check_then_trace


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
        fence = self._fencing.prepare(request)
        if fence is not None:
            request.extensions["trace"] = _rechecking(fence, request.extensions.get("trace"))
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
        fence = self._fencing.prepare(request)
        if fence is not None:
            request.extensions["trace"] = _rechecking_sync(fence, request.extensions.get("trace"))
        return self._transport.handle_request(request)

    def close(self) -> None:
        self._transport.close()


def fenced_client(*, key_value: KeyValue = _operation_key, **options: Any) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` whose requests inside guarded writes are fenced (`options` go to
    the client; a `transport` option is wrapped)."""
    transport = FencedTransport(options.pop("transport", None), key_value=key_value)
    return httpx.AsyncClient(transport=transport, **options)
