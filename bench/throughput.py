"""Throughput: guarded first executions per second with 1, 8 and 64 keys in flight.

    python -m bench.throughput [--seconds 3] [--backend pg+redis|pg|embedded] [--sync]
                               [--core-share S] [--json]
    python -m bench.throughput --peers [--rounds 3] [--seconds 3] [--json]

`--peers` measures writesafe on every backend against agent-once and DBOS instead
(`bench/throughput_peers.py`).

Each configuration keeps C distinct keys in flight at all times (C coroutines, each calling the
guarded write with a fresh key as soon as its previous call returns), either in one process or
spread evenly over 4 processes (C=1 becomes one key per process: 4 in flight). The baseline,
measured in the same run and process layout, is the same loop doing only the round trips a first
execution must make with raw clients: 2 committed INSERTs, with Redis too (a tool of first
executions asks the ledger first and leaves Redis alone: `reconciler/_store_order.py`). Ratios:
guarded / floor, and 4 processes / 1 process. With `--sync`, the guarded write is a plain `def`
called blocking through the sync face, from C threads spread over the processes in the same way (as
a threaded WSGI server, or a worker per process, calls it); the floor stays the async one. C=32 in
one process against 4 processes × 8 is issue 30's scaling comparison. Beside each: the cores the
whole machine was busy (Linux's `/proc/stat`) and the cores the benchmark's own processes used
(their CPU time): where the machine is busy on every core, more processes cannot add work, and the
rest of it is the database's (and Redis's) share. `--core-share S` holds each process to S of a
core (`bench/_core_share.py`): the model of a machine with a core per process, where that share
leaves cores to spare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import throughput_peers
from bench._cli import run_and_report
from bench._core_share import (
    CoreShareUnavailable,
    check_available,
    core_share,
    core_share_group,
    join,
)
from bench._floors import postgres_floor, sqlite_floor
from bench._setup import create_postgres_floor, create_sqlite_floor, isolated
from bench.guard import ORDER, bare_sync_write, bare_write
from writesafe import WriteSafe

CONCURRENCY = (1, 8, 32, 64)
PROCESSES = (1, 4)


@dataclass(frozen=True)
class Job:
    kind: str  # "guard", "sync" (the guard's sync face) or "floor"
    backend: str
    database_url: str
    redis_url: str | None
    schema: str | None
    redis_prefix: str
    sqlite_path: str
    tag: str
    in_flight: int
    seconds: float
    core_group: str | None = None  # the cgroup holding the process to its share of a core


class _Start:
    """The synchronised start of every process's calls, from which its CPU is counted: the
    start-up and the warm-up before it fall outside the seconds timed."""

    def __init__(self, barrier: Barrier) -> None:
        self._barrier = barrier
        self.cpu_seconds = 0.0

    def wait(self) -> None:
        self._barrier.wait()
        self.cpu_seconds = time.process_time()


async def _loop(job: Job, one: Any) -> int:
    deadline = time.perf_counter() + job.seconds
    done = 0

    async def worker(w: int) -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < deadline:
            await one(f"{job.tag}-{w}-{n}")
            n += 1
            done += 1

    await asyncio.gather(*(worker(w) for w in range(job.in_flight)))
    return done


def _writesafe(job: Job) -> WriteSafe:
    if job.backend == "embedded":
        return WriteSafe(f"sqlite+aiosqlite:///{job.sqlite_path}")
    return WriteSafe(
        job.database_url,
        job.redis_url,
        schema=job.schema,
        redis_prefix=job.redis_prefix,
    )


async def _guard_job(job: Job, start: _Start) -> int:
    ws = _writesafe(job)
    tool = ws.tool("bench_submit")(bare_write)
    try:
        await ws.start()
        await tool.key(f"{job.tag}-warm")(ORDER)
        start.wait()

        async def one(key: str) -> None:
            await tool.key(key)(ORDER)

        return await _loop(job, one)
    finally:
        await ws.close()


def _sync_job(job: Job, start: _Start) -> int:
    """`_guard_job` through the sync face: `in_flight` threads, each calling a plain `def` tool
    with a fresh key as soon as its previous call returns."""
    ws = _writesafe(job)
    tool = ws.tool("bench_submit_sync")(bare_sync_write)
    done = [0] * job.in_flight
    try:
        tool.key(f"{job.tag}-warm")(ORDER)
        start.wait()
        deadline = time.perf_counter() + job.seconds

        def caller(c: int) -> None:
            while time.perf_counter() < deadline:
                tool.key(f"{job.tag}-{c}-{done[c]}")(ORDER)
                done[c] += 1

        callers = [threading.Thread(target=caller, args=(c,)) for c in range(job.in_flight)]
        for thread in callers:
            thread.start()
        for thread in callers:
            thread.join()
        return sum(done)
    finally:
        ws.sync.close()


async def _floor_job(job: Job, start: _Start) -> int:
    if job.backend == "embedded":
        one, close = await sqlite_floor(job.sqlite_path)
    else:
        assert job.schema is not None
        one, close = await postgres_floor(job.database_url, job.schema, min(job.in_flight, 30))
    start.wait()
    try:
        return await _loop(job, one)
    finally:
        await close()


def _process(job: Job, barrier: Barrier, results: Any) -> None:
    """Run `job`; put the calls it made and the CPU seconds its process spent from the start."""
    if job.core_group is not None:
        join(Path(job.core_group))
    start = _Start(barrier)
    if job.kind == "sync":
        done = _sync_job(job, start)
    else:
        done = asyncio.run((_guard_job if job.kind == "guard" else _floor_job)(job, start))
    results.put((done, time.process_time() - start.cpu_seconds))


def _busy_seconds() -> float:
    """CPU seconds the machine has spent busy (all cores, anything but idle and I/O wait)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Run:
    ops_per_s: float
    machine_cores: float  # cores the whole machine kept busy meanwhile
    client_cores: float  # cores the benchmark's processes used of them


