"""The connections of the PostgreSQL writer: an idle list and a semaphore, nothing more.

asyncpg's pool hands a connection back through `asyncio.shield`, which costs a task and a loop
iteration on every release (about 60 µs of CPU per statement here, a tenth of a guarded call).
The writer needs less than a general pool: its statements run in autocommit and leave no session
state, so a connection can be reused as it is. One that failed in any way is closed instead,
together with the idle ones when the failure was the connection itself (a restarted server or a
terminated backend takes its siblings with it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import asyncpg

# Failures of the connection rather than of the statement.
_BROKEN: tuple[type[BaseException], ...] = (
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    OSError,
)


class ConnectionPool:
    """At most `size` asyncpg connections, opened on demand and reused newest first."""

    def __init__(self, connect: Mapping[str, Any], size: int) -> None:
        self._connect = dict(connect)
        self._slots = asyncio.Semaphore(size)
        self._idle: list[asyncpg.Connection] = []

    async def acquire(self) -> asyncpg.Connection:
        """An idle connection, or a new one; wait while `size` are in use."""
        await self._slots.acquire()
        try:
            return self._idle.pop() if self._idle else await asyncpg.connect(**self._connect)
        except BaseException:
            self._slots.release()
            raise

    def release(self, connection: asyncpg.Connection) -> None:
        """Return a connection whose statement completed."""
        if not connection.is_closed():
            self._idle.append(connection)
        self._slots.release()

    def discard(self, connection: asyncpg.Connection, error: BaseException) -> None:
        """Close a connection whose statement failed or was cancelled: its state is unknown."""
        connection.terminate()
        if isinstance(error, _BROKEN):
            self._terminate_idle()
        self._slots.release()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        await asyncio.gather(*(connection.close() for connection in idle), return_exceptions=True)

    def _terminate_idle(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.terminate()
