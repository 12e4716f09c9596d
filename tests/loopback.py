"""Loopback serving for tests: a free port, an ASGI app under uvicorn inside a test's event
loop, and the real `writesafe serve` command in a process of its own."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn


def free_port() -> int:
    """A loopback port that is free now (for a server in another process to bind)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def loopback_socket() -> socket.socket:
    """A TCP socket bound to a free loopback port, for uvicorn to serve on. IPPROTO_TCP is named:
    asyncio sets TCP_NODELAY only on sockets whose protocol says TCP, and with protocol 0 Nagle
    held each keep-alive answer ~40 ms for the client's delayed ACK."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    return sock


def wait_until_healthy(process: subprocess.Popen[str], base: str, timeout: float = 60) -> None:
    """Return once `base`/healthz answers 200; fail as soon as `process` exits instead."""
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, process.communicate()
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{base}/healthz").status_code == 200:
                return
        assert time.monotonic() < deadline, "writesafe serve did not start"
        time.sleep(0.1)


@contextlib.contextmanager
def serving(command: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> Iterator[str]:
    """`command` (a `writesafe serve …`) with `--port` a free port, in a process of its own;
    yields its base URL once healthy, then stops it with SIGTERM and expects a clean exit."""
    port = free_port()
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, base)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, process.communicate()


@contextlib.asynccontextmanager
async def on_loopback(app: Any, *, lifespan: str = "auto") -> AsyncIterator[str]:
    """`app` served on an ephemeral loopback port; yields its base URL. `lifespan="off"` for an
    app whose stores the test opens and closes itself."""
    with loopback_socket() as sock:
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
