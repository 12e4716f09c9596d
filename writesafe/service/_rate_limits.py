"""Rate limits: per API key, and per client address for what comes without a valid key.

Every well-formed bearer costs a database lookup and every `/readyz` a database query and a Redis
PING, so both are limited before that work is done: a key's own budget is spent before its lookup
(keyed by the hash of the presented key, so only its holder can spend it), and a client address
that keeps presenting unknown keys, or probing `/readyz`, is refused without any lookup. Over the
limit the answer is the contract's RATE_LIMITED (429, problem+json, `Retry-After`).

The counting is the `limits` library's sliding-window counter (the library behind slowapi and
Flask-Limiter), in memory: each service process counts its own requests, so N replicas admit N
times the rate. The retry budget's token bucket (`reconciler.RetryBudget`) does not fit: it
refills on successes rather than with time, so it cannot say when to come back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from fastapi import Request
from limits import RateLimitItem, parse_many
from limits.aio.storage import MemoryStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from writesafe.idempotency import WriteSafeError
from writesafe.reconciler import CODES, Code
from writesafe.service._settings import ServiceSettings


class RateLimits:
    """The limits of one service instance (`settings.rate_limits` False: nothing is limited)."""

    def __init__(self, settings: ServiceSettings) -> None:
        self._enabled = settings.rate_limits
        self._per_key = parse_many(settings.rate_limit_per_key)
        self._anonymous = parse_many(settings.rate_limit_anonymous)
        self._limiter = SlidingWindowCounterRateLimiter(MemoryStorage())

    async def spend_key(self, secret_hash: str) -> None:
        """Count one request of the key hashing to `secret_hash`; RATE_LIMITED over its limit."""
        await self._spend(self._per_key, "key", secret_hash)

    async def spend_anonymous(self, client: str) -> None:
        """Count one request without a valid key from `client`; RATE_LIMITED over its limit."""
        await self._spend(self._anonymous, "anonymous", client)

    async def admit_anonymous(self, client: str) -> None:
        """RATE_LIMITED if `client` is over its limit already, without counting this request
        (it may yet prove to hold a valid key)."""
        if not self._enabled:
            return
        for item in self._anonymous:
            if not await self._limiter.test(item, "anonymous", client):
                raise await self._refusal(item, "anonymous", client)

    async def _spend(self, items: Sequence[RateLimitItem], kind: str, who: str) -> None:
        if not self._enabled:
            return
        for item in items:
            if not await self._limiter.hit(item, kind, who):
                raise await self._refusal(item, kind, who)

    async def _refusal(self, item: RateLimitItem, kind: str, who: str) -> WriteSafeError:
        stats = await self._limiter.get_window_stats(item, kind, who)
        wait = max(math.ceil(stats.reset_time - time.time()), 1)
        message = f"more than {item} for this {'API key' if kind == 'key' else 'client'}"
        return WriteSafeError(
            CODES.envelope(Code.RATE_LIMITED, message, retry_after_ms=wait * 1000)
        )


def client_of(request: Request) -> str:
    """The client's address (behind a proxy, uvicorn's `--proxy-headers` makes it the real one)."""
    return request.client.host if request.client is not None else "unknown"
