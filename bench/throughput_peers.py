"""Throughput against the peers: first executions per second of writesafe, agent-once and DBOS.

    python -m bench.throughput --peers [--rounds 3] [--seconds 2] [--json]

Every system guards the same counting coroutine with C distinct keys in flight at all times (C
callers, each calling it with a fresh key as soon as its previous call returns), for `--seconds`
after a synchronised start, in one process (C = 1, 8, 64) and in 4 processes of 8 callers.
Systems: writesafe embedded (SQLite), on PostgreSQL and on PostgreSQL + Redis; agent-once 0.1.0
on SQLite and on PostgreSQL (the `bench` extra); DBOS where it is installed (skipped, and said
so, where it is not); and the committed-write floor of each store: the same loop making the two
committed INSERTs a durable first execution needs per call, on raw connections
(`bench/_floors.py`): its CPU per call is the part of theirs that is the drivers' own.

Each round runs every system at every layout once, the systems in reverse order every other
round, so that a burst of load from elsewhere spreads over all of them; the figures are the
medians over the rounds. Printed per layout: calls per second, the ratio to the best peer (the
fastest agent-once or DBOS), to the best peer on the same store (SQLite or PostgreSQL) and to
the floor of the system's own store, and the client's CPU per call (the processes' CPU time,
every thread's, divided by their calls) and its ratio to the floor's CPU per call: what issue
30's CPU target is judged by (docs/performance.md). Then the whole machine's CPU per call (every
process's busy time from the start to the last answer: the clients', the servers' and the
kernel's): where the callers outnumber the cores (4 × 8 on a small machine), calls per second
are the cores divided by it, so a system that spends less in the client but more in the server
gains nothing there (docs/performance.md, "where the CPU of a call goes"). Every function must run
exactly once per first execution: the calls that raised (`errors`) and the executions beyond one
per answered call (`duplicates`) are counted and printed, and any of either fails the run.

PostgreSQL connections are bounded so that a run holds few on a shared server: writesafe's writer
pool, the floor's and DBOS's hold at most 8 per process (`POOL_SIZE`; the floor no more than its
callers), agent-once's store one. The bound is the same for writesafe and the floor, so that
neither's CPU per call counts waits for a connection the other does not make (with 4 for
writesafe, each statement at 8 in flight waited for a slot: 5 % of its instructions).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from bench._floors import postgres_floor, sqlite_floor
from bench._setup import asyncpg_dsn, create_postgres_floor, create_sqlite_floor, isolated
from bench.guard import ORDER
from writesafe import WriteSafe
from writesafe.idempotency import WriteSafeSettings

LAYOUTS = ((1, 1), (1, 8), (1, 64), (4, 8))  # (processes, callers in each)
POOL_SIZE = 8  # connections per process of each pooled system (the floor: no more than callers)
WRITESAFE = {"writesafe embedded": "sqlite", "writesafe pg": "pg", "writesafe pg+redis": "pg"}
PEERS = {
    "agent-once sqlite": "sqlite",
    "agent-once pg": "pg",
    "dbos sqlite": "sqlite",
    "dbos pg": "pg",
}
FLOORS = {"sqlite": "floor: sqlite 2 committed INSERTs", "pg": "floor: pg 2 committed INSERTs"}

Call = Callable[[str], Awaitable[Any]]

_executed = 0  # runs of `counted_write` in this process


async def counted_write(order: dict[str, Any]) -> dict[str, Any]:
    """The guarded function: `bench.guard.bare_write`, counting its runs."""
    global _executed
    _executed += 1
    return {"order_id": f"o-{order['sku']}", "accepted": True}


@dataclass(frozen=True)
class Job:
    system: str
    database_url: str
    redis_url: str
    schema: str
    redis_prefix: str
    workdir: str
    tag: str
    callers: int
    seconds: float


@dataclass(frozen=True)
class Tally:
    calls: int
    errors: int
    duplicates: int
    cpu_seconds: float


def dbos_installed() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


async def _writesafe(job: Job) -> tuple[Call, Callable[[], Awaitable[None]]]:
    if job.system == "writesafe embedded":
        ws = WriteSafe(f"sqlite+aiosqlite:///{job.workdir}/writesafe.db")
    else:
        ws = WriteSafe(
            job.database_url,
            job.redis_url if job.system == "writesafe pg+redis" else None,
            schema=job.schema,
            redis_prefix=job.redis_prefix,
            settings=WriteSafeSettings(pool_size=POOL_SIZE),
        )
    tool = ws.tool("bench_submit")(counted_write)
    await ws.start()

    async def call(key: str) -> Any:
        return await tool.key(key)(ORDER)

    return call, ws.close


def _once_store(system: str, job: Job) -> Any:
    from once import Once
    from once.postgres import PostgresStore

    if system == "agent-once sqlite":
        return Once(Path(job.workdir) / "once.db")
    table = f"{job.schema}.once_effects"
    return Once(store=PostgresStore(asyncpg_dsn(job.database_url), table=table))


async def _agent_once(job: Job) -> tuple[Call, Callable[[], Awaitable[None]]]:
    once = _once_store(job.system, job)

    async def call(key: str) -> Any:
        return await once.aexecute(fn=counted_write, key=key, order=ORDER)

    async def close() -> None:
        once.close()

    return call, close


async def _dbos(job: Job) -> tuple[Call, Callable[[], Awaitable[None]]]:
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    config: DBOSConfig = {
        "name": "bench",
        "executor_id": job.tag,  # its own: a launch recovers only its own executor's workflows
        "sys_db_pool_size": POOL_SIZE,
        "log_level": "WARNING",
    }
    if job.system == "dbos sqlite":
        config["system_database_url"] = f"sqlite:///{job.workdir}/dbos.db"
    else:
        config["system_database_url"] = asyncpg_dsn(job.database_url)
        config["dbos_system_schema"] = job.schema
    DBOS(config=config)
    step = DBOS.step()(counted_write)

    async def flow(order: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await step(order)
        return result

    workflow = DBOS.workflow()(flow)
    DBOS.launch()

    async def call(key: str) -> Any:
        with SetWorkflowID(key):
            return await workflow(ORDER)

    async def close() -> None:
        DBOS.destroy()

    return call, close


async def _floor(job: Job) -> tuple[Call, Callable[[], Awaitable[None]]]:
    if job.system == FLOORS["sqlite"]:
        return await sqlite_floor(f"{job.workdir}/floor.db")
    return await postgres_floor(job.database_url, job.schema, min(job.callers, POOL_SIZE))


def open_system(
    system: str,
) -> Callable[[Job], Awaitable[tuple[Call, Callable[[], Awaitable[None]]]]]:
    """How `system` is opened on a job's stores (made by `prepare_stores`): its call and close."""
    if system in WRITESAFE:
        return _writesafe
    if system.startswith("agent-once"):
        return _agent_once
    if system.startswith("dbos"):
        return _dbos
    return _floor


