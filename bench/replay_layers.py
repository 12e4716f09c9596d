"""Where a replay's time goes: the replay of a finished key, built up layer by layer, in place.

    python -m bench.replay_layers [--rounds 10 --per-round 50] [--json]

Each layer adds one part of the guard's path to the one before, from the bare Redis GET up to
the tool call, on real PostgreSQL and Redis; each is measured interleaved with the others (a
part timed alone, in a tight loop, runs about 3x faster than between real round trips). Both are
measured twice: back to back, and with 2 ms pauses interleaved. On a small VM the pauses change
where the scheduler runs the client and Redis, and with it the cost of every round trip; the
guard's own part barely moves, so the ratio to the GET does (docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from redis.asyncio import ConnectionPool
from rich.console import Console
from rich.table import Table

from bench._cli import add_sampling_options, run_and_report
from bench._setup import isolated
from bench._stats import Sample, Series, measure, us
from bench.guard import ORDER, guarded
from writesafe import WriteSafe
from writesafe.idempotency._redis_connections import RedisConnections, pack

KEY = "replayed"
PAUSE_SECONDS = 0.002
REGIMES = ("back to back", "with pauses")
LAYERS = (
    "redis GET",
    "+ command timeout",
    "+ claim: key, framing, parsing",
    "+ guard: token, decode, metrics",
    "+ binding, JSON, fingerprint",
)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with isolated("layers", args.database_url, args.redis_url) as iso:
        ws = WriteSafe(
            args.database_url,
            args.redis_url,
            schema=iso.schema,
            redis_prefix=iso.redis_prefix,
            auto_migrate=True,
        )
        tool = guarded(ws)
        hot = RedisConnections(ConnectionPool.from_url(args.redis_url, socket_timeout=None))
        try:
            guard, keystore = await ws.guard(), ws.keystore
            await tool(ORDER, idempotency_key=KEY)
            await guard.flush()  # the outcome is in Redis: every later call is a replay
            assert keystore is not None
            get = pack(b"GET", keystore.key("default", KEY).encode())
            call = tool.prepare((ORDER,), {}, KEY, "default", None)

            async def redis_get(n: int) -> None:
                await hot.execute(get)

            async def under_timeout(n: int) -> None:
                async with asyncio.timeout(0.5):
                    await hot.execute(get)

            async def claim(n: int) -> None:
                await keystore.claim("default", KEY, "token", 15.0)

            async def prepared(n: int) -> None:
                await guard.run(call)

            async def tool_call(n: int) -> None:
                await tool(ORDER, idempotency_key=KEY)

            async def pause(n: int) -> None:
                await asyncio.sleep(PAUSE_SECONDS)

            samples: tuple[Sample, ...] = (redis_get, under_timeout, claim, prepared, tool_call)
            regimes: dict[str, list[Series]] = {}
            for regime in REGIMES:
                series = [
                    Series(layer, sample) for layer, sample in zip(LAYERS, samples, strict=True)
                ]
                extra = [Series("pause", pause)] if regime == "with pauses" else []
                await measure(series + extra, rounds=args.rounds, per_round=args.per_round)
                regimes[regime] = series
        finally:
            await ws.close()
            await hot.close()
    return {
        regime: {series.name: round(series.p50 * 1e6, 1) for series in measured}
        for regime, measured in regimes.items()
    }


def _print(report: dict[str, Any]) -> None:
    console = Console(width=120)
    table = Table(title="a replay, layer by layer (p50 µs; ratio to the GET of the same regime)")
    table.add_column("layer")
    for regime in REGIMES:
        for column in (regime, "added", "ratio"):
            table.add_column(column, justify="right")
    for index, layer in enumerate(LAYERS):
        row = [layer]
        for regime in REGIMES:
            p50 = report[regime]
            added = p50[layer] - p50[LAYERS[index - 1]] if index else p50[layer]
            row += [us(p50[layer] / 1e6), us(added / 1e6), f"{p50[layer] / p50[LAYERS[0]]:.2f}x"]
        table.add_row(*row)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sampling_options(parser)
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
