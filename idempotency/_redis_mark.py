"""The ledger's high-water mark in Redis, in the key store's namespace (`ledger._restore`)."""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from writesafe.idempotency._keystore import RedisKeyStore
from writesafe.ledger import Level

logger = logging.getLogger("writesafe")

_RAISE_MARK = """
for i, field in ipairs({'top', 'generation'}) do
  local kept = tonumber(redis.call('HGET', KEYS[1], field) or '0')
  if tonumber(ARGV[i]) > kept then redis.call('HSET', KEYS[1], field, ARGV[i]) end
end
return 1
"""


class RedisMark:
    """The mark in the key store's namespace, the hash `<prefix>:ledger-mark:<ledger id>`.
    Redis emptied or unreachable is no mark: never a restore."""

    name = "redis"

    def __init__(self, keystore: RedisKeyStore, timeout: float = 0.5) -> None:
        self._keystore = keystore
        self._timeout = timeout

    def key(self, ledger_id: str) -> str:
        return f"{self._keystore.prefix}:ledger-mark:{ledger_id}"

    async def read(self, ledger_id: str) -> Level | None:
        try:
            async with asyncio.timeout(self._timeout):
                kept = await self._keystore.redis.hmget(self.key(ledger_id), "top", "generation")
        except (RedisError, OSError, TimeoutError) as error:
            logger.warning("the ledger's mark in Redis was not read: %s", type(error).__name__)
            return None
        top, generation = (value.decode() if isinstance(value, bytes) else value for value in kept)
        if top is None or generation is None or not (top.isdigit() and generation.isdigit()):
            return None
        return Level(int(top), int(generation))

    async def raise_to(self, ledger_id: str, level: Level) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._keystore.redis.eval(
                    _RAISE_MARK, 1, self.key(ledger_id), level.top, level.generation
                )
        except (RedisError, OSError, TimeoutError) as error:
            logger.warning("the ledger's mark in Redis was not raised: %s", type(error).__name__)
