"""The recorded scenarios, reproduced through the public API and judged by the evaluator.

The cases live in `../shared/scenarios` beside the repository (as in CI);
WRITESAFE_SCENARIOS points elsewhere for a checkout without that neighbour.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from examples.orders.scenario import runner as orders_runner
from examples.shipment_lookup.scenario import runner as shipment_runner
from writesafe.cli import app
from writesafe.reconciler._evaluator import CaseFile, PairRun, Report, evaluate

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = Path(os.environ.get("WRITESAFE_SCENARIOS", ROOT.parent / "shared" / "scenarios"))
SHIPMENT = SCENARIOS / "shipment_lookup.yaml"
ORDERS = SCENARIOS / "order_submission.yaml"

pytestmark = pytest.mark.skipif(
    not (SHIPMENT.exists() and ORDERS.exists()),
    reason=f"recorded scenarios not found in {SCENARIOS} (clone beside shared/, or set "
    "WRITESAFE_SCENARIOS)",
)

PAIRS = [
    ("backend1", "adapter1"),
    ("backend2", "adapter1"),
    ("backend2", "adapter2"),
    ("backend2", "adapter3"),
]


async def run_pairs(cases: CaseFile, runner: Any, pairs: list[tuple[str, str]]) -> Report:
    runs = []
    for backend, adapter in pairs:
        observed = {
            case["id"]: await runner.run(case, runner.backends[backend], runner.adapters[adapter])
            for case in cases.cases
        }
        runs.append(PairRun(backend, adapter, observed))
    return evaluate(cases, runs)


async def test_shipment_lookup_matches_every_recorded_case() -> None:
    cases = CaseFile.load(SHIPMENT, shipment_runner.declarations)
    report = await run_pairs(cases, shipment_runner, [shipment_runner.default_pair])
    [pair] = report.pairs
    assert [f.case for f in pair.failures] == []
    assert pair.matched == len(cases.cases) == 9
    assert pair.problems == []
    assert {name: observed for name, (_, observed) in pair.totals.items()} == {
        "executions": 14,
        "availability_retries": 3,
        "corrected_continuations": 1,
        "auth_continuations": 1,
        "succeeded": 4,
        "ended_without_success": 5,
    }
    assert pair.counts["initial"] == 9
    assert [(w.id, w.rejected) for w in report.wrong_results] == [
        ("retried_refusal", True),
        ("retried_before_delay", True),
        ("invalid_declared_success", True),
        ("fourth_execution", True),
    ]
    assert report.ok


async def test_the_retry_waits_on_the_simulated_clock() -> None:
    cases = CaseFile.load(SHIPMENT, shipment_runner.declarations)
    case = cases.case("temporary_persistent")
    backend, adapter = (shipment_runner.backends["scripted"], shipment_runner.adapters["adapter"])
    observed = await shipment_runner.run(case, backend, adapter)
    # Executions 1-3 started 0, 1000 and 2000 simulated ms in: the dependency's stated delay.
    assert [row[5] for row in observed["trace"]] == [0, 1000, 2000]


async def test_orders_compatibility_report() -> None:
    cases = CaseFile.load(ORDERS, orders_runner.declarations)
    report = await run_pairs(cases, orders_runner, PAIRS)
    by_pair = {pair.name: pair for pair in report.pairs}
    fails = {name: sorted(f.case for f in pair.failures) for name, pair in by_pair.items()}
    assert fails == {
        "backend1+adapter1": [],
        # adapter1's every-409 branch also swallows backend2's unknown conflict; the recording
        # never ran that case on this pair (it lists 7 cases), see docs/contract.md.
        "backend2+adapter1": ["invalid_postcode", "unknown_conflict"],
        "backend2+adapter2": ["unknown_conflict"],
        "backend2+adapter3": [],
    }
    assert by_pair["backend1+adapter1"].not_applicable == ["unknown_conflict"]
    assert len(by_pair["backend1+adapter1"].applicable) == 7
    assert len(by_pair["backend2+adapter3"].applicable) == 8
    postcode = next(
        f for f in by_pair["backend2+adapter1"].failures if f.case == "invalid_postcode"
    )
    assert postcode.observed["trace"] == [["DEPENDENCY_BUSY", True, None]] * 3
    assert postcode.observed["writes"] == 0
    assert postcode.observed["action"] == "stop"
    assert postcode.observed["disposition"] == "retry_exhausted"
    conflict = by_pair["backend2+adapter2"].failures[0]
    assert conflict.observed["trace"] == [["DEPENDENCY_BUSY", True, None]] * 3
    assert [(w.id, w.rejected) for w in report.wrong_results] == [
        ("invalid_marked_retryable", True),
        ("invalid_code_renamed", True),
    ]
    agreement = {name: pair.agrees_with_recording for name, pair in by_pair.items()}
    assert agreement == {
        "backend1+adapter1": True,
        "backend2+adapter1": False,
        "backend2+adapter2": True,
        "backend2+adapter3": True,
    }


async def test_commit_then_timeout_is_reconciled_without_a_second_write() -> None:
    cases = CaseFile.load(ORDERS, orders_runner.declarations)
    case = cases.case("commit_then_timeout")
    for backend in ("backend1", "backend2"):
        observed = await orders_runner.run(
            case, orders_runner.backends[backend], orders_runner.adapters["adapter3"]
        )
        assert observed is not None
        assert observed["trace"] == [["OUTCOME_UNKNOWN", False, None]]
        assert observed["after_reconcile"] == {"status": "succeeded", "writes": 1}


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, ["contract", "check", *args], catch_exceptions=False)


def test_cli_reports_the_shipment_lookup() -> None:
    result = cli(str(SHIPMENT), "examples.shipment_lookup.scenario:runner")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "  scripted + adapter (shipment-lookup/1): 9/9 cases match" in lines
    assert (
        "    14 executions: 9 initial, 3 availability retries, 1 corrected continuations, "
        "1 auth continuations" in lines  # the totals' names, as the file's vocabulary spells them
    )
    assert "    4 succeeded, 5 ended in their disposition" in lines
    assert "wrong results: 4/4 rejected" in lines
    assert lines[-1] == "OK"


def test_cli_reports_the_order_pairs_and_fails_on_mismatch() -> None:
    result = cli(str(ORDERS), "examples.orders.scenario:runner")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    heads = [line for line in lines if line.startswith("  backend")]
    assert [head.split(";")[0] for head in heads] == [
        "  backend1 + adapter1 (orders/1): 7/7 cases match (n/a: unknown_conflict)",
        "  backend2 + adapter1 (orders/1): 6/8 cases match",
        "  backend2 + adapter2 (orders/2): 7/8 cases match",
        "  backend2 + adapter3 (orders/3): 8/8 cases match",
    ]
    assert "    FAIL invalid_postcode" in lines
    busy = json.dumps([["DEPENDENCY_BUSY", True, None]] * 3)
    assert any(line.startswith(f"      observed  trace {busy}") for line in lines)
    assert "wrong results: 2/2 rejected" in lines


def test_cli_checks_one_pair_given_by_import_path() -> None:
    result = cli(
        str(ORDERS),
        "examples.orders.scenario:runner",
        "--pair",
        "backend2,examples.orders.adapters:adapter3",
        "--json",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    [pair] = document["pairs"]
    assert (pair["adapter"], pair["adapter_version"]) == (
        "examples.orders.adapters:adapter3",
        "orders/3",
    )
    assert (pair["cases"], pair["matched"]) == (8, 8)
    assert document["ok"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["examples.orders.scenario:nope"], "has no attribute"),
        (["examples.orders.scenario:OrdersRunner.adapters"], "not a scenario runner"),
        (["examples.orders.scenario:runner", "--pair", "backend9,adapter1"], "unknown"),
        (["examples.orders.scenario:runner", "--pair", "backend1"], "BACKEND,ADAPTER"),
    ],
)
def test_cli_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["contract", "check", str(ORDERS), *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())  # rich wraps long errors
