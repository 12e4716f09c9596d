"""`python -m tests.chaos --orders N --workers W --seed S`: run, check, print; 1 if violated."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tests.chaos._checker import VIOLATIONS
from tests.chaos._harness import Report, run_chaos
from tests.chaos._plan import Downstream, DriverFault, Plan


def summary(report: Report) -> Table:
    verdict = report.verdict
    table = Table(title=f"chaos run, seed {report.plan.seed}", show_header=False)
    table.add_row("logical orders", f"{report.orders:,}")
    table.add_row("operations in the ledger", f"{report.operations:,}")
    table.add_row("orders with an effect in the shop", f"{verdict.orders_with_effect:,}")
    table.add_row(
        "final statuses", ", ".join(f"{k} {v:,}" for k, v in sorted(verdict.statuses.items()))
    )
    table.add_row(
        "answers to callers",
        ", ".join(f"{k} {v:,}" for k, v in sorted(verdict.answers.items()) if v),
    )
    table.add_row(
        "shop requests by fault",
        ", ".join(f"{k} {v:,}" for k, v in sorted(verdict.shop_faults.items())),
    )
    table.add_row(
        "driver faults", ", ".join(f"{k} {v:,}" for k, v in sorted(report.driver_faults.items()))
    )
    table.add_row(
        "writer stalls by who stopped the writer",
        ", ".join(f"{k} {v:,}" for k, v in sorted(report.writer_stalls.items())) or "none",
    )
    table.add_row(
        "process starts by clock skew",
        ", ".join(f"{k} {v:,}" for k, v in sorted(report.skews.items())) or "none",
    )
    passes = report.reconciler_passes
    table.add_row(
        "reconciler workers",
        f"found {passes['found']:,}, absent {passes['absent']:,}, "
        f"escalated {passes['escalated']:,}, expired leases {passes['expired_leases']:,}, "
        f"errors {passes['errors']:,}; exits (restarted) by code "
        f"{dict(report.reconciler_restarts) or 'none'}",
    )
    table.add_row("reconciled (operations with a lookup, now final)", f"{verdict.reconciled:,}")
    table.add_row("escalated (needs_attention)", f"{verdict.escalated:,}")
    for name in VIOLATIONS:
        refs = verdict.violations[name]
        shown = f"{len(refs)}" + (f"  e.g. {', '.join(refs[:5])}" if refs else "")
        table.add_row(f"{name} (must be 0)", shown, style=None if not refs else "bold red")
    table.add_row("wall time", f"{report.wall_seconds:.1f} s")
    table.add_row(
        "result", "OK" if report.ok else "VIOLATED", style="bold green" if report.ok else "bold red"
    )
    return table


def faults(text: str) -> tuple[DriverFault, ...]:
    """The `--faults` list; an unknown kind is a usage error, not a traceback."""
    try:
        return tuple(DriverFault(name) for name in text.split(",") if name)
    except ValueError:
        known = ", ".join(f.value for f in DriverFault)
        raise argparse.ArgumentTypeError(f"unknown fault in {text!r}; known: {known}") from None


def verdict_json(report: Report) -> dict[str, object]:
    """What a script comparing runs needs: the seed, the violations by kind, the wall time."""
    return {
        "seed": report.plan.seed,
        "ok": report.ok,
        "violations": {k: len(v) for k, v in report.verdict.violations.items()},
        "examples": {k: v[:5] for k, v in report.verdict.violations.items() if v},
        "writer_stalls": dict(report.writer_stalls),
        "wall_seconds": round(report.wall_seconds, 1),
        "run_dir": str(report.run_dir),
    }


async def until_terminated(run: Coroutine[Any, Any, Report]) -> Report:
    """Run `run`; SIGTERM cancels it as Ctrl-C does, so a run stopped from outside (a job in the
    background ignores SIGINT) still removes its role, schema and servers."""
    task = asyncio.ensure_future(run)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=500)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8, help="orders in flight per worker")
    parser.add_argument(
        "--reconcilers",
        type=int,
        default=2,
        help="0: the guard's own takeover carries the run; one reconciler sweeps after it",
    )
    defaults = Plan(seed=0)
    parser.add_argument(
        "--skew", type=float, default=defaults.skew_seconds, help="largest clock skew (s); 0: none"
    )
    parser.add_argument(
        "--stall-rate",
        type=float,
        default=defaults.stall_rate,
        help="orders that stop their process just before they send",
    )
    parser.add_argument(
        "--duplicate-rate",
        type=float,
        default=defaults.duplicate_rate,
        help="orders a second worker process submits too",
    )
    parser.add_argument(
        "--downstream",
        choices=[d.value for d in Downstream],
        default=defaults.downstream.value,
        help="fenced: the shop refuses stale fencing tokens; plain: it checks nothing",
    )
    parser.add_argument(
        "--faults",
        type=faults,
        default=defaults.driver_faults,
        help="the fault driver's kinds, comma-separated (empty: none)",
    )
    parser.add_argument("--json", type=Path, help="also write the verdict as JSON to this file")
    args = parser.parse_args()
    plan = Plan(
        driver_faults=args.faults,
        seed=args.seed,
        skew_seconds=args.skew,
        stall_rate=args.stall_rate,
        duplicate_rate=args.duplicate_rate,
        downstream=Downstream(args.downstream),
    )
    console = Console()
    run = run_chaos(
        args.orders,
        args.workers,
        args.seed,
        concurrency=args.concurrency,
        reconcilers=args.reconcilers,
        plan=plan,
        log=console.print,
    )
    try:
        report = asyncio.run(until_terminated(run))
    except asyncio.CancelledError:
        console.print("stopped (SIGTERM); its role, schema and servers are removed")
        sys.exit(2)
    console.print(summary(report))
    if args.json is not None:
        args.json.write_text(json.dumps(verdict_json(report), indent=2) + "\n")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
