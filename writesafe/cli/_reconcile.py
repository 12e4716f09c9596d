"""`writesafe reconcile APP`: establish the truth of unknown outcomes with each tool's lookup.

One pass by default (`--once`), or a worker that keeps going (`--watch`) until SIGINT/SIGTERM, at
which it finishes the batch in hand and exits; the worker also prunes final operations past the
retention period on a schedule (`--prune-every`). Run as many as you like against PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from writesafe.cli._db import prune_summary
from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import fail, load_app
from writesafe.cli._options import AppArgument, JsonOption
from writesafe.cli._runner import run
from writesafe.cli._stores import unavailable_errors
from writesafe.idempotency import ReconcileReport, WriteSafe, WriteSafeError
from writesafe.ledger import prune
from writesafe.reconciler import ledger_failure

WatchOption = Annotated[
    bool,
    typer.Option(
        "--watch/--once", help="Keep reconciling until stopped, or make one pass (default)."
    ),
]
ToolOption = Annotated[str | None, typer.Option("--tool", help="Only this tool's operations.")]
LimitOption = Annotated[
    int | None, typer.Option("--limit", min=1, help="At most N operations per pass.")
]
OlderThanOption = Annotated[
    float,
    typer.Option("--older-than", min=0, help="Only operations sent at least S seconds ago."),
]
PruneEveryOption = Annotated[
    float,
    typer.Option(
        "--prune-every",
        min=0,
        help="With --watch: prune final operations past the retention period every S seconds "
        "(0: never; see `writesafe db prune`).",
    ),
]
IntervalOption = Annotated[
    float,
    typer.Option("--interval", min=0.01, help="With --watch: seconds to wait when nothing is due."),
]

err = Console(stderr=True)
# The longest a --watch worker waits between tries while the ledger is unreachable (seconds).
_MAX_OUTAGE_PAUSE = 30.0
_OUTAGE: tuple[type[BaseException], ...] = (*unavailable_errors(), WriteSafeError)


def reconcile(
    app: AppArgument,
    watch: WatchOption = False,
    tool: ToolOption = None,
    limit: LimitOption = None,
    older_than: OlderThanOption = 0.0,
    interval: IntervalOption = 1.0,
    prune_every: PruneEveryOption = 300.0,
    as_json: JsonOption = False,
) -> None:
    """Resolve unknown outcomes and crashed executions by asking each tool's lookup; never runs a
    write. Exit 1 if an operation could not be processed or another SQLite reconciler runs."""
    ws = load_app(app)
    if tool is not None and tool not in ws.tools:
        known = ", ".join(sorted(ws.tools)) or "none"
        raise fail(f"{app} has no tool named {tool!r} (registered: {known})", ExitCode.USAGE)
    options = _Pass(
        ws, tool=tool, limit=limit, older_than=older_than, as_json=as_json, prune_every=prune_every
    )

    async def reconcile_pass(ws: WriteSafe) -> ReconcileReport:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        if watch:
            return await options.watch(stop, interval)
        return await options.once(stop)

    report = run(ws, reconcile_pass)
    if as_json:
        if not watch:
            Console().print_json(report.model_dump_json())
    else:
        Console().print(summary(report))
    if report.errors:
        raise typer.Exit(int(ExitCode.FAILED))


@dataclass(frozen=True, slots=True)
class _Pass:
    """The options of one `writesafe reconcile` invocation, and its two ways of running."""

    ws: WriteSafe
    tool: str | None
    limit: int | None
    older_than: float
    as_json: bool
    prune_every: float

    async def once(self, stop: asyncio.Event) -> ReconcileReport:
        if self.as_json:
            return await self._pass(stop)
        due = await self.ws.reconciler().count_due(older_than=self.older_than, tool=self.tool)
        total = due if self.limit is None else min(due, self.limit)
        with _progress() as progress:
            task = progress.add_task("reconciling", total=total)

            def advance(report: ReconcileReport) -> None:
                # Other workers take their share, so the count due is only an upper estimate.
                progress.update(task, completed=report.examined, total=max(total, report.examined))

            return await self._pass(stop, advance)

    async def watch(self, stop: asyncio.Event, interval: float) -> ReconcileReport:
        total = ReconcileReport()
        with contextlib.ExitStack() as stack:
            progress = None if self.as_json else stack.enter_context(_progress())
            task = None if progress is None else progress.add_task("watching", total=None)
            pause = interval
            pruned_at: float | None = None  # the first pass prunes
            while not stop.is_set():
                try:
                    if self.prune_every and (
                        pruned_at is None or time.monotonic() - pruned_at >= self.prune_every
                    ):
                        await self._prune(stop)
                        pruned_at = time.monotonic()
                    done = await self._pass(stop)
                except _OUTAGE as error:
                    # A worker outlives a ledger outage: what it had claimed is re-offered when
                    # its short reconcile lease runs out, so it just waits and tries again.
                    failure = ledger_failure(error)
                    err.print(
                        f"ledger failed ({failure.cause}: {failure.detail}); again in {pause:.1f}s",
                        highlight=False,
                        markup=False,
                    )
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), pause)
                    pause = min(pause * 2, _MAX_OUTAGE_PAUSE)
                    continue
                pause = interval
                total += done
                if self.as_json and done.examined:
                    print(done.model_dump_json(), flush=True)
                if progress is not None and task is not None:
                    progress.update(task, completed=total.examined, description=_tally(total))
                if not done.examined:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), interval)
        return total

    async def _prune(self, stop: asyncio.Event) -> None:
        settings = self.ws.settings
        pruned = await prune(
            self.ws.ledger,
            timedelta(seconds=settings.retention),
            tombstone_retention=timedelta(seconds=settings.tombstone_retention),
            stop=stop,
        )
        if self.as_json:
            print(json.dumps(prune_summary(pruned)), flush=True)
        elif pruned.operations or pruned.tombstones:
            err.print(
                f"pruned {pruned.operations} operations, {pruned.attempts} attempts, "
                f"{pruned.tombstones} tombstones"
            )

    async def _pass(
        self, stop: asyncio.Event, on_progress: Callable[[ReconcileReport], None] | None = None
    ) -> ReconcileReport:
        return await self.ws.reconcile(
            limit=self.limit,
            older_than=self.older_than,
            tool=self.tool,
            on_progress=on_progress,
            stop=stop,
        )


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )


def _tally(report: ReconcileReport) -> str:
    return (
        f"found {report.found} · absent {report.absent} · unknown {report.still_unknown} · "
        f"escalated {report.escalated}"
    )


def summary(report: ReconcileReport) -> Table:
    """The report as a table: what was examined and what became of it."""
    table = Table(title="reconciliation", show_header=False)
    rows = {
        "examined": report.examined,
        "found (succeeded)": report.found,
        "absent (failed, may continue)": report.absent,
        "still unknown": report.still_unknown,
        "escalated (needs_attention)": report.escalated,
        "superseded by a caller": report.superseded,
        "errors": report.errors,
        "crashed leases expired": report.expired_leases,
    }
    for label, count in rows.items():
        table.add_row(label, str(count))
    table.add_row("seconds", f"{report.seconds:.3f}")
    return table
