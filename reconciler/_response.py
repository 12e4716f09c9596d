"""How a tool hands a downstream's raw answer to its adapter: raise it.

A tool that talks HTTP through httpx just calls `response.raise_for_status()`: the
`httpx.HTTPStatusError` carries the response. Any other client raises `DownstreamError` with the
status, headers and body it got. Either way the adapter sees the same `RawResponse`.
"""

from __future__ import annotations

import json as jsonlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

HeaderItems = Mapping[str, str] | Iterable[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class RawResponse:
    """A downstream's answer as received: status, headers (in order) and body bytes."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    @classmethod
    def from_httpx(cls, response: httpx.Response) -> RawResponse:
        """The response's status, headers and (already read) body; a body still streaming is
        not read here, because classifying a failure must not wait on the network."""
        try:
            body = response.content
        except httpx.ResponseNotRead:
            body = b""
        return cls(response.status_code, tuple(response.headers.multi_items()), body)

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), if present."""
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)


class DownstreamError(Exception):
    """Raise from a tool when the downstream answered with a failure the adapter should classify.

    `body` is the raw body; `json=` is a shortcut that encodes a JSON value as the body.
    """

    def __init__(
        self,
        status: int,
        body: bytes | str = b"",
        *,
        json: Any = None,
        headers: HeaderItems = (),
    ) -> None:
        if json is not None:
            body = jsonlib.dumps(json)
        raw = body.encode("utf-8", "replace") if isinstance(body, str) else body
        items = headers.items() if isinstance(headers, Mapping) else headers
        self.response = RawResponse(status, tuple((str(k), str(v)) for k, v in items), raw)
        super().__init__(f"downstream answered {status}")


def response_of(error: BaseException) -> RawResponse | None:
    """The raw response an exception carries, if any."""
    if isinstance(error, DownstreamError):
        return error.response
    if isinstance(error, httpx.HTTPStatusError):
        return RawResponse.from_httpx(error.response)
    return None
