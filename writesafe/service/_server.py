"""The uvicorn server of `writesafe serve`: deadlines for slow clients, a connection bound, and
forwarded addresses trusted only from the proxies the operator names.

uvicorn times out only the idle time *between* requests (`timeout_keep_alive`), and resets even
that on every byte; a client that trickles its headers, or opens a socket and sends nothing, holds
its connection for ever, and ASGI middleware cannot help because it runs only once the headers
are in. So the HTTP protocol here is uvicorn's h11 protocol with two deadlines of its own, after
hyper's header read timeout: a request's headers must all arrive within `header_timeout` seconds
of the connection opening (or of the first byte of a later request on it), and its body within
`body_timeout` seconds of the headers. A trickle never extends a deadline; a connection that
misses one is closed. Once the request is in, no deadline runs: a slow answer is the service's
to bound, not the client's.

uvicorn trusts `X-Forwarded-For` from loopback by default, so on a shared host anyone could name
any address, and the per-address rate limit with it. Here no forwarded header is trusted unless
`--forwarded-allow-ips` names the proxies (uvicorn's `proxy_headers`, `forwarded_allow_ips`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from writesafe.service._settings import ServiceSettings

logger = logging.getLogger("writesafe.service")


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request does not arrive in time."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._awaiting: str | None = None  # "headers", "body", or nothing while answering

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Idle until the next request's first byte: uvicorn's keep-alive timeout bounds that.
        self._disarm()
        self._awaiting = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Arm the deadline of what the connection now waits for (once per request and part)."""
        state = self.conn.their_state
        awaiting = "headers" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if awaiting == self._awaiting or self.transport.is_closing():
            return
        self._disarm()
        self._awaiting = awaiting
        if awaiting is not None:
            timeout = self.header_timeout if awaiting == "headers" else self.body_timeout
            self._deadline = self.loop.call_later(timeout, self._expired, awaiting, timeout)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, awaiting: str, timeout: float) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            logger.info("closed %s: its request %s took over %gs", client, awaiting, timeout)
            self.transport.close()


def server_config(
    app: Any,
    settings: ServiceSettings,
    *,
    host: str,
    port: int,
    log_level: str = "info",
    forwarded_allow_ips: str = "",
) -> uvicorn.Config:
    """uvicorn's configuration for the service: its deadlines, its connection bound, and
    forwarded headers trusted only from `forwarded_allow_ips` (comma-separated addresses or
    networks, `*` for any; empty: none)."""
    protocol = type(
        "DeadlineH11Protocol",
        (DeadlineH11Protocol,),
        {"header_timeout": settings.header_timeout, "body_timeout": settings.body_timeout},
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        server_header=False,
        http=protocol,
        timeout_keep_alive=settings.keep_alive_timeout,
        limit_concurrency=settings.max_connections,
        proxy_headers=bool(forwarded_allow_ips),
        forwarded_allow_ips=forwarded_allow_ips or None,
    )
