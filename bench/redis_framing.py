"""Whether the key store's hand-framed commands earn their place against redis-py's client.

    python -m bench.redis_framing [--rounds 10 --per-round 50] [--json]

A replay on PostgreSQL + Redis is one Redis command: the claim, `SET key lease NX PX ms GET`,
which finds the cached outcome. Measured interleaved in one run: that command framed by hand on
redis-py connections (`idempotency/_redis_connections.py`, as the key store sends it) and through
redis-py's ordinary client (`Redis.set(..., nx=True, px=..., get=True)`), each with the hiredis
reply parser (the `bench` extra) and with redis-py's own; and the guard's replay itself. What the
replay would cost on the client is the replay plus the client's extra time per command; the
rule (issue 16): within 15 % of the replay, the library replaces the hand framing.
"""

from __future__ import annotations

import argparse
from typing import Any

from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser
from redis.asyncio import ConnectionPool, Redis
from redis.utils import HIREDIS_AVAILABLE
from rich.console import Console
from rich.table import Table

from bench._cli import add_sampling_options, run_and_report
from bench._setup import isolated
from bench._stats import Series, measure, us
from bench.guard import ORDER, guarded
from writesafe import WriteSafe
from writesafe.idempotency._redis_connections import RedisConnections, pack

THRESHOLD = 1.15
REPLAY = "guard: pg+redis replay"
PARSERS = {"hiredis": _AsyncHiredisParser, "python parser": _AsyncRESP2Parser}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if not HIREDIS_AVAILABLE:
        raise SystemExit("bench.redis_framing needs hiredis: pip install -e '.[bench]'")
    async with isolated("framing", args.database_url, args.redis_url) as iso:
        name = f"{iso.redis_prefix}:cached".encode()
        cached = b"f" * 64 + b"\n" + b'{"order_id": "o-A1", "accepted": true}'
        pools = {
            label: ConnectionPool.from_url(args.redis_url, parser_class=parser, socket_timeout=None)
            for label, parser in PARSERS.items()
        }
        ws = WriteSafe(
            args.database_url,
            args.redis_url,
            schema=iso.schema,
            redis_prefix=iso.redis_prefix,
            auto_migrate=True,
        )
        series: list[Series] = []
        try:
            first = Redis.from_pool(pools["hiredis"])
            await first.set(name, cached)
            command = pack(b"SET", name, b"lease", b"NX", b"PX", b"15000", b"GET")
            for label, pool in pools.items():
                hot, client = RedisConnections(pool), Redis(connection_pool=pool)

                async def by_hand(_n: int, hot: RedisConnections = hot) -> None:
                    assert await hot.execute(command) == cached

                async def by_client(_n: int, client: Redis = client) -> None:
                    assert await client.set(name, b"lease", nx=True, px=15000, get=True) == cached

                series += [
                    Series(f"claim framed by hand ({label})", by_hand),
                    Series(f"claim through redis-py's client ({label})", by_client),
                ]
            await ws.start()
            tool = guarded(ws)
            await tool(ORDER, idempotency_key="done")

            async def replay(_n: int) -> None:
                await tool(ORDER, idempotency_key="done")

            series.append(Series(REPLAY, replay))
            await measure(series, rounds=args.rounds, per_round=args.per_round)
        finally:
            await ws.close()
            for pool in pools.values():
                await pool.disconnect()
    return _report(series)


def _report(series: list[Series]) -> dict[str, Any]:
    p50 = {one.name: one.p50 for one in series}
    replay = p50[REPLAY]
    on_client = {
        label: round(
            (
                replay
                + p50[f"claim through redis-py's client ({label})"]
                - p50[f"claim framed by hand ({label})"]
            )
            / replay,
            3,
        )
        for label in PARSERS
    }
    return {
        "p50_us": {name: round(value * 1e6, 1) for name, value in p50.items()},
        "p99_us": {one.name: round(one.p99 * 1e6, 1) for one in series},
        "replay_on_the_client_vs_by_hand": on_client,
        "library_within_15_percent": on_client["hiredis"] <= THRESHOLD,
    }


def _print(report: dict[str, Any]) -> None:
    table = Table(title="the replay's Redis command, framed by hand or by redis-py (µs)")
    for column in ("series", "p50", "p99"):
        table.add_column(column, justify="left" if column == "series" else "right")
    for name, p50 in report["p50_us"].items():
        table.add_row(name, us(p50 / 1e6), us(report["p99_us"][name] / 1e6))
    console = Console()
    console.print(table)
    for label, ratio in report["replay_on_the_client_vs_by_hand"].items():
        console.print(f"{ratio:.2f}x  replay through redis-py's client ({label}) / by hand")
    verdict = "use the library" if report["library_within_15_percent"] else "keep the framing"
    console.print(f"within {THRESHOLD:.2f}x with hiredis: {report['library_within_15_percent']}")
    console.print(f"-> {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sampling_options(parser)
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
