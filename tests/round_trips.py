"""Counting what leaves the process, for tests that count round trips instead of timing them."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from writesafe.idempotency._redis_connections import BlockingRedisConnections, RedisConnections
from writesafe.ledger._pg_writer import PostgresWriter


def count_round_trips(engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every command or statement sent from here on, on any thread, in order, counted at each
    boundary a round trip can cross: the key store's own connections (the loop's and the
    blocking ones), redis-py's client, the PostgreSQL writer and `engine`'s cursor."""
    sent: list[str] = []

    def counting(label: str, method: Any) -> Any:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            sent.append(label)
            return await method(*args, **kwargs)

        return counted

    def blocking(*args: Any, **kwargs: Any) -> Any:
        sent.append("redis")
        return execute_now(*args, **kwargs)

    execute_now = BlockingRedisConnections.execute
    monkeypatch.setattr(BlockingRedisConnections, "execute", blocking)
    # `execute_all` is where the loop's commands leave, one write each (`execute` sends one).
    execute_all = counting("redis", RedisConnections.execute_all)
    monkeypatch.setattr(RedisConnections, "execute_all", execute_all)
    monkeypatch.setattr(Redis, "execute_command", counting("redis client", Redis.execute_command))
    monkeypatch.setattr(PostgresWriter, "_run", counting("ledger", PostgresWriter._run))
    event.listen(engine.sync_engine, "before_cursor_execute", lambda *_: sent.append("ledger"))
    return sent
