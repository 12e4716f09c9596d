"""Cost versus ledger size: a guarded call must not get slower as the ledger grows.

    python -m bench.ledger_size [--sizes 10000,100000,1000000] [--backends pg,embedded]
                                [--prune] [--json]

One ledger per size (a PostgreSQL schema, a SQLite file) is pre-filled with bulk SQL — 95 %
succeeded and 5 % failed operations, each with its attempt row, statistics analysed — not through
the guard. Then first executions (new keys) and replays of random pre-filled keys are measured on
every ledger, interleaved, without Redis so every call reaches the ledger. The ratio is the p50
at each size against the p50 at the smallest; the target is at most 1.2x at the largest.

Fill rows are dated one second apart, oldest first, ending 1,000,000 seconds ago. With `--prune`
a pruner runs against every ledger throughout the measurement (`ledger.prune`, passes back to
back), with a retention that makes the oldest `PRUNED` share of the fill due; replays pick from
the rest, so they stay replays.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
from rich.console import Console
from rich.table import Table

from bench._cli import add_sampling_options, run_and_report
from bench._setup import asyncpg_dsn, isolated
from bench._stats import Series, measure, us
from bench.guard import ORDER, bare_write
from writesafe import Tool, WriteSafe
from writesafe.idempotency._arguments import fingerprint
from writesafe.ledger import PruneReport, canonical_json, prune

TARGET = 1.2
TOOL = "bench_submit"
PRUNED = 0.1  # the share of each fill the pruner finds due, with --prune
_NEWEST_FILL_AGE = 1_000_001  # seconds; fill row g is this minus g seconds old

# Columns and the bulk SELECT shared by both dialects; `$n`/`?` and the series differ.
_COLUMNS = (
    "scope, key, tool, fingerprint, status, version, executions, max_executions, arguments, "
    "result, error, last_code, last_sent_at, checks, created_at, updated_at"
)
_PG_FILL = f"""
INSERT INTO writesafe_operations ({_COLUMNS})
SELECT 'default', 'fill-' || g, $1, $2,
       CASE WHEN g % 20 = 0 THEN 'failed' ELSE 'succeeded' END, 2, 1, 3, $3,
       CASE WHEN g % 20 = 0 THEN NULL ELSE $4 END,
       CASE WHEN g % 20 = 0 THEN $5 ELSE NULL END,
       CASE WHEN g % 20 = 0 THEN 'INPUT_INVALID' ELSE NULL END,
       now() - ({_NEWEST_FILL_AGE} - g) * interval '1 second', 0,
       now() - ({_NEWEST_FILL_AGE} - g) * interval '1 second',
       now() - ({_NEWEST_FILL_AGE} - g) * interval '1 second'
FROM generate_series(1, $6) AS g;
"""
_PG_ATTEMPTS = """
INSERT INTO writesafe_attempts (operation_id, kind, execution, owner, fingerprint, outcome,
                                started_at, finished_at)
SELECT id, 'execution', 1, md5(id::text), fingerprint, status, created_at, updated_at
FROM writesafe_operations;
"""
# SQLite keeps microseconds since the epoch (migration 0004).
_LITE_AGE = f"(CAST(strftime('%s', 'now') AS INTEGER) - ({_NEWEST_FILL_AGE} - n)) * 1000000"
_LITE_FILL = f"""
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?)
INSERT INTO writesafe_operations ({_COLUMNS})
SELECT 'default', 'fill-' || n, ?, ?,
       CASE WHEN n % 20 = 0 THEN 'failed' ELSE 'succeeded' END, 2, 1, 3, ?,
       CASE WHEN n % 20 = 0 THEN NULL ELSE ? END,
       CASE WHEN n % 20 = 0 THEN ? ELSE NULL END,
       CASE WHEN n % 20 = 0 THEN 'INPUT_INVALID' ELSE NULL END,
       {_LITE_AGE}, 0, {_LITE_AGE}, {_LITE_AGE}
FROM g;
"""
_LITE_ATTEMPTS = """
INSERT INTO writesafe_attempts (operation_id, kind, execution, owner, fingerprint, outcome,
                                started_at, finished_at)
SELECT id, 'execution', 1, lower(hex(randomblob(16))), fingerprint, status, created_at,
       updated_at