async def _child(job: Job, barrier: Barrier) -> Tally:
    call, close = await open_system(job.system)(job)
    try:
        # As many calls at once as will run: a pool opens its connections (and prepares its
        # statements on each) now, not in the measured seconds.
        await asyncio.gather(*(call(f"{job.tag}-warm-{c}") for c in range(job.callers)))
        executed_before = _executed
        calls = errors = 0
        barrier.wait()
        cpu_before = time.process_time()
        deadline = time.perf_counter() + job.seconds

        async def caller(c: int) -> None:
            nonlocal calls, errors
            n = 0
            while time.perf_counter() < deadline:
                try:
                    await call(f"{job.tag}-{c}-{n}")
                    calls += 1
                except Exception:
                    errors += 1
                n += 1

        await asyncio.gather(*(caller(c) for c in range(job.callers)))
        cpu = time.process_time() - cpu_before
        ran = _executed - executed_before
        counted = job.system in WRITESAFE or job.system in PEERS
        return Tally(calls, errors, max(ran - calls, 0) if counted else 0, cpu)
    finally:
        await close()


def _process(job: Job, barrier: Barrier, results: Any) -> None:
    results.put(asdict(asyncio.run(_child(job, barrier))))


def _machine_busy() -> float:
    """Seconds of CPU the machine has spent busy so far, in every process and the kernel (its
    interrupts too; not the time a hypervisor gave to other guests)."""
    times = psutil.cpu_times()
    busy = ("user", "nice", "system", "irq", "softirq")
    return sum(float(getattr(times, name, 0.0)) for name in busy)


