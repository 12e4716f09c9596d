"""Memory per in-flight call: what the guard holds while a write is executing.

    python -m bench.memory [--calls 500] [--backend pg+redis|pg|embedded] [--json]

Starts N guarded calls with distinct keys whose write waits on an event, waits until every one is
executing, and measures the Python heap (tracemalloc) and the process RSS against the state before;
the baseline, in the same run, is N bare calls of the same write waiting on the same event.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tracemalloc
from collections.abc import Callable, Coroutine
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from bench._cli import run_and_report
from bench._setup import isolated
from bench.guard import ORDER
from writesafe import WriteSafe

_WAVE = 20


class Gate:
    """A write that parks until released, counting how many are parked."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.parked = 0

    async def write(self, order: dict[str, Any]) -> dict[str, Any]:
        self.parked += 1
        await self.release.wait()
        return {"order_id": "o", "accepted": True}


async def _footprint(
    calls: int, start: Callable[[Gate, int], Coroutine[Any, Any, Any]]
) -> dict[str, float]:
    """Bytes per parked call: heap (tracemalloc) and RSS deltas while `calls` are parked.

    Calls are started in waves of `_WAVE` so that claiming never needs more connections than the
    pools hold: what is measured is the steady in-flight state, not a connection storm.
    """
    gate = Gate()
    gc.collect()
    process = psutil.Process()
    rss_before = process.memory_info().rss
    heap_before = tracemalloc.get_traced_memory()[0]
    tasks: list[asyncio.Task[Any]] = []
    for wave in range(0, calls, _WAVE):
        tasks.extend(
            asyncio.create_task(start(gate, n)) for n in range(wave, min(wave + _WAVE, calls))
        )
        while gate.parked < len(tasks):
            await asyncio.sleep(0.01)
            if any(t.done() for t in tasks):
                await next(t for t in tasks if t.done())  # surfaces the failure
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] - heap_before
    rss = process.memory_info().rss - rss_before
    gate.release.set()
    await asyncio.gather(*tasks)
    return {"heap_bytes_per_call": heap / calls, "rss_bytes_per_call": rss / calls}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tracemalloc.start()
    async with isolated("memory", args.database_url, args.redis_url) as iso:
        if args.backend == "embedded":
            ws = WriteSafe(f"sqlite+aiosqlite:///{iso.workdir / 'ledger.db'}")
        else:
            redis_url = args.redis_url if args.backend == "pg+redis" else None
            ws = WriteSafe(
                args.database_url,
                redis_url,
                schema=iso.schema,
                redis_prefix=iso.redis_prefix,
                auto_migrate=True,
            )
        try:
            await ws.start()
            tools: dict[int, Any] = {}

            async def guarded(gate: Gate, n: int) -> Any:
                tool = tools.get(id(gate))
                if tool is None:
                    tool = tools[id(gate)] = ws.tool(f"bench_mem_{len(tools)}", timeout=600)(
                        gate.write
                    )
                return await tool(ORDER, idempotency_key=f"mem-{len(tools)}-{n}")

            async def bare(gate: Gate, n: int) -> Any:
                return await gate.write(ORDER)

            await _footprint(50, guarded)  # warm pools, caches and compiled statements
            baseline = await _footprint(args.calls, bare)
            measured = await _footprint(args.calls, guarded)
        finally:
            await ws.close()
    tracemalloc.stop()
    return {
        "backend": args.backend,
        "calls": args.calls,
        "bare": {k: round(v) for k, v in baseline.items()},
        "guarded": {k: round(v) for k, v in measured.items()},
        "heap_ratio": round(measured["heap_bytes_per_call"] / baseline["heap_bytes_per_call"], 1),
        "guard_heap_bytes_per_call": round(
            measured["heap_bytes_per_call"] - baseline["heap_bytes_per_call"]
        ),
    }


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"memory per in-flight call, {report['backend']}, {report['calls']} calls")
    for column in ("calls of", "heap bytes/call", "RSS bytes/call"):
        table.add_column(column, justify="left" if column == "calls of" else "right")
    for label in ("bare", "guarded"):
        row = report[label]
        table.add_row(label, f"{row['heap_bytes_per_call']:,}", f"{row['rss_bytes_per_call']:,}")
    console = Console()
    console.print(table)
    console.print(
        f"the guard holds {report['guard_heap_bytes_per_call']:,} heap bytes per in-flight call "
        f"({report['heap_ratio']}x the bare call)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--backend", choices=["pg+redis", "pg", "embedded"], default="pg+redis")
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
