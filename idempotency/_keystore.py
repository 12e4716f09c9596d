"""The Redis key store: a fenced in-flight lease and the cached final result, as an accelerator.

Nothing here is trusted for correctness: the ledger is consulted before any execution. Every
method degrades instead of failing; while Redis is unreachable a circuit breaker skips it for a
few seconds so a dead Redis costs one timeout, not one per call.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError

from idempotency._metrics import STORE_DEGRADED

logger = logging.getLogger("writesafe")
T = TypeVar("T")

# KEYS: lease, outcome. ARGV: owner, lease ms. → {1, cached} | {2} acquired | {3, holder} busy
_CLAIM = """
local cached = redis.call('GET', KEYS[2])
if cached then return {1, cached} end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {2} end
return {3, redis.call('GET', KEYS[1]) or ''}
"""
# KEYS: lease, outcome. ARGV: owner, cached value ('' for none), outcome ttl ms.
_FINISH = """
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: lease. ARGV: owner, lease ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class LeaseState(Enum):
    CACHED = 1
    ACQUIRED = 2
    BUSY = 3
    UNAVAILABLE = 4


@dataclass(frozen=True, slots=True)
class StoreClaim:
    """The key store's answer: the cached outcome, or the lease holder's token when busy."""

    state: LeaseState
    value: str | None = None


_UNAVAILABLE = StoreClaim(LeaseState.UNAVAILABLE)


class RedisKeyStore:
    """Lease and result cache for `(scope, key)` in Redis, under a key prefix."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "writesafe",
        outcome_ttl: float = 86_400.0,
        socket_timeout: float = 0.5,
        breaker_seconds: float = 5.0,
        max_connections: int = 50,
    ) -> None:
        self.prefix = prefix
        self._outcome_ttl_ms = int(outcome_ttl * 1000)
        self._breaker_seconds = breaker_seconds
        self._open_until = 0.0
        self._timeout = socket_timeout
        # Calls beyond `max_connections` wait for a connection (up to the timeout) instead of
        # failing with MaxConnectionsError, which would trip the breaker under a burst. The
        # command timeout is applied around each call (`_guarded`) rather than by redis-py,
        # whose `socket_timeout` (5 s unless disabled) sends every command through
        # `asyncio.wait_for`: a task per command on Python 3.11.
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            socket_timeout=None,
        )
        self.redis: Redis = Redis.from_pool(pool)
        self._claim = self.redis.register_script(_CLAIM)
        self._finish = self.redis.register_script(_FINISH)
        self._renew = self.redis.register_script(_RENEW)

    def keys(self, scope: str, key: str) -> tuple[str, str]:
        """The lease and outcome keys; one hash tag so both live on one cluster slot."""
        digest = hashlib.sha256(f"{scope}\x00{key}".encode()).hexdigest()[:32]
        return f"{self.prefix}:{{{digest}}}:lease", f"{self.prefix}:{{{digest}}}:outcome"

    @property
    def available(self) -> bool:
        return time.monotonic() >= self._open_until

    async def claim(self, scope: str, key: str, owner: str, lease_seconds: float) -> StoreClaim:
        """One round trip: the cached outcome if there is one, else try to take the lease."""
        reply = await self._guarded(
            "claim",
            lambda: self._claim(keys=self.keys(scope, key), args=[owner, _ms(lease_seconds)]),
        )
        if reply is None:
            return _UNAVAILABLE
        state = LeaseState(int(reply[0]))
        return StoreClaim(state, reply[1].decode() if len(reply) > 1 else None)

    async def cached(self, scope: str, key: str) -> str | None:
        value = await self._guarded("get", lambda: self.redis.get(self.keys(scope, key)[1]))
        return None if value is None else value.decode() if isinstance(value, bytes) else value

    async def finish(self, scope: str, key: str, owner: str, cached: str | None = None) -> None:
        """Cache the final outcome (if given) and release the owner's lease, in one round trip."""
        args: list[str | int] = [owner, cached or "", self._outcome_ttl_ms]
        await self._guarded("finish", lambda: self._finish(keys=self.keys(scope, key), args=args))

    async def renew(self, leases: Sequence[tuple[str, str, str]], lease_seconds: float) -> None:
        """Extend the leases `(scope, key, token)` still held by their token, in one round trip."""

        async def renew_all() -> None:
            async with self.redis.pipeline(transaction=False) as pipe:
                for scope, key, token in leases:
                    lease_key = self.keys(scope, key)[0]
                    await self._renew(keys=[lease_key], args=[token, ms], client=pipe)
                await pipe.execute()

        ms = _ms(lease_seconds)
        await self._guarded("renew", renew_all)

    async def ping(self) -> bool:
        try:
            return bool(await self.redis.ping())
        except (RedisError, OSError):
            return False

    async def close(self) -> None:
        await self.redis.aclose()

    async def _guarded(self, operation: str, call: Callable[[], Awaitable[T]]) -> T | None:
        if not self.available:
            return None
        try:
            async with asyncio.timeout(self._timeout):
                return await call()
        except (RedisError, OSError, TimeoutError) as error:
            self._open_until = time.monotonic() + self._breaker_seconds
            STORE_DEGRADED.labels("redis", operation).inc()
            logger.warning(
                "redis unavailable (%s: %s); using the ledger alone for %.0fs",
                type(error).__name__,
                error,
                self._breaker_seconds,
            )
            return None


def _ms(seconds: float) -> int:
    return max(int(seconds * 1000), 1)