def _run(base: Job, processes: int) -> dict[str, float]:
    """`processes` processes of `base.callers` callers: calls/s, CPU per call (theirs, and the
    whole machine's), errors."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes + 1)
    results = context.Queue()
    children = [
        context.Process(
            target=_process, args=(replace(base, tag=f"{base.tag}-{p}"), barrier, results)
        )
        for p in range(processes)
    ]
    for child in children:
        child.start()
    barrier.wait()
    started, busy_before = time.perf_counter(), _machine_busy()
    tallies = [Tally(**results.get(timeout=base.seconds + 120)) for _ in children]
    elapsed = max(time.perf_counter() - started, base.seconds)
    busy = _machine_busy() - busy_before
    for child in children:
        child.join()
    calls = sum(t.calls for t in tallies)
    return {
        "ops_per_s": calls / elapsed,
        "cpu_us_per_call": 1e6 * sum(t.cpu_seconds for t in tallies) / max(calls, 1),
        "machine_us_per_call": 1e6 * busy / max(calls, 1),
        "errors": sum(t.errors for t in tallies),
        "duplicates": sum(t.duplicates for t in tallies),
    }


def _systems() -> list[str]:
    peers = [name for name in PEERS if dbos_installed() or not name.startswith("dbos")]
    return [*WRITESAFE, *peers, *FLOORS.values()]


async def prepare_stores(database_url: str, schema: str, workdir: Path, systems: list[str]) -> None:
    """Create the stores of `systems` once, before the processes that share them start."""
    ledgers = {WRITESAFE[system] for system in systems if system in WRITESAFE}
    if "pg" in ledgers:  # writesafe pg and pg+redis share the schema's ledger
        ws = WriteSafe(database_url, schema=schema, auto_migrate=True)
        await ws.start()
        await ws.close()
    if "sqlite" in ledgers:
        lite = WriteSafe(f"sqlite+aiosqlite:///{workdir}/writesafe.db")
        await lite.start()
        await lite.close()
    for system in systems:
        if system.startswith("agent-once"):
            job = Job(system, database_url, "", schema, "", str(workdir), "", 1, 0.0)
            _once_store(system, job).close()  # creates its table or file
    if FLOORS["sqlite"] in systems:
        await create_sqlite_floor(workdir / "floor.db")
    if FLOORS["pg"] in systems:
        await create_postgres_floor(database_url, schema)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    try:
        import once.postgres  # noqa: F401  (the PostgreSQL store needs the extra's psycopg)
    except ImportError as error:
        sys.exit(f"bench.throughput --peers needs agent-once: pip install -e '.[bench]' ({error})")
    systems = _systems()
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    async with isolated("peers_tp", args.database_url, args.redis_url) as iso:
        await prepare_stores(args.database_url, iso.schema, iso.workdir, systems)
        for round_number in range(args.rounds):
            order = systems if round_number % 2 == 0 else systems[::-1]
            for processes, callers in LAYOUTS:
                layout = f"{processes}x{callers}"
                for system in order:
                    job = Job(
                        system,
                        args.database_url,
                        args.redis_url,
                        iso.schema,
                        iso.redis_prefix,
                        str(iso.workdir),
                        f"r{round_number}-{layout}-{system}",
                        callers,
                        args.seconds,
                    )
                    sample = await asyncio.to_thread(_run, job, processes)
                    samples.setdefault((layout, system), []).append(sample)
    return _report(args, systems, samples)


def _report(
    args: argparse.Namespace,
    systems: list[str],
    samples: dict[tuple[str, str], list[dict[str, float]]],
) -> dict[str, Any]:
    layouts: dict[str, dict[str, Any]] = {}
    for processes, callers in LAYOUTS:
        layout = f"{processes}x{callers}"
        rows = {}
        for system in systems:
            taken = samples[(layout, system)]
            rows[system] = {
                "ops_per_s": round(statistics.median(s["ops_per_s"] for s in taken), 1),
                "cpu_us_per_call": round(statistics.median(s["cpu_us_per_call"] for s in taken), 1),
                "machine_us_per_call": round(
                    statistics.median(s["machine_us_per_call"] for s in taken), 1
                ),
                "errors": int(sum(s["errors"] for s in taken)),
                "duplicates": int(sum(s["duplicates"] for s in taken)),
            }
        for system, row in rows.items():
            store = WRITESAFE.get(system) or PEERS.get(system)
            if store is None:
                continue
            row["vs_best_peer"] = _ratio(row, _best_peer(rows))
            row["vs_best_peer_same_store"] = _ratio(row, _best_peer(rows, store))
            floor = rows[FLOORS[store]]
            row["vs_floor"] = _ratio(row, floor["ops_per_s"])
            row["cpu_vs_floor"] = round(row["cpu_us_per_call"] / floor["cpu_us_per_call"], 2)
        layouts[layout] = rows
    return {
        "rounds": args.rounds,
        "seconds": args.seconds,
        "dbos": "measured" if dbos_installed() else "not installed: skipped",
        "layouts": layouts,
        "errors": sum(row["errors"] for rows in layouts.values() for row in rows.values()),
        "duplicates": sum(row["duplicates"] for rows in layouts.values() for row in rows.values()),
    }


def _best_peer(rows: dict[str, dict[str, Any]], store: str | None = None) -> float:
    """The fastest peer's calls/s at one layout, on `store` or on any."""
    rates: list[float] = [
        rows[name]["ops_per_s"]
        for name, on in PEERS.items()
        if name in rows and store in (None, on)
    ]
    return max(rates)


