"""Whether the embedded writer's own wait for the lock earns its place against tenacity's.

    python -m bench.lock_wait [--rounds 10] [--hold 0.1] [--json]

When another process holds the SQLite file's write lock, the writer's thread tries again after
a random wait below 50 µs, doubling to 2 ms (`ledger._sqlite_writer.begin_when_free`). Measured
interleaved in one run, on one file whose lock another connection holds for `--hold` seconds a
round: that loop, and tenacity's `Retrying` with the same schedule (`wait_random_exponential`,
the first try at once), each waiting out the same hold. Printed: CPU per try, and how many tries
each made. On a machine shared with the lock's holder, each try's CPU is taken from it: the rule
is to use tenacity if its CPU per try is within 1.15× of the loop's.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from bench._cli import run_and_report
from writesafe.ledger._engine import SQLITE_BUSY_TIMEOUT, is_busy
from writesafe.ledger._sqlite_writer import _FIRST_WAIT, _LONGEST_WAIT, begin_when_free

THRESHOLD = 1.15
OURS = "begin_when_free"
TENACITY = "tenacity Retrying"


def _tenacity(cursor: sqlite3.Cursor) -> int:
    retrying = Retrying(
        retry=retry_if_exception(is_busy),
        wait=wait_random_exponential(multiplier=_FIRST_WAIT, max=_LONGEST_WAIT),
        stop=stop_after_delay(SQLITE_BUSY_TIMEOUT),
        reraise=True,
    )
    retrying(cursor.execute, "BEGIN IMMEDIATE")
    attempts: int = retrying.statistics["attempt_number"]
    return attempts


def _wait_out(path: Path, hold: float, wait: Callable[[sqlite3.Cursor], int]) -> tuple[int, float]:
    """Tries and CPU seconds (this thread's) of `wait` for a lock held `hold` seconds."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    waiter = sqlite3.connect(path, isolation_level=None)
    try:
        waiter.execute("PRAGMA busy_timeout=0")
        holder.execute("BEGIN IMMEDIATE")
        release = threading.Timer(hold, holder.execute, ("COMMIT",))
        release.start()
        cpu = time.thread_time()
        tries = wait(waiter.cursor())
        cpu = time.thread_time() - cpu
        waiter.execute("COMMIT")
        release.join()
        return tries, cpu
    finally:
        waiter.close()
        holder.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    path = Path(tempfile.mkdtemp(prefix="lock-wait-")) / "lock.db"
    with sqlite3.connect(path, isolation_level=None) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
    waits = {OURS: begin_when_free, TENACITY: _tenacity}
    samples: dict[str, list[tuple[int, float]]] = {name: [] for name in waits}
    for _ in range(args.rounds):
        for name, wait in waits.items():
            samples[name].append(_wait_out(path, args.hold, wait))
    rows = {
        name: {
            "tries": statistics.median(tries for tries, _ in taken),
            "cpu_us_per_try": round(statistics.median(1e6 * cpu / n for n, cpu in taken), 1),
        }
        for name, taken in samples.items()
    }
    ratio = rows[TENACITY]["cpu_us_per_try"] / rows[OURS]["cpu_us_per_try"]
    return {
        "hold_seconds": args.hold,
        "rounds": args.rounds,
        "waits": rows,
        "tenacity_vs_ours": round(ratio, 2),
        "keep_ours": ratio > THRESHOLD,
    }


def _print(report: dict[str, Any]) -> None:
    title = f"the lock held {report['hold_seconds']:g} s, median of {report['rounds']} rounds"
    table = Table(title=title)
    for column in ("wait", "tries", "CPU µs per try"):
        table.add_column(column, justify="right")
    for name, row in report["waits"].items():
        table.add_row(name, f"{row['tries']:,.0f}", f"{row['cpu_us_per_try']:.1f}")
    console = Console()
    console.print(table)
    verdict = "keep the loop" if report["keep_ours"] else "use tenacity"
    console.print(
        f"tenacity ÷ loop, CPU per try: {report['tenacity_vs_ours']:.2f}× "
        f"(rule: ≤ {THRESHOLD}× uses tenacity): {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--hold", type=float, default=0.1, help="seconds the lock is held a round")
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
