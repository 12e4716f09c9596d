"""Bytes per operation: what the ledger keeps for each guarded call, tables and indexes.

    python -m bench.ledger_bytes [--calls 10000] [--backends pg,embedded] [--periods 3] [--json]

Makes `--calls` first executions through the guard (no Redis: the ledger is what is measured),
each with 161 bytes of stored arguments and a 65-byte stored result, then VACUUMs and divides
the size of the operations and attempts tables, with their indexes and TOAST, by the calls.
PostgreSQL is measured after a plain VACUUM (the space a live ledger keeps: dead row versions
freed for reuse, the file not shrunk); then once per retention period, `--periods` times (the
calls before aged past the retention and pruned, as many new ones made in the space they left,
VACUUMed again): whether a ledger that prunes stops growing, and what it keeps per operation
once it has; and after VACUUM FULL (the rows and indexes alone). SQLite after VACUUM (page count
times page size). Targets: at most 700 B in PostgreSQL, 600 B in SQLite, after VACUUM.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from rich.console import Console
from rich.table import Table

from bench._cli import run_and_report
from bench._setup import asyncpg_dsn, isolated
from writesafe import WriteSafe
from writesafe.ledger import canonical_json, prune

TARGETS = {"pg": 700, "embedded": 600}
TOOL = "bench_submit"
CONCURRENCY = 8
_TABLES = ("writesafe_operations", "writesafe_attempts")

# Stored as `{"order": {...}}`: 161 bytes of canonical JSON, as in the measurement.
ORDER = {"sku": "SKU-000123", "qty": 2, "postcode": "560001", "note": "x" * 93}
RESULT = {"order_id": "o-0000000000000", "accepted": True, "eta": "2026-12-03"}


async def submit(order: dict[str, Any]) -> dict[str, Any]:
    return RESULT


def _check_sizes() -> None:
    arguments, result = len(canonical_json({"order": ORDER})), len(canonical_json(RESULT))
    assert (arguments, result) == (161, 65), (arguments, result)


async def _fill(ws: WriteSafe, calls: int) -> None:
    tool = ws.tools.get(TOOL) or ws.tool(TOOL)(submit)
    await ws.start()
    for start in range(0, calls, CONCURRENCY):
        keys = range(start, min(start + CONCURRENCY, calls))
        await asyncio.gather(*(tool(ORDER, idempotency_key=f"op-{n:07d}") for n in keys))


_PG_SIZES = """
SELECT c.relname, pg_table_size(c.oid) AS heap, pg_indexes_size(c.oid) AS indexes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = ANY($2::text[])
"""


async def _pg_sizes(connection: asyncpg.Connection, schema: str) -> dict[str, int]:
    rows = await connection.fetch(_PG_SIZES, schema, list(_TABLES))
    sizes = {f"{row['relname']} table": row["heap"] for row in rows}
    sizes |= {f"{row['relname']} indexes": row["indexes"] for row in rows}
    return sizes


async def _pg(args: argparse.Namespace, schema: str) -> dict[str, Any]:
    ws = WriteSafe(args.database_url, schema=schema, auto_migrate=True)
    connection = await asyncpg.connect(
        asyncpg_dsn(args.database_url), server_settings={"search_path": schema}
    )
    try:
        await _fill(ws, args.calls)
        await connection.execute(_VACUUM)
        vacuumed = await _pg_sizes(connection, schema)
        stages = {"after VACUUM": vacuumed}
        for period in range(1, args.periods + 1):
            # A retention period later: the calls before pruned, as many new ones made.
            await connection.execute(_AGE_ALL)
            await prune(ws.ledger, _RETENTION)
            await connection.execute(_VACUUM)
            await _fill(ws, args.calls)
            await connection.execute(_VACUUM)
            stages[f"{period} retention period(s) later"] = await _pg_sizes(connection, schema)
        await connection.execute("VACUUM FULL writesafe_operations, writesafe_attempts")
        stages["after VACUUM FULL"] = await _pg_sizes(connection, schema)
    finally:
        await connection.close()
        await ws.close()
    return stages


_VACUUM = "VACUUM (ANALYZE) writesafe_operations, writesafe_attempts"
_RETENTION = timedelta(days=1)
_AGE_ALL = (
    "UPDATE writesafe_operations"
    " SET created_at = created_at - interval '2 days', updated_at = updated_at - interval '2 days'"
)


# Each table and index of the two tables (the unique constraint's `sqlite_autoindex_…` included).
_LITE_SIZES = """
SELECT s.name, SUM(s.pgsize) FROM dbstat s JOIN sqlite_schema m ON m.name = s.name
WHERE m.tbl_name IN (?, ?) GROUP BY s.name
"""


async def _embedded(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    path = workdir / "bytes.db"
    ws = WriteSafe(f"sqlite+aiosqlite:///{path}")
    try:
        await _fill(ws, args.calls)
    finally:
        await ws.close()
    with sqlite3.connect(path) as lite:
        lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        lite.execute("VACUUM")
        rows = lite.execute(_LITE_SIZES, _TABLES).fetchall()
    return {"after VACUUM": {str(name): int(size) for name, size in rows}}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    _check_sizes()
    backends = args.backends.split(",")
    measured: dict[str, Any] = {}
    async with isolated("lbytes", args.database_url, args.redis_url) as iso:
        if "pg" in backends:
            measured["pg"] = await _pg(args, iso.schema)
        if "embedded" in backends:
            measured["embedded"] = await _embedded(args, iso.workdir)
    per_operation = {
        f"{backend} {stage}": round(sum(sizes.values()) / args.calls, 1)
        for backend, stages in measured.items()
        for stage, sizes in stages.items()
    }
    return {
        "calls": args.calls,
        "bytes": measured,
        "bytes_per_operation": per_operation,
        "targets_met": {
            f"{backend} after VACUUM <= {TARGETS[backend]} B": per_operation[
                f"{backend} after VACUUM"
            ]
            <= TARGETS[backend]
            for backend in measured
        },
    }


def _print(report: dict[str, Any]) -> None:
    console = Console()
    for backend, stages in report["bytes"].items():
        for stage, sizes in stages.items():
            table = Table(title=f"{backend} {stage}: {report['calls']:,} operations")
            for column in ("relation", "bytes", "per operation"):
                table.add_column(column, justify="left" if column == "relation" else "right")
            for name, size in sorted(sizes.items()):
                table.add_row(name, f"{size:,}", f"{size / report['calls']:,.1f}")
            console.print(table)
    for name, value in report["bytes_per_operation"].items():
        console.print(f"{value:,.1f} B per operation  {name}")
    for name, met in report["targets_met"].items():
        console.print(f"{'MET   ' if met else 'MISSED'}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--backends", default="pg,embedded")
    parser.add_argument(
        "--periods", type=int, default=3, help="PostgreSQL: retention periods to prune and refill"
    )
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
