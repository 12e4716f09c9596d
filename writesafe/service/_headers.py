"""Headers every JSON answer carries: `nosniff`, and `no-store` for what is a tenant's data.

A status, a listing or a problem holds one tenant's data; a shared cache or a browser's disk must
not keep it, and a browser must not guess another type for it. The console's HTML pages set
their own (stricter) headers; this covers every JSON answer, problems from any handler included,
whatever route or middleware produced it.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_JSON_TYPES = ("application/json", "application/problem+json")
JSON_ANSWER_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


class JsonAnswerHeaders:
    """ASGI middleware adding `X-Content-Type-Options: nosniff` and `Cache-Control: no-store`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if headers.get("content-type", "").startswith(_JSON_TYPES):
                    headers.update(JSON_ANSWER_HEADERS)
            await send(message)

        await self.app(scope, receive, with_headers)