def _run_config(base: Job, processes: int, in_flight: int, share: float | None) -> Run:
    """`processes` processes sharing `in_flight` keys in flight, each held to `share` of a core
    if given: their ops per second and cores."""
    context = multiprocessing.get_context("spawn")
    per_process = max(in_flight // processes, 1)
    barrier = context.Barrier(processes + 1)
    results = context.Queue()
    with contextlib.ExitStack() as groups:
        children = []
        for p in range(processes):
            group = None if share is None else groups.enter_context(core_share_group(share))
            job = Job(
                **{
                    **base.__dict__,
                    "tag": f"{base.tag}-{processes}-{in_flight}-{p}",
                    "in_flight": per_process,
                    "core_group": None if group is None else str(group),
                }
            )
            child = context.Process(target=_process, args=(job, barrier, results))
            child.start()
            children.append(child)
        barrier.wait()
        started, busy = time.perf_counter(), _busy_seconds()
        answers = [results.get(timeout=base.seconds + 120) for _ in children]
        elapsed = max(time.perf_counter() - started, base.seconds)
        machine = (_busy_seconds() - busy) / elapsed
        for child in children:
            child.join()  # a cgroup is removed only once its process has exited
    total = sum(done for done, _ in answers)
    return Run(total / elapsed, machine, sum(cpu for _, cpu in answers) / elapsed)


async def _prepare(args: argparse.Namespace, schema: str, sqlite_path: Path) -> None:
    if args.backend == "embedded":
        ws = WriteSafe(f"sqlite+aiosqlite:///{sqlite_path}")
        await ws.start()
        await ws.close()
        await create_sqlite_floor(sqlite_path)
        return
    ws = WriteSafe(args.database_url, schema=schema, auto_migrate=True)
    await ws.start()
    await ws.close()
    await create_postgres_floor(args.database_url, schema)


async def _isolated_run(args: argparse.Namespace) -> dict[str, Any]:
    async with isolated("throughput", args.database_url, args.redis_url) as iso:
        sqlite_path = iso.workdir / "ledger.db"
        await _prepare(args, iso.schema, sqlite_path)
        base = Job(
            kind="sync" if args.sync else "guard",
            backend=args.backend,
            database_url=args.database_url,
            redis_url=args.redis_url if args.backend == "pg+redis" else None,
            schema=iso.schema,
            redis_prefix=iso.redis_prefix,
            sqlite_path=str(sqlite_path),
            tag="t",
            in_flight=1,
            seconds=args.seconds,
        )
        rows = []
        for processes in PROCESSES:
            for in_flight in CONCURRENCY:
                share = args.core_share
                guard = await asyncio.to_thread(_run_config, base, processes, in_flight, share)
                floor_job = Job(**{**base.__dict__, "kind": "floor"})
                floor = await asyncio.to_thread(_run_config, floor_job, processes, in_flight, share)
                rows.append(
                    {
                        "processes": processes,
                        "in_flight": max(in_flight // processes, 1) * processes,
                        "guard_ops_per_s": round(guard.ops_per_s, 1),
                        "floor_ops_per_s": round(floor.ops_per_s, 1),
                        "guard_vs_floor": round(guard.ops_per_s / floor.ops_per_s, 3),
                        "guard_machine_cores": round(guard.machine_cores, 2),
                        "guard_client_cores": round(guard.client_cores, 2),
                        "floor_machine_cores": round(floor.machine_cores, 2),
                        "floor_client_cores": round(floor.client_cores, 2),
                        "cpu_per_call_vs_floor": round(
                            (guard.client_cores / guard.ops_per_s)
                            / (floor.client_cores / floor.ops_per_s),
                            2,
                        ),
                    }
                )
    one_process = {r["in_flight"]: r["guard_ops_per_s"] for r in rows if r["processes"] == 1}
    for row in rows:
        if row["processes"] > 1 and row["in_flight"] in one_process:
            row["scaling_vs_1_process"] = round(
                row["guard_ops_per_s"] / one_process[row["in_flight"]], 2
            )
    return {
        "backend": args.backend,
        "sync": args.sync,
        "seconds": args.seconds,
        "core_share": args.core_share,
        "rows": rows,
    }


def _print(report: dict[str, Any]) -> None:
    face = ", sync face" if report["sync"] else ""
    held = (
        f", each process held to {report['core_share']} of a core" if report["core_share"] else ""
    )
    title = f"throughput, {report['backend']}{face}{held}, first executions per second"
    table = Table(title=title)
    columns = (
        "processes",
        "in flight",
        "guarded/s",
        "floor/s",
        "guarded÷floor",
        "4 proc ÷ 1",
        "busy cores",
        "clients' cores",
        "busy (floor)",
        "CPU/call ÷ floor's",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for row in report["rows"]:
        table.add_row(
            str(row["processes"]),
            str(row["in_flight"]),
            f"{row['guard_ops_per_s']:,.0f}",
            f"{row['floor_ops_per_s']:,.0f}",
            f"{row['guard_vs_floor']:.2f}",
            f"{row['scaling_vs_1_process']:.2f}x" if "scaling_vs_1_process" in row else "",
            f"{row['guard_machine_cores']:.2f}",
            f"{row['guard_client_cores']:.2f}",
            f"{row['floor_machine_cores']:.2f}",
            f"{row['cpu_per_call_vs_floor']:.2f}",
        )
    Console().print(table)


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    if args.core_share is not None:
        if args.peers:
            sys.exit("--core-share holds bench.throughput's own layouts, not --peers' processes")
        try:
            check_available()
        except CoreShareUnavailable as error:
            sys.exit(str(error))
    if args.peers:
        return await throughput_peers.run(args)
    return await _isolated_run(args)


def _show(report: dict[str, Any]) -> None:
    (throughput_peers.show if "layouts" in report else _print)(report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--backend", choices=["pg+redis", "pg", "embedded"], default="pg+redis")
    parser.add_argument("--sync", action="store_true", help="guard a plain def, called blocking")
    parser.add_argument("--peers", action="store_true", help="every backend against the peers")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of --peers")
    parser.add_argument(
        "--core-share",
        type=core_share,
        help="hold each process to this share of a core (root, cgroups: bench/_core_share.py)",
    )
    run_and_report(parser, _run, _show)


if __name__ == "__main__":
    main()
