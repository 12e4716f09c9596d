"""The request body limit and the caller's admission, both enforced before any body is read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from writesafe.service._problems import problem_response

Admission = Callable[[Request], Awaitable[Response | None]]
"""Decides on a request's headers alone: a refusal to send, or None to read its body."""


class BodyLimit:
    """Refuse bodies over `max_bytes` with a 413 problem, reading at most `max_bytes + 1` bytes,
    and only once `admit` let the request in.

    Starlette's own limiter answers text/plain when a route never reads the body; buffering the
    (small) body here first keeps every refusal problem+json, whatever the route. FastAPI reads
    a body before it runs a route's dependencies, authentication included, so `admit` is where
    a caller is authenticated before its body is waited for: a client without a valid key can
    neither make the service buffer a body nor hold a request open while it trickles one.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, admit: Admission | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.admit = admit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        if self.admit is not None and _has_body(headers):
            refusal = await self.admit(Request(scope))
            if refusal is not None:
                refusal.headers["Connection"] = "close"  # its body is never read
                await refusal(scope, receive, send)
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before sending the whole body
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"the request body is larger than {self.max_bytes} bytes"
        await problem_response(413, detail, headers={"Connection": "close"})(scope, receive, send)


def _has_body(headers: Headers) -> bool:
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
