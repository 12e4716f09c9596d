"""`writesafe contract check` (the release check of backend/adapter pairs), `contract schema` and
`contract vectors`.

    writesafe contract check CASES RUNNER [--pair BACKEND,ADAPTER]... [--declare FILE] [--json]

CASES is a recorded cases file (YAML). RUNNER is `module:attribute` of a scenario runner: an
object with `backends` and `adapters` (name -> object), a `default_pair`, and
`async run(case, backend, adapter)` returning the observed results of one case (None where the
backend cannot express it). Each side of a pair is a name the runner knows or an importable
`module:attribute`, so a new adapter can be checked before it is added to the runner. Without
`--pair`: the pairs the cases file records, else the runner's default pair. `--declare` names
the YAML declaring the file's vocabulary and wrong-result edits (default: the runner's
`declarations`), for a recorded file that cannot carry them itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from writesafe.cli._contract_report import report_json, report_lines
from writesafe.cli._exit import ExitCode
from writesafe.cli._loading import fail, import_object
from writesafe.cli._options import JsonOption
from writesafe.reconciler.conformance import (
    CaseFile,
    Observed,
    PairRun,
    ScenarioRunner,
    conformance_vectors,
    envelope_json_schema,
    evaluate,
)

contract_app = typer.Typer(
    help="The error contract: release checks of backend/adapter pairs, the published schema.",
    no_args_is_help=True,
)

CasesArgument = Annotated[
    Path,
    typer.Argument(
        metavar="CASES",
        help="Recorded cases (YAML).",
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]
RunnerArgument = Annotated[
    str,
    typer.Argument(
        help="Scenario runner as module:attribute (e.g. examples.orders.scenario:runner)."
    ),
]
DeclareOption = Annotated[
    Path | None,
    typer.Option(
        "--declare",
        help="YAML declaring the cases file's vocabulary and wrong-result edits (default: the "
        "runner's `declarations`, if it names one).",
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]
PairOption = Annotated[
    list[str] | None,
    typer.Option(
        "--pair",
        help="BACKEND,ADAPTER: runner names or module:attribute paths. Repeatable.",
    ),
]


@contract_app.command("check")
def check(
    cases_path: CasesArgument,
    runner_path: RunnerArgument,
    pair: PairOption = None,
    declare: DeclareOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run recorded cases against backend/adapter pairs and report what matches (exit 1: any
    mismatch, or a listed wrong result the evaluator failed to reject)."""
    runner = _runner(runner_path)
    declarations = declare or getattr(runner, "declarations", None)
    try:
        cases = CaseFile.load(cases_path, declarations)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as error:
        raise fail(f"cannot read {cases_path}: {error}", ExitCode.USAGE) from error
    names = [_split(p) for p in pair] if pair else _recorded_pairs(cases, runner)
    resolved = [(b, a, _pick(runner.backends, b), _pick(runner.adapters, a)) for b, a in names]
    runs = asyncio.run(_run_all(cases, runner, resolved))
    report = evaluate(cases, runs)
    if as_json:
        typer.echo(json.dumps(report_json(report), indent=2))
    else:
        for line in report_lines(cases, report):
            typer.echo(line)
    if not report.ok:
        raise typer.Exit(int(ExitCode.FAILED))


@contract_app.command("schema")
def schema() -> None:
    """Print the envelope's JSON Schema (docs/schema/writesafe.error.1.json)."""
    typer.echo(json.dumps(envelope_json_schema(), indent=2))


@contract_app.command("vectors")
def vectors() -> None:
    """Print the conformance vectors (docs/schema/writesafe.error.1.vectors.json)."""
    typer.echo(json.dumps(conformance_vectors(), indent=2, ensure_ascii=False))


def _runner(path: str) -> ScenarioRunner:
    runner = import_object(path, example="examples.orders.scenario:runner")
    required = ("backends", "adapters", "default_pair", "run")
    if not all(hasattr(runner, name) for name in required):
        kind = type(runner).__name__
        raise fail(f"{path} is a {kind}, not a scenario runner (needs {required})", ExitCode.USAGE)
    return runner  # type: ignore[return-value]  # checked structurally above


def _split(pair: str) -> tuple[str, str]:
    backend, comma, adapter = pair.partition(",")
    if not comma or not backend or not adapter:
        raise fail(f"--pair takes BACKEND,ADAPTER, got {pair!r}", ExitCode.USAGE)
    return backend.strip(), adapter.strip()


def _recorded_pairs(cases: CaseFile, runner: ScenarioRunner) -> list[tuple[str, str]]:
    if cases.pairs:
        return [(p.backend, p.adapter) for p in cases.pairs]
    return [tuple(runner.default_pair)]  # type: ignore[list-item]


def _pick(known: Mapping[str, Any], name: str) -> Any:
    if ":" in name:
        return import_object(name)
    if name not in known:
        raise fail(f"unknown {name!r}; the runner knows {', '.join(known)}", ExitCode.USAGE)
    return known[name]


async def _run_all(
    cases: CaseFile, runner: ScenarioRunner, pairs: list[tuple[str, str, Any, Any]]
) -> list[PairRun]:
    runs = []
    for backend_name, adapter_name, backend, adapter in pairs:
        observed: dict[str, Observed | None] = {}
        for case in cases.cases:
            try:
                observed[case["id"]] = await runner.run(case, backend, adapter)
            except Exception as error:  # a crash is an observation, reported as a mismatch
                observed[case["id"]] = {"error": f"{type(error).__name__}: {error}"}
        runs.append(PairRun(backend_name, adapter_name, observed, _release(adapter)))
    return runs


def _release(adapter: object) -> str | None:
    """`name/version` of an adapter that declares them (every writesafe Adapter does)."""
    name, version = getattr(adapter, "name", None), getattr(adapter, "version", None)
    return f"{name}/{version}" if name and version else None
