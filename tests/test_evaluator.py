"""The scenario evaluator: independent of the policy it judges, strict, and not fooled by the
recorded wrong results."""

from __future__ import annotations

import ast
import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from writesafe.reconciler._evaluator import (
    CaseFile,
    PairRun,
    compare,
    evaluate,
    expected_results,
    same,
)

EVALUATOR = Path(__file__).parent.parent / "reconciler" / "_evaluator.py"
SHIPMENT_DECLARATIONS = (
    Path(__file__).parent.parent / "examples" / "shipment_lookup" / "declarations.yaml"
)
DECLARED_EDITS: dict[str, dict[str, Any]] = {
    edit["id"]: edit for edit in yaml.safe_load(SHIPMENT_DECLARATIONS.read_text())["wrong_results"]
}


def test_the_evaluator_imports_no_writesafe_code() -> None:
    tree = ast.parse(EVALUATOR.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            assert node.module is not None
            imported.add(node.module)
    allowed = set(sys.stdlib_module_names) | {"yaml"}
    assert imported, "the AST walk found the imports"
    assert {name.split(".")[0] for name in imported} <= allowed, imported


def test_the_evaluator_loads_without_any_writesafe_package() -> None:
    # Run it from its file, outside the package: nothing of writesafe may come along.
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("standalone_evaluator", {str(EVALUATOR)!r})
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
ours = ("reconciler", "idempotency", "ledger")
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ours)
print(loaded)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd="/"
    )
    assert result.stdout.strip() == "[]"


def test_json_equality_is_strict() -> None:
    assert same([1, "a", None, True], [1, "a", None, True])
    assert not same(True, 1)
    assert not same(0, False)
    assert not same("1", 1)
    assert not same(None, "null")
    assert not same([1, 2], [1, 2, 3])
    assert not same({"a": 1}, {"a": 1, "b": 2})
    assert same(1000, 1000.0)


SHIPMENT = CaseFile(
    path="inline",
    budget=3,
    cases=(
        {
            "id": "access_denied",
            "trace": [[1, "SHIP-104", True, "ACCESS_DENIED", "stop", 0]],
            "disposition": "refused",
        },
        {
            "id": "temporary_then_ok",
            "trace": [
                [1, "SHIP-104", True, "TEMP_UNAVAILABLE", "retry_after_delay", 0],
                [2, "SHIP-104", True, "OK", "complete", 1000],
            ],
            "disposition": "success",
        },
        {
            "id": "invalid_unchanged",
            "trace": [[1, "ship104", True, "INPUT_INVALID", "correct_input", 0]],
            "disposition": "needs_input",
        },
        {
            "id": "temporary_persistent",
            "trace": [
                [1, "SHIP-104", True, "TEMP_UNAVAILABLE", "retry_after_delay", 0],
                [2, "SHIP-104", True, "TEMP_UNAVAILABLE", "retry_after_delay", 1000],
                [3, "SHIP-104", True, "TEMP_UNAVAILABLE", "stop", 2000],
            ],
            "disposition": "retry_exhausted",
        },
    ),
    totals={"executions": 7, "availability_retries": 3, "succeeded": 1},
    wrong_results=tuple(DECLARED_EDITS.values()),
)


def perfect(cases: CaseFile) -> dict[str, Any]:
    """Observations identical to the recording (what a correct system would produce)."""
    return {case["id"]: copy.deepcopy(expected_results(case)) for case in cases.cases}


def test_a_perfect_observation_passes_and_every_wrong_result_is_rejected() -> None:
    report = evaluate(SHIPMENT, [PairRun("scripted", "adapter", perfect(SHIPMENT))])
    [pair] = report.pairs
    assert pair.failures == []
    assert pair.totals == {
        "executions": (7, 7),
        "availability_retries": (3, 3),
        "succeeded": (1, 1),
    }
    assert [w.rejected for w in report.wrong_results] == [True] * 4
    assert report.ok


@pytest.mark.parametrize("wrong", [w["id"] for w in SHIPMENT.wrong_results])
def test_each_wrong_result_applied_directly_is_a_mismatch(wrong: str) -> None:
    edit = DECLARED_EDITS[wrong]
    observed = perfect(SHIPMENT)
    case = observed[edit["case"]]
    for path, value in edit.get("set", {}).items():
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        target = case
        for step in parents:
            target = target[step]
        target[last] = value
    for path, row in edit.get("append", {}).items():
        case[path].append(row)
    report = evaluate(SHIPMENT, [PairRun("scripted", "adapter", observed)])
    [pair] = report.pairs
    assert [f.case for f in pair.failures] == [edit["case"]]
    assert not report.ok


def test_missing_results_extra_executions_and_totals_are_caught() -> None:
    observed = perfect(SHIPMENT)
    del observed["access_denied"]["disposition"]
    observed["temporary_then_ok"]["trace"][1][2] = 1  # `true` recorded, `1` observed
    report = evaluate(SHIPMENT, [PairRun("scripted", "adapter", observed)])
    [pair] = report.pairs
    mismatched = {f.case: [m.key for m in f.mismatches] for f in pair.failures}
    assert mismatched == {"access_denied": ["disposition"], "temporary_then_ok": ["trace"]}
    over = perfect(SHIPMENT)
    over["temporary_persistent"]["trace"].append([4, "SHIP-104", True, "OK", "complete", 3000])
    pair = evaluate(SHIPMENT, [PairRun("s", "a", over)]).pairs[0]
    assert any("exceed the budget of 3" in problem for problem in pair.problems)
    assert pair.totals["executions"] == (7, 8)
    assert not pair.ok