FROM writesafe_operations;
"""


def _fill_values() -> tuple[str, str, str, str]:
    arguments = canonical_json({"order": ORDER})
    result = json.dumps({"order_id": f"o-{ORDER['sku']}", "accepted": True})
    error = json.dumps({"schema": "writesafe.error/1", "code": "INPUT_INVALID"})
    return fingerprint(TOOL, arguments), arguments, result, error


async def _fill_pg(url: str, schema: str, size: int) -> None:
    ws = WriteSafe(url, schema=schema, auto_migrate=True)
    await ws.start()
    await ws.close()
    fp, arguments, result, error = _fill_values()
    connection = await asyncpg.connect(asyncpg_dsn(url), server_settings={"search_path": schema})
    try:
        await connection.execute(_PG_FILL, TOOL, fp, arguments, result, error, size)
        await connection.execute(_PG_ATTEMPTS)
        await connection.execute("ANALYZE")
    finally:
        await connection.close()


async def _fill_sqlite(path: Path, size: int) -> None:
    ws = WriteSafe(f"sqlite+aiosqlite:///{path}")
    await ws.start()
    await ws.close()
    fp, arguments, result, error = _fill_values()
    async with aiosqlite.connect(path) as lite:
        # The fingerprint as the ledger keeps it on SQLite: its 32 bytes.
        await lite.execute(_LITE_FILL, (size, TOOL, bytes.fromhex(fp), arguments, result, error))
        await lite.execute(_LITE_ATTEMPTS)
        await lite.commit()
        await lite.execute("ANALYZE")


def _samples(tool: Tool[dict[str, Any]], label: str, size: int) -> list[Series]:
    rng = random.Random(size)

    async def first(n: int) -> None:
        await tool(ORDER, idempotency_key=f"new-{n}")

    async def replay(n: int) -> None:
        # Succeeded fill rows only (every 20th is a failed one), newer than any --prune removes.
        g = rng.randrange(int(size * PRUNED) + 1, size)
        await tool(ORDER, idempotency_key=f"fill-{g if g % 20 else g + 1}")

    return [
        Series(f"{label} {size:,}: first execution", first),
        Series(f"{label} {size:,}: replay", replay),
    ]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = sorted(int(s) for s in args.sizes.split(","))
    backends = args.backends.split(",")
    fills: dict[str, float] = {}
    async with isolated("lsize", args.database_url, args.redis_url) as iso:
        schemas = {size: f"{iso.schema}_{size}" for size in sizes}
        connection = await asyncpg.connect(asyncpg_dsn(args.database_url))
        try:
            for schema in schemas.values():
                await connection.execute(f'CREATE SCHEMA "{schema}"')
            try:
                return await _measure(args, sizes, backends, schemas, iso.workdir, fills)
            finally:
                for schema in schemas.values():
                    await connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
        finally:
            await connection.close()


async def _measure(
    args: argparse.Namespace,
    sizes: list[int],
    backends: list[str],
    schemas: dict[int, str],
    workdir: Path,
    fills: dict[str, float],
) -> dict[str, Any]:
    instances: list[WriteSafe] = []
    series: list[Series] = []
    stop = asyncio.Event()
    pruners: dict[str, asyncio.Task[PruneReport]] = {}
    try:
        for size in sizes:
            for backend in backends:
                started = time.perf_counter()
                if backend == "pg":
                    await _fill_pg(args.database_url, schemas[size], size)
                    ws = WriteSafe(args.database_url, schema=schemas[size])
                else:
                    path = workdir / f"ledger-{size}.db"
                    await _fill_sqlite(path, size)
                    ws = WriteSafe(f"sqlite+aiosqlite:///{path}")
                fills[f"{backend} {size:,}"] = round(time.perf_counter() - started, 1)
                instances.append(ws)
                await ws.start()
                series.extend(_samples(ws.tool(TOOL)(bare_write), backend, size))
                if args.prune:
                    pruners[f"{backend} {size:,}"] = asyncio.create_task(
                        _keep_pruning(ws, size, stop)
                    )
        await measure(series, rounds=args.rounds, per_round=args.per_round)
    finally:
        stop.set()
        reports = {name: await task for name, task in pruners.items()}
        for ws in instances:
            await ws.close()
    p50 = {s.name: s.p50 for s in series}
    ratios = {}
    for backend in backends:
        for kind in ("first execution", "replay"):
            smallest = p50[f"{backend} {sizes[0]:,}: {kind}"]
            for size in sizes[1:]:
                name = f"{backend} {size:,}: {kind}"
                ratios[name] = round(p50[name] / smallest, 3)
    return {
        "sizes": sizes,
        "fill_seconds": fills,
        "p50_us": {k: round(v * 1e6, 1) for k, v in p50.items()},
        "p99_us": {s.name: round(s.p99 * 1e6, 1) for s in series},
        "ratio_vs_smallest": ratios,
        "target_met": all(r <= TARGET for r in ratios.values()),
        "pruned_during_measurement": {
            name: {"operations": report.operations, "attempts": report.attempts}
            for name, report in reports.items()
        },
    }


async def _keep_pruning(ws: WriteSafe, size: int, stop: asyncio.Event) -> PruneReport:
    """Prune `ws`'s ledger pass after pass until `stop`; the oldest `PRUNED` of its fill is due."""
    retention = timedelta(seconds=_NEWEST_FILL_AGE - size * PRUNED)
    total = PruneReport()
    while not stop.is_set():
        total += await prune(ws.ledger, retention, stop=stop)
        await asyncio.sleep(0.05)
    return total


def _print(report: dict[str, Any]) -> None:
    table = Table(title="cost versus ledger size (µs per call, no Redis)")
    for column in ("series", "p50", "p99", f"÷ {report['sizes'][0]:,}"):
        table.add_column(column, justify="left" if column == "series" else "right")
    for name, p50 in report["p50_us"].items():
        ratio = report["ratio_vs_smallest"].get(name)
        table.add_row(
            name, us(p50 / 1e6), us(report["p99_us"][name] / 1e6), f"{ratio:.2f}x" if ratio else ""
        )
    console = Console()
    console.print(table)
    console.print(f"pre-fill seconds: {report['fill_seconds']}")
    if report["pruned_during_measurement"]:
        console.print(f"pruned while measuring: {report['pruned_during_measurement']}")
    console.print(f"{'MET' if report['target_met'] else 'MISSED'}  every ratio <= {TARGET}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--backends", default="pg,embedded")
    parser.add_argument("--prune", action="store_true", help="prune during the measurement")
    add_sampling_options(parser, per_round=30)
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
