"""One more try of a read whose database connection turned out to be dead.

When PostgreSQL drops the service's connections (a restart, a failover, an idle-connection reaper,
`pg_terminate_backend`), each pooled connection fails once when it is next used. A read is safe
to repeat, and the failure has already discarded the dead connection (and its idle siblings), so
a read that fails that way is tried once more, on a fresh connection, and logged; a second
failure is a real outage and answers 503 as before. Pre-pinging every checkout would catch the
same case for one extra round trip on every statement, writes included.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
from sqlalchemy.exc import DBAPIError

logger = logging.getLogger("writesafe.service")

T = TypeVar("T")

# What a connection that the server closed raises, as the driver reports it.
_DROPPED: tuple[type[BaseException], ...] = (
    asyncpg.InterfaceError,  # includes ConnectionDoesNotExistError
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    ConnectionError,
)


async def read(what: str, action: Callable[[], Awaitable[T]]) -> T:
    """`action()`, tried once more if its connection had been dropped."""
    try:
        return await action()
    except DBAPIError as error:
        if not (error.connection_invalidated or _dropped(error.orig)):
            raise
        logger.warning(
            "%s: the database connection had been dropped (%s); reading again on a new one",
            what,
            type(error.orig).__name__,
        )
    return await action()


def _dropped(cause: BaseException | None) -> bool:
    while cause is not None:
        if isinstance(cause, _DROPPED):
            return True
        cause = cause.__cause__
    return False