def test_a_case_not_run_is_a_problem_and_not_applicable_is_not() -> None:
    observed: dict[str, Any] = perfect(SHIPMENT)
    del observed["access_denied"]
    pair = evaluate(SHIPMENT, [PairRun("s", "a", observed)]).pairs[0]
    assert pair.problems == ["access_denied: not run"]
    observed["access_denied"] = None
    pair = evaluate(SHIPMENT, [PairRun("s", "a", observed)]).pairs[0]
    assert pair.not_applicable == ["access_denied"]
    assert pair.problems == []


def test_unknown_wrong_results_and_unchecked_ones_fail_the_report() -> None:
    cases = CaseFile(
        path="inline",
        cases=SHIPMENT.cases,
        wrong_results=(
            {"id": "never_defined"},
            {"id": "other_file", "target": "expected", "case": "invalid_postcode", "set": {}},
        ),
    )
    report = evaluate(cases, [PairRun("s", "a", perfect(SHIPMENT))])
    assert [(w.rejected, w.detail) for w in report.wrong_results] == [
        (False, "no edit declared for this wrong result"),
        (False, "the file has no case invalid_postcode"),
    ]
    assert not report.ok


def test_wrong_results_may_be_spelled_in_the_cases_file(tmp_path: Path) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(
        """
cases:
  - {id: one, trace: [[OK, null, null]], action: complete, writes: 1}
wrong_results:
  - {id: two_writes, target: expected, case: one, set: {writes: 2}}
  - {id: harmless, target: expected, case: one, set: {writes: 1}}
"""
    )
    cases = CaseFile.load(path)
    observed = {"one": {"trace": [["OK", None, None]], "action": "complete", "writes": 1}}
    report = evaluate(cases, [PairRun("b", "a", observed)])
    assert report.pairs[0].ok
    assert [(w.id, w.rejected) for w in report.wrong_results] == [
        ("two_writes", True),
        ("harmless", False),  # a "mutation" that changes nothing must not count as rejected
    ]


def test_compare_needs_every_recorded_key() -> None:
    expected = {"trace": [["OK", None, None]], "writes": 1}
    assert compare(expected, {"trace": [["OK", None, None]], "writes": 1, "extra": 5}) == ()
    [missing] = compare(expected, {"trace": [["OK", None, None]]})
    assert (missing.key, missing.observed) == ("writes", None)


@pytest.mark.parametrize(
    "document",
    ["[]", "cases: 3", "cases:\n  - {trace: []}\n", "cases:\n  - {id: 7}\n"],
)
def test_malformed_cases_files_are_refused(tmp_path: Path, document: str) -> None:
    path = tmp_path / "cases.yaml"
    path.write_text(document)
    with pytest.raises(ValueError, match="cases"):
        CaseFile.load(path)


def test_a_wrong_result_counts_only_where_the_case_matches_as_recorded() -> None:
    cases = CaseFile(
        path="inline",
        cases=({"id": "one", "writes": 1},),
        wrong_results=({"id": "w", "target": "expected", "case": "one", "set": {"writes": 2}},),
    )
    # The system already disagrees with the recording: breaking the recording proves nothing.
    report = evaluate(cases, [PairRun("b", "a", {"one": {"writes": 2}})])
    assert [(w.rejected, w.detail) for w in report.wrong_results] == [
        (False, "no run pair matched one as recorded")
    ]


TEAM_CASES = """
budget: 3
vocabulary:
  columns: [step, reply, next]
  action: next
  success: done
  counts_after: {wait: waits, fix: fixes}
cases:
  - id: busy_then_ok
    trace: [[1, BUSY, wait], [2, OK, finish]]
    disposition: done
  - id: fixed
    trace: [[1, BAD, fix], [2, OK, finish]]
    disposition: done
  - id: gave_up
    trace: [[1, BUSY, wait], [2, BUSY, wait], [3, BUSY, quit]]
    disposition: exhausted
totals: {executions: 7, waits: 3, fixes: 1, succeeded: 2, ended_without_success: 1}
wrong_results:
  - id: retried_too_often
    target: observed
    case: gave_up
    append: {trace: [4, BUSY, quit]}
  - {id: declared_elsewhere}
"""


def test_a_cases_file_in_its_own_words_is_counted_in_them(tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(TEAM_CASES)
    declarations = tmp_path / "declarations.yaml"
    declarations.write_text(
        "wrong_results:\n"
        "  - {id: declared_elsewhere, target: observed, case: fixed, set: {disposition: nope}}\n"
    )
    cases = CaseFile.load(path, declarations)
    report = evaluate(cases, [PairRun("b", "a", perfect(cases))])
    [pair] = report.pairs
    assert pair.totals == {
        "executions": (7, 7),
        "waits": (3, 3),
        "fixes": (1, 1),
        "succeeded": (2, 2),
        "ended_without_success": (1, 1),
    }
    assert [(w.id, w.rejected) for w in report.wrong_results] == [
        ("retried_too_often", True),
        ("declared_elsewhere", True),
    ]
    assert report.ok


def test_the_recorded_files_take_their_edits_from_declarations() -> None:
    """No wrong result is known to the evaluator by id: without declarations none is checked."""
    cases = CaseFile(
        path="inline", cases=SHIPMENT.cases, wrong_results=({"id": "retried_refusal"},)
    )
    [check] = evaluate(cases, [PairRun("s", "a", perfect(SHIPMENT))]).wrong_results
    assert not check.rejected
