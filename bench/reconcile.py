"""Reconciliation throughput on PostgreSQL: worker processes, and the size of the ledger.

    PYTHONPATH=. python bench/reconcile.py [--database-url URL] [--operations 20000]

1. Operations resolved per second by 1, 2 and 4 worker processes over N unknown operations, each
   worker a real process with its own `WriteSafe` and a lookup of fixed latency (2 ms) that finds
   even keys and misses odd ones. Process start-up is excluded (workers meet at a barrier).
2. Time per operation with a ledger of 100k rows, then of 1M rows (the same number of due
   operations each time), to show the claim does not scan the ledger.

Every figure is printed with its ratio to a baseline measured in the same run, with the CPU time
the workers spent per operation (if workers × that × throughput nears the machine's cores, the
CPU is the bottleneck, not the lookup). The bench uses its own schema and drops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from writesafe import Found, LookupOperation, NotFound, WriteSafe, WriteSafeSettings
from writesafe.ledger import Ledger
from writesafe.reconciler import LookupResult

DEFAULT_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
TOOL = "submit_order"


# -- the worker process ------------------------------------------------------------------


def _worker(
    url: str,
    schema: str,
    latency: float,
    batch: int,
    barrier: Any,
    results: Any,
) -> None:
    results.put(asyncio.run(_work(url, schema, latency, batch, barrier)))


async def _work(url: str, schema: str, latency: float, batch: int, barrier: Any) -> dict[str, Any]:
    ws = WriteSafe(url, schema=schema, settings=WriteSafeSettings(reconcile_batch=batch))

    async def find_order(op: LookupOperation) -> LookupResult:
        await asyncio.sleep(latency)
        return Found({"order": op.key}) if int(op.key[1:]) % 2 == 0 else NotFound()

    @ws.tool(TOOL, lookup=find_order, settle_after=0)
    async def submit_order(sku: str, idempotency_key: str) -> dict[str, str]:
        raise AssertionError("the reconciler never executes a write")

    await ws.start()
    await ws.ledger.count_due(tools=[TOOL])  # open a pooled connection before the clock starts
    await asyncio.to_thread(barrier.wait)
    cpu = time.process_time()
    report = await ws.reconcile()
    cpu = time.process_time() - cpu
    await ws.close()
    return {**report.model_dump(), "cpu": cpu}


# -- seeding -----------------------------------------------------------------------------


async def _execute(dsn: str, schema: str, *statements: str) -> None:
    connection = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


def _seed_unknown(count: int, offset: int) -> str:
    """`count` operations whose outcome is unknown, sent a minute ago, keys k<offset+n>."""
    return f"""
        INSERT INTO writesafe_operations (scope, key, tool, fingerprint, status, version,
            executions, max_executions, arguments, last_code, last_sent_at, checks, next_check_at,
            created_at, updated_at)
        SELECT 'default', 'k' || n, '{TOOL}', repeat('0', 64), 'outcome_unknown', 1, 1, 3,
            '{{"sku":"A1"}}', 'OUTCOME_UNKNOWN', now() - interval '1 minute', 0,
            now() - interval '1 minute', now() - interval '1 minute', now() - interval '1 minute'
        FROM generate_series({offset}, {offset + count - 1}) AS n
    """


def _seed_history(count: int, offset: int) -> list[str]:
    """`count` finished operations, each with one execution attempt: the ledger's history."""
    return [
        f"""
        INSERT INTO writesafe_operations (scope, key, tool, fingerprint, status, version,
            executions, max_executions, arguments, result, last_sent_at, checks, created_at,
            updated_at)
        SELECT 'history', 'h' || n, '{TOOL}', repeat('0', 64),
            CASE WHEN n % 50 = 0 THEN 'failed' ELSE 'succeeded' END, 2, 1, 3,
            '{{"sku":"A1"}}', '{{"order":"h' || n || '"}}', now() - interval '1 day', 0,
            now() - interval '1 day', now() - interval '1 day'
        FROM generate_series({offset}, {offset + count - 1}) AS n
        """,
        """
        INSERT INTO writesafe_attempts (operation_id, kind, execution, outcome, started_at,
            finished_at)
        SELECT id, 'execution', 1, status, created_at, created_at
        FROM writesafe_operations
        WHERE scope = 'history' AND id > (
            SELECT coalesce(max(operation_id), 0) FROM writesafe_attempts)
        """,
    ]


# -- measuring ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    workers: int
    operations: int
    seconds: float
    worker_cpu: float
    examined: list[int]

    @property
    def per_second(self) -> float:
        return self.operations / self.seconds

    @property
    def ms_per_operation(self) -> float:
        return self.seconds / self.operations * 1000


