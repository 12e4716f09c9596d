"""Serving an ASGI app with uvicorn on 127.0.0.1 inside a test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn


@contextlib.asynccontextmanager
async def on_loopback(app: Any, *, lifespan: str = "auto") -> AsyncIterator[str]:
    """`app` served on an ephemeral loopback port; yields its base URL. `lifespan="off"` for an
    app whose stores the test opens and closes itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
            await task
