"""What pooler-safe statements cost: a guarded call with `?pooler=transaction` against without.

    python -m bench.pooler [--rounds 10 --per-round 50] [--json]

Both series go straight to PostgreSQL (no pooler in between), so that the ratio is the price of
the statements alone: without the option each write is one round trip on a statement asyncpg
prepared once; with it each is parsed again (Parse, Flush, then Parse, Bind, Execute, Sync: two
round trips). First executions and replays, interleaved in one run; p50 and the ratio of each.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from bench._cli import Report, add_sampling_options, run_and_report
from bench._setup import isolated
from bench._stats import Series, measure, us
from writesafe import Tool, WriteSafe, WriteSafeSettings


def _tool(ws: WriteSafe) -> Tool[Any]:
    @ws.tool("bench_write", timeout=None)
    async def write(n: int) -> int:
        return n

    return write


async def run(args: argparse.Namespace) -> Report:
    settings = WriteSafeSettings(db_max_connections=4, pool_size=2)
    async with isolated("pooler", args.database_url) as iso:
        plain = WriteSafe(args.database_url, schema=iso.schema, settings=settings)
        safe = WriteSafe(
            f"{args.database_url}?pooler=transaction", schema=iso.schema, settings=settings
        )
        await plain.ledger.migrate()
        tools = {"plain": _tool(plain), "pooler": _tool(safe)}
        try:
            series = [
                Series(f"{name} {kind}", _sample(tool, name, kind))
                for name, tool in tools.items()
                for kind in ("first", "replay")
            ]
            for tool in tools.values():
                await tool(0, idempotency_key=f"replayed-{tool is tools['pooler']}")
            await measure(series, rounds=args.rounds, per_round=args.per_round)
        finally:
            await plain.close()
            await safe.close()
    p50 = {one.name: one.p50 for one in series}
    return {
        "p50_us": {name: round(value * 1e6) for name, value in p50.items()},
        "ratio_first": round(p50["pooler first"] / p50["plain first"], 3),
        "ratio_replay": round(p50["pooler replay"] / p50["plain replay"], 3),
    }


def _sample(tool: Tool[Any], name: str, kind: str) -> Any:
    replayed = f"replayed-{name == 'pooler'}"

    async def sample(n: int) -> None:
        if kind == "replay":
            await tool(0, idempotency_key=replayed)
        else:
            await tool(n, idempotency_key=f"{name}-{n}")

    return sample


def show(report: Report) -> None:
    table = Table("series", "p50 µs")
    for name, value in report["p50_us"].items():
        table.add_row(name, us(value / 1e6))
    console = Console()
    console.print(table)
    console.print(
        f"pooler-safe / plain: first execution {report['ratio_first']}, "
        f"replay {report['ratio_replay']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_sampling_options(parser)
    run_and_report(parser, run, show)


if __name__ == "__main__":
    main()
