"""`python -m tests.chaos --orders N --workers W --seed S`: run, check, print; 1 if violated."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rich.console import Console
from rich.table import Table

from tests.chaos._checker import VIOLATIONS
from tests.chaos._harness import Report, run_chaos


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--orders", type=int, default=500)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8, help="orders in flight per worker")
    parser.add_argument("--reconcilers", type=int, default=2)
    args = parser.parse_args()
    console = Console()
    report = asyncio.run(
        run_chaos(
            args.orders,
            args.workers,
            args.seed,
            concurrency=args.concurrency,
            reconcilers=args.reconcilers,
            log=console.print,
        )
    )
    console.print(summary(report))
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
