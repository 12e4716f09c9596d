"""Rate limits: per API key, weighted by what each request costs, and per client address for
what comes without a valid key.

A key's own budget is spent before its lookup, keyed by the hash of the presented key, so only
its holder can spend it; a request spends what it costs (`_work.request_cost`: a 500-row page
costs 11 status reads), so a key cannot buy heavy work at the price of light. The client
address's budget counts only requests that prove to have no valid key (no key, an unknown or
revoked one, `/readyz`): a valid key is never refused because others sent bad keys from its
address (a proxy, a NAT). So a bad key still costs one indexed lookup, but an address over its
limit gets 429 for each, and its lookups wait in single file (`lookup_gate`): a flood of guesses
cannot take more than one database connection at a time. Over a limit the answer is the
contract's RATE_LIMITED (429, problem+json, `Retry-After`).

The counting is the `limits` library's sliding-window counter (the library behind slowapi and
Flask-Limiter), in memory: each service process counts its own requests, so N replicas admit N
times the rate. The retry budget's token bucket (`reconciler.RetryBudget`) does not fit: it
refills on successes rather than with time, so it cannot say when to come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Sequence

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
        self._single_file = asyncio.Lock()  # the lookups of addresses over their limit

    async def spend_key(self, secret_hash: str, cost: int = 1) -> None:
        """Count `cost` units of the key hashing to `secret_hash`; RATE_LIMITED over its limit."""
        await self._spend(self._per_key, "key", secret_hash, cost)

    async def spend_anonymous(self, client: str) -> None:
        """Count one request without a valid key from `client`; RATE_LIMITED over its limit."""
        await self._spend(self._anonymous, "anonymous", client)

    @contextlib.asynccontextmanager
    async def lookup_gate(self, client: str) -> AsyncIterator[None]:
        """Around a key's lookup: at once, or in single file while `client` is over its limit
        (its valid keys still get through, its guesses stop costing more than one lookup at a
        time)."""
        if not self._enabled or await self._within_anonymous_limit(client):
            yield
            return
        async with self._single_file:
            yield

    async def _within_anonymous_limit(self, client: str) -> bool:
        for item in self._anonymous:
            if not await self._limiter.test(item, "anonymous", client):
                return False
        return True

    async def _spend(
        self, items: Sequence[RateLimitItem], kind: str, who: str, cost: int = 1
    ) -> None:
        if not self._enabled:
            return
        for item in items:
            if not await self._limiter.hit(item, kind, who, cost=cost):
                raise await self._refusal(item, kind, who)

    async def _refusal(self, item: RateLimitItem, kind: str, who: str) -> WriteSafeError:
        stats = await self._limiter.get_window_stats(item, kind, who)
        wait = max(math.ceil(stats.reset_time - time.time()), 1)
        message = f"more than {item} for this {'API key' if kind == 'key' else 'client'}"
        return WriteSafeError(
            CODES.envelope(Code.RATE_LIMITED, message, retry_after_ms=wait * 1000)
        )


def client_of(request: Request) -> str:
    """The client's address: the peer's, or the one a trusted proxy forwarded
    (`writesafe serve --forwarded-allow-ips`)."""
    return request.client.host if request.client is not None else "unknown"