def _ratio(row: dict[str, Any], other: float) -> float:
    return round(row["ops_per_s"] / other, 2) if other else float("inf")


def show(report: dict[str, Any]) -> None:
    console = Console(width=150)
    for layout, rows in report["layouts"].items():
        processes, callers = layout.split("x")
        title = f"{processes} process(es) × {callers} callers: first executions"
        table = Table(title=title)
        columns = ("system", "calls/s", "÷ best peer", "÷ best on its store", "÷ its floor")
        cpu = ("CPU µs/call", "CPU ÷ floor's", "machine µs/call")
        for column in (*columns, *cpu, "errors", "dup"):
            table.add_column(column, justify="left" if column == "system" else "right")
        for system, row in rows.items():
            table.add_row(
                system,
                f"{row['ops_per_s']:,.0f}",
                f"{row['vs_best_peer']:.2f}" if "vs_best_peer" in row else "",
                f"{row['vs_best_peer_same_store']:.2f}" if "vs_best_peer" in row else "",
                f"{row['vs_floor']:.2f}" if "vs_floor" in row else "",
                f"{row['cpu_us_per_call']:,.0f}",
                f"{row['cpu_vs_floor']:.2f}" if "cpu_vs_floor" in row else "",
                f"{row['machine_us_per_call']:,.0f}",
                str(row["errors"]),
                str(row["duplicates"]),
            )
        console.print(table)
    console.print(f"DBOS: {report['dbos']}; rounds: {report['rounds']} × {report['seconds']} s")
    console.print(f"errors: {report['errors']}, duplicates: {report['duplicates']}")
    if report["errors"] or report["duplicates"]:
        sys.exit("FAILED: a call raised or a function ran more than once per first execution")
