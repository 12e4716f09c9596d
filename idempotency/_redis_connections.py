"""The key store's hot commands: packed by hand and sent on redis-py connections kept idle here.

redis-py's client sends each command through its retry wrapper, event dispatcher and
observability recorders, and its pool takes a lock and probes the socket on every checkout: a GET
through it took 71–91 µs where the same GET sent here took 44–54 µs (`bench.guard`, recorded in
docs/performance.md). The guard sends two fixed commands per call (the claim and the cache fill),
so it frames them itself and uses redis-py's `Connection` directly: connecting, authentication,
TLS, database selection and reply parsing stay redis-py's. Several commands can share one write
(`execute_all`): the key store sends queued cache fills ahead of a claim.

On a Redis Cluster the same two commands (`send`) go through redis-py's `RedisCluster`, which
routes each to the node that holds its key's slot and follows the cluster when slots move: every
command the key store sends names one key, so it never spans two slots.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis
import redis.cluster
from redis.asyncio import ConnectionPool, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.connection import ConnectionInterface
from redis.exceptions import ConnectionError, ResponseError


def pack(*arguments: bytes) -> bytes:
    """One command in the Redis protocol (RESP): an array of bulk strings."""
    parts = [b"*%d\r\n" % len(arguments)]
    for argument in arguments:
        parts.append(b"$%d\r\n%s\r\n" % (len(argument), argument))
    return b"".join(parts)


class RedisConnections:
    """Connections made by `pool` (so configured by its URL), reused newest first; as many as
    commands run at once, which the key store bounds.

    A connection whose command fails or is cancelled (by the key store's timeout) is already
    closed by redis-py, so a reply still on its way is never read as the next command's; it is
    dropped, and so are the idle ones when it broke, since a restarted server has closed them
    all. A command that failed on a reused connection is sent once more on a new one: every
    command the key store sends is safe to repeat (see `RedisKeyStore.claim` for the one that
    needs a second look).
    """

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._idle: list[AbstractConnection] = []

    async def send(self, *arguments: bytes) -> Any:
        """Send one command, given as its arguments, and return its reply."""
        return await self.execute(pack(*arguments))

    async def execute(self, command: bytes) -> Any:
        """Send a packed command and return its reply; a Redis error reply is raised."""
        (reply,) = await self.execute_all(command, 1)
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def execute_all(self, commands: bytes, count: int) -> list[Any]:
        """Send `count` packed commands in one write and return their replies in order, a Redis
        error reply as its `ResponseError` (the replies after it are read all the same)."""
        reused = bool(self._idle)
        try:
            return await self._round_trip(commands, count)
        except ConnectionError:
            if not reused:
                raise
            await self._close_idle()
            return await self._round_trip(commands, count)

    async def close(self) -> None:
        await self._close_idle()

    async def _close_idle(self) -> None:
        idle, self._idle = self._idle, []
        await asyncio.gather(
            *(connection.disconnect(nowait=True) for connection in idle), return_exceptions=True
        )

    async def _round_trip(self, commands: bytes, count: int) -> list[Any]:
        connection = self._idle.pop() if self._idle else self._new_connection()
        await connection.send_packed_command(commands, check_health=False)
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(await connection.read_response())
            except ResponseError as error:
                replies.append(error)  # a whole reply was read: the connection is in step
        self._idle.append(connection)
        return replies

    def _new_connection(self) -> AbstractConnection:
        connection: AbstractConnection = self._pool.make_connection()  # type: ignore[no-untyped-call]
        return connection


class BlockingRedisConnections:
    """`RedisConnections` for threads without an event loop (the sync face's claims): the
    same reuse and one resend on a new connection, on blocking sockets. Each command checks a
    connection out of the idle list (a list's pop and append are atomic), so threads never share
    one mid-command."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self._pool = pool
        self._idle: list[ConnectionInterface] = []

    def send(self, *arguments: bytes) -> Any:
        """Send one command, given as its arguments, and return its reply."""
        return self.execute(pack(*arguments))

    def execute(self, command: bytes) -> Any:
        """Send a packed command and return its reply; a Redis error reply is raised."""
        reused = bool(self._idle)
        try:
            return self._round_trip(command)
        except ConnectionError:
            if not reused:
                raise
            self.close()
            return self._round_trip(command)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            with contextlib.suppress(OSError):
                connection.disconnect()  # type: ignore[no-untyped-call]

    def _round_trip(self, command: bytes) -> Any:
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self._pool.make_connection()
        try:
            connection.send_packed_command([command], check_health=False)  # type: ignore[no-untyped-call]
            reply = connection.read_response()
        except ResponseError:
            self._idle.append(connection)
            raise
        self._idle.append(connection)  # a failed one is left out: redis-py closed it
        return reply


# redis-py's SET callback turns a reply into a bool unless told the command had GET; the option
# leaves the replies of the other commands sent here (DEL) as they are.
_AS_SENT = {"get": True}


class ClusterConnections:
    """`send` on a Redis Cluster, through `cluster` (redis-py's client, which routes by slot)."""

    def __init__(self, cluster: RedisCluster) -> None:
        self._cluster = cluster

    async def send(self, *arguments: bytes) -> Any:
        """Send one single-key command, given as its arguments, and return its reply."""
        name, *rest = arguments  # the client routes by the command's name, as text
        return await self._cluster.execute_command(name.decode(), *rest, **_AS_SENT)

    async def close(self) -> None:
        """Nothing of its own: the connections are the cluster client's, closed with it."""


class BlockingClusterConnections:
    """`ClusterConnections` for threads without an event loop (redis-py's blocking client is
    safe to share between threads)."""

    def __init__(self, cluster: redis.cluster.RedisCluster) -> None:
        self._cluster = cluster

    def send(self, *arguments: bytes) -> Any:
        """Send one single-key command, given as its arguments, and return its reply."""
        name, *rest = arguments
        return self._cluster.execute_command(name.decode(), *rest, **_AS_SENT)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self._cluster.close()
