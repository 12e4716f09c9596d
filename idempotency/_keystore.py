"""The Redis key store: a fenced in-flight lease and the cached final result, as an accelerator.

Nothing here is trusted for correctness: the ledger is consulted before any execution. Every
method degrades instead of failing; while Redis is unreachable a circuit breaker skips it for a
few seconds so a dead Redis costs one timeout, not one per call.

One key per operation holds either its lease (`L:<token>`) or its cached outcome (`O:<entry>`),
so that a claim is one plain `SET key L:<token> NX PX <lease> GET` (Redis 7.0+): it takes the
lease if the key is free and answers with what holds the key otherwise. A replay costs what a
GET costs; a Lua script would cost a third more. The other write of a first execution, the
outcome's copy, is written behind the answer and rides in the write of the next claim made on
the loop (`cache`): a first execution costs one round trip to Redis, not two, once calls follow
one another.

A `redis+cluster://` (or `rediss+cluster://`) URL names any node of a Redis Cluster: the same
commands then go through redis-py's `RedisCluster`, which sends each to the node holding its key.
One key per operation means every command and script touches one slot.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redis import ConnectionPool as SyncConnectionPool
from redis.asyncio import ConnectionPool, Redis, RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import RedisClusterException, RedisError, ResponseError

from writesafe.idempotency._metrics import STORE_DEGRADED
from writesafe.idempotency._redis_connections import (
    BlockingClusterConnections,
    BlockingRedisConnections,
    ClusterConnections,
    RedisConnections,
    pack,
)
from writesafe.idempotency._settings import CLUSTER_SCHEMES
from writesafe.idempotency._store_answers import (
    DEFAULT_MAX_CACHED_BYTES,
    CachedOutcome,
    LeaseState,
    StoreClaim,
)

logger = logging.getLogger("writesafe")
T = TypeVar("T")

_LEASE = "L:"
_OUTCOME = "O:"

# KEYS: the operation's key. ARGV: the lease value. Release the lease only if it is still ours.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: the operation's key. ARGV: the lease value, lease ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

_MAPPING_SECONDS = 5.0  # the longest a cluster client may take to learn the cluster's layout
# What a command that did not reach Redis raises: redis-py's cluster client adds errors of its
# own (no node holds the slot, the cluster could not be mapped) outside `RedisError`.
_FAILURES = (RedisError, RedisClusterException, OSError)

_UNAVAILABLE = StoreClaim(LeaseState.UNAVAILABLE)
_ACQUIRED = StoreClaim(LeaseState.ACQUIRED)


class RedisKeyStore:
    """Lease and result cache for `(scope, key)` in Redis, under a key prefix."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "writesafe",
        outcome_ttl: float = 86_400.0,
        max_result_bytes: int = DEFAULT_MAX_CACHED_BYTES,
        socket_timeout: float = 0.5,
        breaker_seconds: float = 5.0,
        max_connections: int = 50,
    ) -> None:
        self.prefix = prefix
        self.cluster = url.startswith(CLUSTER_SCHEMES)
        self._url = url.replace("+cluster", "", 1) if self.cluster else url
        self._max_connections = max_connections
        self._outcome_ttl = _ms(outcome_ttl)
        self._max_result_bytes = max_result_bytes
        self._breaker_seconds = breaker_seconds
        self._open_until = 0.0
        self._timeout = socket_timeout
        # Connected only when a thread without a loop claims (`claim_now`); bound to no loop, so
        # kept when the loop's connections are dropped. Its socket timeout bounds each command
        # as `_guarded` bounds the loop's commands.
        timeouts = {"socket_connect_timeout": socket_timeout, "socket_timeout": socket_timeout}
        self._blocking: BlockingRedisConnections | BlockingClusterConnections = (
            BlockingClusterConnections(SyncRedisCluster.from_url(self._url, **timeouts))
            if self.cluster
            else BlockingRedisConnections(SyncConnectionPool.from_url(self._url, **timeouts))
        )
        self._connect()

    def _connect(self) -> None:
        """Make the connection pools, which belong to the event loop that first uses them."""
        # Calls beyond `max_connections` queue rather than failing in redis-py's pool with
        # MaxConnectionsError (which would trip the breaker under a burst); redis-py's blocking
        # pool would queue too, at the cost of a condition and a timeout on every command. The
        # command timeout is applied around each call (`_guarded`) rather than by redis-py,
        # whose `socket_timeout` (5 s unless disabled) sends every command through
        # `asyncio.wait_for`: a task per command on Python 3.11.
        self._slots = asyncio.Semaphore(self._max_connections)
        options = {
            "max_connections": self._max_connections,
            "socket_connect_timeout": self._timeout,
            "socket_timeout": None,
        }
        self._hot: RedisConnections | ClusterConnections
        self.redis: Redis | RedisCluster
        if self.cluster:
            # Connections are per node, made as commands reach it (a pool of each node's).
            self.redis = RedisCluster.from_url(self._url, **options)
            self._hot = ClusterConnections(self.redis)
        else:
            pool = ConnectionPool.from_url(self._url, **options)
            # The claim and the cache fill, on every guarded call, skip redis-py's command
            # layer; the rest (renewals, releases, health checks) goes through its client.
            self._hot = RedisConnections(pool)
            self.redis = Redis.from_pool(pool)
        # Fills not sent yet, packed, and the futures of their callers (`cache`); the loop's.
        self._queued: list[tuple[bytes, asyncio.Future[None]]] = []
        self._flushes: set[asyncio.Task[None]] = set()
        self._release = self.redis.register_script(_RELEASE)
        self._renew = self.redis.register_script(_RENEW)

    def key(self, scope: str, key: str) -> str:
        """The Redis key of `(scope, key)`: a digest, so any idempotency key fits."""
        digest = hashlib.sha256(f"{scope}\x00{key}".encode()).hexdigest()[:32]
        return f"{self.prefix}:{digest}"

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._open_until

    async def claim(self, scope: str, key: str, token: str, lease_seconds: float) -> StoreClaim:
        """One round trip: the cached outcome if there is one, else try to take the lease. The
        cache fills queued behind earlier answers go ahead of it, in the same write."""
        lease, command = _claim_command(self.key(scope, key), token, lease_seconds)
        reached, held = await self._guarded("claim", lambda: self._send_behind(command))
        if not reached:
            return _UNAVAILABLE
        return self._claimed(held, lease, scope, key)

    def claim_now(self, scope: str, key: str, token: str, lease_seconds: float) -> StoreClaim:
        """`claim`, blocking on the calling thread: for a thread without an event loop (the sync
        face's first look, `Guard.look_now`), whose blocking socket costs less than a hop to the
        loop thread. The socket timeout bounds it as `_guarded` bounds the loop's commands."""
        if not self.available:
            return _UNAVAILABLE
        lease, command = _claim_command(self.key(scope, key), token, lease_seconds)
        try:
            held = self._blocking.send(*command)
        except _FAILURES as error:
            self._degraded("claim", error)
            return _UNAVAILABLE
        return self._claimed(held, lease, scope, key)

    def _claimed(self, held: object, lease: bytes, scope: str, key: str) -> StoreClaim:
        """What the claim's reply `held` (the key's value before it, if any) means."""
        if held is None or held == lease:
            # Our own lease: a claim whose reply was lost and that was sent again took the key.
            return _ACQUIRED
        try:
            value, outcome = self._read(held, scope, key)
        except ValueError:
            return _UNAVAILABLE
        if outcome is not None:
            return StoreClaim(LeaseState.CACHED, outcome=outcome)
        return StoreClaim(LeaseState.BUSY, holder=value.removeprefix(_LEASE))

    def _read(self, held: object, scope: str, key: str) -> tuple[str, CachedOutcome | None]:
        """What holds a key: its text, and the outcome if it is one. Raises ValueError for a
        value not ours to read (another writer under this prefix, a damaged value): the ledger
        answers that call, as it would with Redis down."""
        assert isinstance(held, bytes), "the client does not decode responses"
        try:
            value = held.decode()
            if value.startswith(_OUTCOME):
                return value, CachedOutcome.decode(value.removeprefix(_OUTCOME))
        except ValueError:
            logger.warning("unreadable value under %s; asking the ledger", self.key(scope, key))
            raise
        return value, None

    def cache(self, scope: str, key: str, outcome: CachedOutcome) -> asyncio.Future[None]:
        """Replace whatever holds the key with the final outcome: it is the ledger's, so it is
        written whoever holds the lease. An outcome over the size cap is not cached: the key is
        cleared instead, and the ledger answers its replays.

        Nobody waits for the write before answering (`Guard._cache_behind`), so it is queued,
        not sent: the next claim made on this loop carries it in its own write, or, when no
        claim goes first, the loop's next turn sends every queued fill in one write. Under load
        a fill then costs no round trip of its own. Waiting up to a turn of the loop changes
        no answer: until the copy lands the key holds this call's lease, and a duplicate that
        finds it asks the ledger (`Guard._finished_in_ledger`); one in this process waits for
        the fill (`CacheFills.settled`). The future is done once Redis answered, or the write
        was given up (Redis unavailable: the copy is only an accelerator).
        """
        name = self.key(scope, key).encode()
        value = (_OUTCOME + outcome.encode()).encode()
        if len(value) > self._max_result_bytes:
            command: tuple[bytes, ...] = (b"DEL", name)
        else:
            command = (b"SET", name, value, b"PX", self._outcome_ttl)
        if isinstance(self._hot, ClusterConnections):
            # Each command goes to the node of its key's slot: a fill is sent on its own.
            hot = self._hot
            return asyncio.ensure_future(self._sent(lambda: hot.send(*command)))
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        if not self.available:
            done.set_result(None)
            return done
        if not self._queued:
            loop.call_soon(self._flush_queued)
        self._queued.append((pack(*command), done))
        return done

    async def release(self, scope: str, key: str, token: str) -> None:
        """Release the lease if it is still the token's."""
        name = self.key(scope, key)
        await self._guarded("release", lambda: self._release(keys=[name], args=[_LEASE + token]))

    async def renew(self, leases: Sequence[tuple[str, str, str]], lease_seconds: float) -> None:
        """Extend the leases `(scope, key, token)` still held by their token, in one round trip."""

        async def renew_all() -> None:
            names = [(self.key(scope, key), _LEASE + token) for scope, key, token in leases]
            if isinstance(self.redis, RedisCluster):
                # A cluster pipeline runs no scripts: one call per lease, all at once, each to
                # the node that holds its key.
                await asyncio.gather(
                    *(self._renew(keys=[name], args=[lease, ms]) for name, lease in names)
                )
                return
            async with self.redis.pipeline(transaction=False) as pipe:
                for name, lease in names:
                    await self._renew(keys=[name], args=[lease, ms], client=pipe)
                await pipe.execute()

        ms = _ms(lease_seconds)
        await self._guarded("renew", renew_all)

    async def ping(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except _FAILURES:
            return False

    async def close(self) -> None:
        self._blocking.close()
        await self._hot.close()
        await self.redis.aclose()

    def forget_loop(self) -> None:
        """Drop the connections of an event loop this process has left, unclosed (closing needs
        their loop; Redis drops each client when its socket is collected)."""
        self._connect()

    def _flush_queued(self) -> None:
        """Send the fills no claim has carried since they were queued, all in one write."""
        if self._queued:
            task = asyncio.create_task(self._flush())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)

    async def _flush(self) -> None:
        await self._guarded("cache", lambda: self._send_behind(None))
        if not self.available:
            # Skipped by the breaker (no claim sends them either): given up, as sent ones that
            # failed are.
            queued, self._queued = self._queued, []
            for _, done in queued:
                done.set_result(None)

    async def _send_behind(self, command: tuple[bytes, ...] | None) -> Any:
        """Send the queued fills and then `command`, if any, in one write; `command`'s reply.

        A cluster's keys are on many nodes: there nothing is queued, and the command goes
        alone. A fill whose write is cut short is given up, as a fill that failed on its own
        would be.
        """
        hot = self._hot
        if isinstance(hot, ClusterConnections):
            return None if command is None else await hot.send(*command)
        queued, self._queued = self._queued, []
        commands = [packed for packed, _ in queued]
        if command is not None:
            commands.append(pack(*command))
        if not commands:
            return None
        try:
            replies = await hot.execute_all(b"".join(commands), len(commands))
        finally:
            for _, done in queued:
                if not done.done():
                    done.set_result(None)
        refused = [reply for reply in replies[: len(queued)] if isinstance(reply, ResponseError)]
        if refused:
            self._degraded("cache", refused[0])
        if command is None:
            return None
        reply = replies[-1]
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def _sent(self, call: Callable[[], Awaitable[object]]) -> None:
        """A cache fill sent on its own, whose answer nobody reads."""
        await self._guarded("cache", call)

    async def _guarded(
        self, operation: str, call: Callable[[], Awaitable[T]]
    ) -> tuple[bool, T | None]:
        """Whether Redis answered, and its answer."""
        if not self.available:
            return False, None
        try:
            if isinstance(self.redis, RedisCluster):
                # Mapping the cluster (its slots, and the command table redis-py routes by) is
                # a one-off that takes far longer than a command: bounded on its own. Once
                # mapped, this returns at once.
                async with asyncio.timeout(_MAPPING_SECONDS):
                    await self.redis.initialize()
            async with asyncio.timeout(self._timeout), self._slots:
                return True, await call()
        except (*_FAILURES, TimeoutError) as error:
            self._degraded(operation, error)
            return False, None

    def _degraded(self, operation: str, error: BaseException) -> None:
        """Open the breaker: Redis is skipped, on every thread, for `breaker_seconds`."""
        self._open_until = time.monotonic() + self._breaker_seconds
        STORE_DEGRADED.labels("redis", operation).inc()
        logger.warning(
            "redis unavailable (%s: %s); using the ledger alone for %.0fs",
            type(error).__name__,
            error,
            self._breaker_seconds,
        )


def _claim_command(name: str, token: str, lease_seconds: float) -> tuple[bytes, tuple[bytes, ...]]:
    """The lease value for `token`, and the claim of key `name` that sets it if the key is free
    and answers with what holds it otherwise."""
    lease = (_LEASE + token).encode()
    return lease, (b"SET", name.encode(), lease, b"NX", b"PX", _ms(lease_seconds), b"GET")


def _ms(seconds: float) -> bytes:
    """A duration as Redis's PX argument: whole milliseconds, at least one."""
    return b"%d" % max(int(seconds * 1000), 1)
