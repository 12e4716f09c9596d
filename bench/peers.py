"""writesafe against its closest peer, agent-once 0.1.0: same process, same workload, interleaved.

    python -m bench.peers [--rounds 10 --per-round 30] [--json]

Needs the optional `bench` extra (`pip install -e '.[bench]'`, which pins agent-once 0.1.0 with
its PostgreSQL store); without it the benchmark says so and exits. Each library guards the same
coroutine (`bench.guard.bare_write`): a first execution is a new key, a replay repeats a key that
succeeded. agent-once runs on SQLite (its default) and on PostgreSQL; writesafe runs embedded
(SQLite, its default) and on PostgreSQL + Redis (production). Both SQLite stores are WAL files in
the same directory, each library with its own durability settings (both fsync every commit).
Ratios are p50 against p50 in the same run:

- embedded first execution and replay against agent-once on SQLite: target <= 0.8x each;
- PostgreSQL + Redis first execution against agent-once on PostgreSQL: target <= 0.7x;
- PostgreSQL + Redis replay: faster than either of agent-once's (the issue's "fastest of every
  library measured"; writesafe's own embedded replay, one local read, may be faster still).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from bench._cli import add_sampling_options, run_and_report
from bench._setup import asyncpg_dsn, isolated
from bench._stats import Series, measure, us
from bench.guard import ORDER, bare_write, guarded
from writesafe import WriteSafe

EMBEDDED_TARGET = 0.8
PRODUCTION_TARGET = 0.7

Call = Callable[[str], Awaitable[Any]]


def _require_agent_once() -> None:
    try:
        import once.postgres  # noqa: F401  (the PostgreSQL store needs the extra's psycopg)
    except ImportError as error:
        sys.exit(f"bench.peers needs agent-once: pip install -e '.[bench]' ({error})")


def _agent_once(once: Any) -> Call:
    async def call(key: str) -> Any:
        return await once.aexecute(fn=bare_write, key=key, order=ORDER)

    return call


def _writesafe(ws: WriteSafe) -> Call:
    tool = guarded(ws)

    async def call(key: str) -> Any:
        return await tool(ORDER, idempotency_key=key)

    return call


def _pair(label: str, call: Call) -> list[Series]:
    """First executions on fresh keys, and replays of one key that succeeded."""
    fresh = itertools.count()

    async def first(_n: int) -> None:
        await call(f"{label}-new-{next(fresh)}")

    async def replay(_n: int) -> None:
        await call(f"{label}-done")

    return [Series(f"{label}: first execution", first), Series(f"{label}: replay", replay)]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    _require_agent_once()
    async with isolated("peers", args.database_url, args.redis_url) as iso:
        from once import Once
        from once.postgres import PostgresStore

        once_lite = Once(iso.workdir / "once.db")
        store = PostgresStore(asyncpg_dsn(args.database_url), table=f"{iso.schema}.once_effects")
        once_pg = Once(store=store)
        embedded = WriteSafe(f"sqlite+aiosqlite:///{iso.workdir / 'writesafe.db'}")
        production = WriteSafe(
            args.database_url,
            args.redis_url,
            schema=iso.schema,
            redis_prefix=iso.redis_prefix,
            auto_migrate=True,
        )
        try:
            await embedded.start()
            await production.start()
            calls = {
                "agent-once sqlite": _agent_once(once_lite),
                "writesafe embedded": _writesafe(embedded),
                "writesafe pg+redis": _writesafe(production),
                "agent-once pg": _agent_once(once_pg),
            }
            series: list[Series] = []
            for label, call in calls.items():
                await call(f"{label}-done")
                series += _pair(label, call)
            await measure(series, rounds=args.rounds, per_round=args.per_round)
        finally:
            await embedded.close()
            await production.close()
            once_lite.close()
            once_pg.close()
    return _report(series)


def _report(series: list[Series]) -> dict[str, Any]:
    p50 = {one.name: one.p50 for one in series}

    def ratio(ours: str, theirs: str) -> float:
        return round(p50[ours] / p50[theirs], 3)

    ratios = {
        "embedded first execution / agent-once sqlite": ratio(
            "writesafe embedded: first execution", "agent-once sqlite: first execution"
        ),
        "embedded replay / agent-once sqlite": ratio(
            "writesafe embedded: replay", "agent-once sqlite: replay"
        ),
        "pg+redis first execution / agent-once pg": ratio(
            "writesafe pg+redis: first execution", "agent-once pg: first execution"
        ),
        "pg+redis replay / agent-once pg": ratio(
            "writesafe pg+redis: replay", "agent-once pg: replay"
        ),
    }
    peer_replays = [
        value
        for name, value in p50.items()
        if name.startswith("agent-once") and name.endswith("replay")
    ]
    targets = {
        "embedded first execution <= 0.8x": ratios["embedded first execution / agent-once sqlite"]
        <= EMBEDDED_TARGET,
        "embedded replay <= 0.8x": ratios["embedded replay / agent-once sqlite"] <= EMBEDDED_TARGET,
        "pg+redis first execution <= 0.7x": ratios["pg+redis first execution / agent-once pg"]
        <= PRODUCTION_TARGET,
        "pg+redis replay faster than agent-once's": p50["writesafe pg+redis: replay"]
        < min(peer_replays),
    }
    return {
        "p50_us": {name: round(value * 1e6, 1) for name, value in p50.items()},
        "p99_us": {one.name: round(one.p99 * 1e6, 1) for one in series},
        "ratios": ratios,
        "targets_met": targets,
    }


def _print(report: dict[str, Any]) -> None:
    table = Table(title="writesafe and agent-once 0.1.0, same run (µs per call)")
    for column in ("series", "p50", "p99"):
        table.add_column(column, justify="left" if column == "series" else "right")
    for name, p50 in report["p50_us"].items():
        table.add_row(name, us(p50 / 1e6), us(report["p99_us"][name] / 1e6))
    console = Console()
    console.print(table)
    for name, value in report["ratios"].items():
        console.print(f"{value:.2f}x  {name}")
    for name, met in report["targets_met"].items():
        console.print(f"{'MET   ' if met else 'MISSED'}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sampling_options(parser, per_round=30)
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
