"""The service in a child process on an ephemeral loopback port, for the load benchmarks.

A child process, so that the server's event loop and CPU are its own and not the load's: what
the benchmark measures is what a client of `writesafe serve` would see.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from multiprocessing.queues import Queue
from typing import Any

import uvicorn

from bench._setup import Isolation
from writesafe import WriteSafe, WriteSafeSettings
from writesafe.service import ServiceSettings, create_app

POOL = 3  # the guard's share of the server's PostgreSQL connections (a shared server)


@dataclass(frozen=True)
class Served:
    base_url: str
    pid: int


def _serve(
    url: str,
    redis_url: str | None,
    schema: str,
    prefix: str,
    service: dict[str, Any],
    port: Queue[int],
) -> None:
    """The child process: the service on an ephemeral loopback port (reported on `port`)."""

    async def serve() -> None:
        logging.basicConfig(level=logging.WARNING)  # the service says why it answered a 503
        settings = WriteSafeSettings(pool_size=POOL)
        async with WriteSafe(
            url, redis_url, schema=schema, redis_prefix=prefix, settings=settings
        ) as ws:
            # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets whose proto says TCP;
            # with proto 0, Nagle held each keep-alive answer ~40 ms for the client's delayed ACK.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.bind(("127.0.0.1", 0))
            sock.listen(2048)  # connections made before uvicorn serves wait in the backlog
            app = create_app(ws, ServiceSettings(**service))
            server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
            port.put(sock.getsockname()[1])
            await server.serve(sockets=[sock])

    asyncio.run(serve())


@asynccontextmanager
async def served(
    database_url: str, redis_url: str | None, iso: Isolation, service: dict[str, Any]
) -> AsyncIterator[Served]:
    """The service over `iso`'s stores with `service`'s settings, stopped on the way out."""
    context = multiprocessing.get_context("spawn")
    port: Queue[int] = context.Queue()
    child = context.Process(
        target=_serve,
        args=(database_url, redis_url, iso.schema, iso.redis_prefix, service, port),
    )
    child.start()
    try:
        assert child.pid is not None
        yield Served(f"http://127.0.0.1:{port.get(timeout=60)}", child.pid)
    finally:
        child.terminate()
        child.join(timeout=30)