def _run(url: str, schema: str, workers: int, expected: int, latency: float, batch: int) -> Run:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers + 1)
    results = context.Queue()
    processes = [
        context.Process(target=_worker, args=(url, schema, latency, batch, barrier, results))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    barrier.wait()
    began = time.perf_counter()
    reports = [results.get(timeout=3_600) for _ in processes]
    seconds = time.perf_counter() - began
    for process in processes:
        process.join()
    resolved = sum(r["found"] + r["absent"] for r in reports)
    trouble = sum(r["superseded"] + r["errors"] + r["still_unknown"] for r in reports)
    if resolved != expected or trouble:
        raise SystemExit(f"expected {expected} resolved exactly once, got {reports}")
    return Run(
        workers,
        expected,
        seconds,
        sum(r["cpu"] for r in reports),
        [r["examined"] for r in reports],
    )


def _line(label: str, run: Run, baseline: Run, ratio_of: str) -> str:
    ratio = (
        run.per_second / baseline.per_second
        if ratio_of == "throughput"
        else run.ms_per_operation / baseline.ms_per_operation
    )
    return (
        f"{label:<22} {run.per_second:>9.0f} ops/s {run.ms_per_operation:>8.3f} ms/op  "
        f"×{ratio:.2f} {ratio_of:<10}  worker CPU {run.worker_cpu / run.operations * 1000:.3f} "
        f"ms/op  split {run.examined}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--operations", type=int, default=20_000)
    parser.add_argument("--latency", type=float, default=0.002, help="lookup latency, seconds")
    parser.add_argument("--batch", type=int, default=16, help="operations leased at a time")
    parser.add_argument("--size-operations", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median kept)")
    parser.add_argument("--skip-size", action="store_true", help="only the throughput part")
    options = parser.parse_args()
    url, batch, latency = options.database_url, options.batch, options.latency
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    schema = f"ws_bench_{uuid.uuid4().hex[:8]}"
    load = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"lookup latency {latency * 1000:g} ms, batch {batch}; median of {options.repeat} runs"
    )
    asyncio.run(_execute(dsn, "public", f'CREATE SCHEMA "{schema}"'))
    try:
        asyncio.run(_migrate(url, schema))

        def measure(workers: int, operations: int, offset: int) -> Run:
            runs = []
            for attempt in range(options.repeat):
                start = offset + attempt * operations
                asyncio.run(_execute(dsn, schema, _seed_unknown(operations, start), "ANALYZE"))
                runs.append(_run(url, schema, workers, operations, latency, batch))
            return sorted(runs, key=lambda run: run.seconds)[len(runs) // 2]

        print(f"\nThroughput over {options.operations} unknown operations")
        offset = 0
        scaling = {}
        for workers in (1, 2, 4):
            scaling[workers] = measure(workers, options.operations, offset)
            offset += options.operations * options.repeat
            label = f"{workers} worker{'s' if workers > 1 else ''}"
            print(_line(label, scaling[workers], scaling[1], "throughput"), flush=True)
        print(
            f"scaling 1→2→4 workers: ×{scaling[2].per_second / scaling[1].per_second:.2f}, "
            f"×{scaling[4].per_second / scaling[1].per_second:.2f}"
        )

        if options.skip_size:
            return
        sizes = {}
        print(f"\nTime per operation vs ledger size ({options.size_operations} due, 1 worker)")
        asyncio.run(_execute(dsn, schema, "TRUNCATE writesafe_attempts, writesafe_operations"))
        for rows in (100_000, 1_000_000):
            have = asyncio.run(_count(dsn, schema))
            due = options.size_operations * options.repeat
            missing = rows - have - due
            if missing > 0:
                asyncio.run(_execute(dsn, schema, *_seed_history(missing, have), "ANALYZE"))
            sizes[rows] = measure(1, options.size_operations, offset)
            offset += due
            print(_line(f"{rows:>9,} rows ledger", sizes[rows], sizes[100_000], "time/op"))
        growth = sizes[1_000_000].ms_per_operation / sizes[100_000].ms_per_operation
        print(f"\ntime per operation 1M vs 100k rows: ×{growth:.2f} (target ≤ 1.3)")
    finally:
        asyncio.run(_execute(dsn, "public", f'DROP SCHEMA "{schema}" CASCADE'))


async def _migrate(url: str, schema: str) -> None:
    ledger = Ledger.from_url(url, schema=schema)
    try:
        await ledger.migrate()
    finally:
        await ledger.close()


async def _count(dsn: str, schema: str) -> int:
    connection = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        return int(await connection.fetchval("SELECT count(*) FROM writesafe_operations"))
    finally:
        await connection.close()


if __name__ == "__main__":
    main()
