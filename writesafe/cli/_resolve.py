"""`writesafe resolve KEY`: an operator settles an escalated or unknown operation, on the record."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console

from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import app_or_settings, fail
from writesafe.cli._options import (
    AppOption,
    DatabaseUrlOption,
    JsonOption,
    SchemaOption,
    ScopeOption,
)
from writesafe.cli._runner import run
from writesafe.cli._status import _attempts, _summary


class _Outcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"


OutcomeOption = Annotated[
    _Outcome,
    typer.Option(
        "--outcome",
        help="succeeded: the effect exists (give --result); failed: it provably does not.",
    ),
]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why: what you checked (recorded).")]
ActorOption = Annotated[str, typer.Option("--actor", help="Who resolves it (recorded).")]
ResultOption = Annotated[
    str | None,
    typer.Option("--result", help="With succeeded: the result callers get, as JSON."),
]
EvidenceOption = Annotated[
    str | None,
    typer.Option("--evidence", help='Evidence to keep, as a JSON object (e.g. {"ticket": "T-1"}).'),
]


def resolve(
    key: str,
    outcome: OutcomeOption,
    reason: ReasonOption,
    actor: ActorOption,
    result: ResultOption = None,
    evidence: EvidenceOption = None,
    app: AppOption = None,
    scope: ScopeOption = "default",
    database_url: DatabaseUrlOption = None,
    schema: SchemaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Resolve a needs_attention operation, or an outcome_unknown one with --evidence, as
    succeeded or failed, audited (who, why, evidence). With succeeded, --result must fit what the
    tool stores (a FastAPI route: {"status_code": 201, "body": {...}}). Exit 1 if the operation is
    in any other state, 2 for a result that does not fit, 4 if there is no such key."""
    parsed_result = _json_option(result, "--result")
    parsed_evidence = _json_option(evidence, "--evidence")
    if parsed_evidence is not None and not isinstance(parsed_evidence, dict):
        raise fail("--evidence must be a JSON object", ExitCode.USAGE)
    ws = app_or_settings(app, database_url, schema)
    resolved = run(
        ws,
        lambda ws: ws.resolve(
            key,
            scope=scope,
            outcome=outcome.value,
            result=parsed_result,
            reason=reason,
            actor=actor,
            evidence=parsed_evidence,
        ),
    )
    console = Console()
    if as_json:
        console.print_json(resolved.model_dump_json(by_alias=True))
        return
    console.print(_summary(resolved))
    console.print(_attempts(resolved))


def _json_option(text: str | None, option: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise fail(f"{option} is not valid JSON: {error}", ExitCode.USAGE) from error
