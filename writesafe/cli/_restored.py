"""`writesafe db restored`: say that the ledger was restored, see whether it is, or close it.

For what no signal can see (docs/operations.md, "Backups, restores and failover"). Exit codes:
0 done (`--status`: not restored), 1 `--status` while a restore is open or the ledger is not
migrated, 2 bad arguments, 3 the ledger could not be reached.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Annotated

import typer
from rich.console import Console

from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import app_or_settings, fail
from writesafe.cli._options import AppOption, DatabaseUrlOption, JsonOption, SchemaOption
from writesafe.cli._runner import run
from writesafe.idempotency import WriteSafe
from writesafe.ledger import Restored, clear_restored, declare_restored, restored_state

SinceOption = Annotated[
    str | None,
    typer.Option(
        "--since",
        help="The restore point, ISO 8601 with a time zone (e.g. 2026-12-02T06:00:00Z): the "
        "ledger holds nothing written after it.",
    ),
]
StatusFlag = Annotated[bool, typer.Option("--status", help="Show the open restore (the default).")]
ClearFlag = Annotated[
    bool, typer.Option("--clear", help="Close the open restore now (the gap is reconciled).")
]


def restored(
    since: SinceOption = None,
    status: StatusFlag = False,
    clear: ClearFlag = False,
    app: AppOption = None,
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record that the ledger was restored to --since (a backup, a point-in-time recovery, a
    failover): until the retention period has passed, a key it does not know is looked up
    before its first execution, and a tool without a lookup is refused. --status shows the open
    restore (exit 1 while one is open); --clear closes it."""
    if sum((since is not None, status, clear)) > 1:
        raise fail("give one of --since, --status and --clear", ExitCode.USAGE)
    point = None if since is None else _instant(since)
    ws = app_or_settings(app, database_url, schema)

    async def act(ws: WriteSafe) -> Restored | None:
        await ws.ledger.check_schema()
        if clear:
            return await clear_restored(ws.ledger)
        if point is None:
            return await restored_state(ws.ledger)
        try:
            return await declare_restored(
                ws.ledger, point, timedelta(seconds=ws.settings.retention)
            )
        except ValueError as error:
            raise fail(f"--since {error}", ExitCode.USAGE) from error

    state = run(ws, act)
    _show(state, cleared=clear, as_json=as_json)
    if state is not None and point is None and not clear:
        raise typer.Exit(int(ExitCode.FAILED))


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise fail(f"--since {text!r} is not an ISO 8601 time", ExitCode.USAGE) from None
    if moment.tzinfo is None:
        raise fail(f"--since {text!r} has no time zone: add Z or +00:00", ExitCode.USAGE)
    return moment


def _show(state: Restored | None, *, cleared: bool, as_json: bool) -> None:
    console = Console()
    if as_json:
        body = None if state is None else _summary(state)
        console.print_json(json.dumps({"restored": body, "cleared": cleared}))
        return
    if state is None:
        console.print("no restore was open" if cleared else "the ledger is not restored")
        return
    verb = "closed the restore" if cleared else "restored"
    console.print(
        f"{verb}: since {state.since.isoformat()} (detected by {state.detected_by.value}, "
        f"recorded {state.recorded_at.isoformat()}); unknown keys are looked up before they "
        f"run until {state.closes_at.isoformat()}"
        if not cleared
        else f"{verb} since {state.since.isoformat()}: unknown keys run at once again",
        highlight=False,
        soft_wrap=True,
    )


def _summary(state: Restored) -> dict[str, str]:
    return {
        "since": state.since.isoformat(),
        "detected_by": state.detected_by.value,
        "recorded_at": state.recorded_at.isoformat(),
        "closes_at": state.closes_at.isoformat(),
    }
