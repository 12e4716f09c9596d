"""Redis servers of a test's own, on free loopback ports, stopped afterwards.

A test that stalls Redis (`CLIENT PAUSE`) or empties it must do so on a server of its own: on
the shared one it would stall, or empty, every other test running at the same time.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from redis import Redis

from tests.loopback import free_port


def available() -> bool:
    return shutil.which("redis-server") is not None


@contextlib.contextmanager
def redis_servers(ports: Sequence[int], *options: str) -> Iterator[Path]:
    """One `redis-server` per port with `options` added, each in a folder of its own under the
    folder yielded (`<folder>/<port>`), without persistence; yields once every one answers."""
    folder = Path(tempfile.mkdtemp(prefix="ws-redis-"))
    servers: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            node = folder / str(port)
            node.mkdir()
            command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
            command += ["--dir", str(node), "--save", "", "--appendonly", "no", *options]
            servers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, cwd=node))
        for port, server in zip(ports, servers, strict=True):
            _wait_until_answering(port, server)
        yield folder
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A plain Redis of the test's own; yields its URL."""
    port = free_port()
    with redis_servers([port]):
        yield f"redis://127.0.0.1:{port}/0"


def _wait_until_answering(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while not _answers(port):
        if server.poll() is not None:
            raise RuntimeError(f"redis-server on port {port} exited with {server.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"redis-server on port {port} does not answer")
        time.sleep(0.05)


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError, ConnectionError), Redis(port=port) as node:
        return bool(node.ping())
    return False
