"""The judge of recorded scenarios: compares observed traces with a cases file, nothing else.

It imports no writesafe policy (no verdict table, retry or continuation code; a test checks its
imports), so it cannot agree with the code it judges by sharing a mistake with it. It knows only
the cases file's vocabulary: result keys, trace rows, totals, compatibility pairs and wrong
results (deliberate mutations it must reject).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

Observed = dict[str, Any]
"""What a runner saw for one case: the same result keys the cases file records."""

RESULT_KEYS = ("trace", "action", "disposition", "executions", "writes", "after_reconcile")
"""Keys of a case that are results (everything else in a case is input)."""


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """The words a cases file records its results in, so that totals are counted in them.

    `columns` names a trace row's columns; the column named `action`, when rows have it, says
    what the client did next, and `counts_after` maps an action that another execution followed
    to the total it counts towards. `success` is the disposition that counts as succeeded. A file
    declares its own under `vocabulary:`; without one, the project's words below apply.
    """

    columns: tuple[str, ...] = (
        "execution", "input", "auth_ok", "response_code", "action", "clock_ms",
    )  # fmt: skip
    action: str = "action"
    success: str = "success"
    counts_after: Mapping[str, str] = field(
        default_factory=lambda: {
            "retry_after_delay": "availability_retries",
            "correct_input": "corrected_continuations",
            "authenticate": "auth_continuations",
        }
    )

    @classmethod
    def from_document(cls, document: object) -> Vocabulary:
        if document is None:
            return cls()
        if not isinstance(document, dict):
            raise ValueError("`vocabulary` is a mapping")
        default = cls()
        columns = document.get("columns", default.columns)
        counts_after = document.get("counts_after", default.counts_after)
        success = document.get("success", default.success)
        action = document.get("action", default.action)
        if not (isinstance(columns, list | tuple) and all(isinstance(c, str) for c in columns)):
            raise ValueError("`vocabulary.columns` is a list of names")
        if not (
            isinstance(counts_after, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in counts_after.items())
        ):
            raise ValueError("`vocabulary.counts_after` maps actions to total names")
        if not isinstance(success, str) or not isinstance(action, str):
            raise ValueError("`vocabulary.success` and `vocabulary.action` are names")
        return cls(tuple(columns), action, success, dict(counts_after))

    def action_of(self, row: Sequence[Any]) -> Any:
        """The row's action, if rows of this vocabulary carry one and this row is complete."""
        if self.action not in self.columns or len(row) != len(self.columns):
            return None
        return row[self.columns.index(self.action)]


class ScenarioRunner(Protocol):
    """Runs recorded cases against named backends and adapters (see examples/). It may name a
    `declarations` file for cases files that cannot carry their own (see `CaseFile.load`)."""

    backends: Mapping[str, Any]
    adapters: Mapping[str, Any]
    default_pair: tuple[str, str]

    async def run(self, case: Mapping[str, Any], backend: Any, adapter: Any) -> Observed | None:
        """The observed results of `case`, or None where the backend cannot express it."""
        ...


@dataclass(frozen=True, slots=True)
class PairExpectation:
    backend: str
    adapter: str
    cases: int
    fails: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CaseFile:
    """A recorded scenario file: cases with their expected results, and what must hold overall.

    A wrong result is `{id, target: observed|expected, case, pair?, set: {path: value},
    append: {path: row}}`, paths dotted (`trace.1.5`): one deliberate change the evaluator must
    reject. A file that lists wrong results by id only takes their edits from its declarations."""

    path: str
    cases: tuple[dict[str, Any], ...]
    budget: int | None = None
    totals: Mapping[str, int] = field(default_factory=dict)
    pairs: tuple[PairExpectation, ...] = ()
    wrong_results: tuple[dict[str, Any], ...] = ()
    vocabulary: Vocabulary = field(default_factory=Vocabulary)

    @classmethod
    def load(cls, path: str | Path, declarations: str | Path | None = None) -> CaseFile:
        """Read a cases file; `declarations` (YAML with `vocabulary` and `wrong_results`) adds
        what a file recorded elsewhere cannot say itself: its words and its wrong results'
        edits (an edit there completes the file's entry with the same id)."""
        document = yaml.safe_load(Path(path).read_text())
        if not isinstance(document, dict) or not isinstance(document.get("cases"), list):
            raise ValueError(f"{path}: a cases file is a mapping with a `cases` list")
        declared: dict[str, Any] = {}
        if declarations is not None:
            declared = yaml.safe_load(Path(declarations).read_text()) or {}
            if not isinstance(declared, dict):
                raise ValueError(f"{declarations}: declarations are a mapping")
        edits = {e.get("id"): e for e in declared.get("wrong_results") or () if isinstance(e, dict)}
        cases = tuple(document["cases"])
        for case in cases:
            if not isinstance(case, dict) or not isinstance(case.get("id"), str):
                raise ValueError(f"{path}: every case is a mapping with a string `id`")
        return cls(
            path=str(path),
            cases=cases,
            budget=document.get("budget"),
            totals=document.get("totals") or {},
            pairs=tuple(
                PairExpectation(p["backend"], p["adapter"], p["cases"], tuple(p.get("fails", ())))
                for p in document.get("pairs") or ()
            ),
            wrong_results=tuple(
                {**edits.get(entry.get("id"), {}), **entry} if isinstance(entry, dict) else entry
                for entry in document.get("wrong_results") or ()
            ),
            vocabulary=Vocabulary.from_document(
                document.get("vocabulary", declared.get("vocabulary"))
            ),
        )

    def case(self, case_id: str) -> dict[str, Any]:
        return next(c for c in self.cases if c["id"] == case_id)


def expected_results(case: Mapping[str, Any]) -> dict[str, Any]:
    return {key: case[key] for key in RESULT_KEYS if key in case}


@dataclass(frozen=True, slots=True)
class Mismatch:
    key: str
    expected: Any
    observed: Any


@dataclass(frozen=True, slots=True)
class CaseFailure:
    case: str
    expected: dict[str, Any]
    observed: Observed
    mismatches: tuple[Mismatch, ...]


@dataclass(slots=True)
class PairReport:
    """One backend/adapter pair against every case it can express."""

    backend: str
    adapter: str
    adapter_version: str | None
    observed: dict[str, Observed | None]
    failures: list[CaseFailure] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # everything `totals()` counts
    totals: dict[str, tuple[int, int]] = field(default_factory=dict)  # recorded, observed
    problems: list[str] = field(default_factory=list)
    expectation: PairExpectation | None = None

    @property
    def name(self) -> str:
        return f"{self.backend}+{self.adapter}"

    @property
    def applicable(self) -> list[str]:
        return [case for case, seen in self.observed.items() if seen is not None]

    @property
    def not_applicable(self) -> list[str]:
        return [case for case, seen in self.observed.items() if seen is None]

    @property
    def matched(self) -> int:
        return len(self.applicable) - len(self.failures)

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and not self.problems
            and all(expected == observed for expected, observed in self.totals.values())
        )

    @property
    def agrees_with_recording(self) -> bool | None:
        """Does this pair reproduce the recorded compatibility row (same cases, same fails)?"""
        if self.expectation is None:
            return None
        failed = tuple(sorted(f.case for f in self.failures))
        return len(self.applicable) == self.expectation.cases and failed == tuple(
            sorted(self.expectation.fails)
        )


@dataclass(frozen=True, slots=True)
class WrongResultCheck:
    id: str
    rejected: bool
    detail: str


@dataclass(slots=True)
class Report:
    path: str
    pairs: list[PairReport]
    wrong_results: list[WrongResultCheck]

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.pairs) and all(w.rejected for w in self.wrong_results)


def compare(expected: Mapping[str, Any], observed: Observed) -> tuple[Mismatch, ...]:
    """Every recorded result key must be observed, and equal as JSON (`true` is not `1`)."""
    missing = object()
    return tuple(
        Mismatch(key, value, observed.get(key))
        for key, value in expected.items()
        if observed.get(key, missing) is missing or not same(value, observed[key])
    )


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return (
            isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(same(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def judge_pair(
    cases: CaseFile,
    backend: str,
    adapter: str,
    observed: Mapping[str, Observed | None],
    adapter_version: str | None = None,
) -> PairReport:
    """Compare one pair's observations with the cases file."""
    report = PairReport(backend, adapter, adapter_version, dict(observed))
    report.expectation = next(
        (p for p in cases.pairs if (p.backend, p.adapter) == (backend, adapter)), None
    )
    for case in cases.cases:
        seen = observed.get(case["id"])
        if case["id"] not in observed:
            report.problems.append(f"{case['id']}: not run")
            continue
        if seen is None:
            continue
        expected = expected_results(case)
        mismatches = compare(expected, seen)
        if mismatches:
            report.failures.append(CaseFailure(case["id"], expected, seen, mismatches))
        trace = seen.get("trace")
        if cases.budget is not None and isinstance(trace, list) and len(trace) > cases.budget:
            report.problems.append(
                f"{case['id']}: {len(trace)} executions exceed the budget of {cases.budget}"
            )
    report.counts = totals(
        [seen for seen in observed.values() if seen is not None], cases.vocabulary
    )
    for name, value in cases.totals.items():
        if name not in report.counts:
            report.problems.append(f"totals: no way to count {name!r}")
        else:
            report.totals[name] = (value, report.counts[name])
    return report


def totals(observed: Sequence[Observed], vocabulary: Vocabulary) -> dict[str, int]:
    """Counts over observed traces, in the cases file's own words."""
    counts = dict.fromkeys(
        ("executions", "initial", *vocabulary.counts_after.values(), "succeeded",
         "ended_without_success"),
        0,
    )  # fmt: skip
    for seen in observed:
        rows = seen.get("trace") or []
        counts["executions"] += len(rows)
        counts["initial"] += 1 if rows else 0
        for before in rows[:-1]:  # each execution that another one followed
            total = vocabulary.counts_after.get(vocabulary.action_of(before))
            if total is not None:
                counts[total] += 1
        if "disposition" in seen:
            succeeded = seen["disposition"] == vocabulary.success
            counts["succeeded" if succeeded else "ended_without_success"] += 1
    return counts


def check_wrong_results(cases: CaseFile, pairs: Sequence[PairReport]) -> list[WrongResultCheck]:
    """Apply each listed wrong result and confirm the evaluator fails it."""
    return [_check(cases, entry, pairs) for entry in cases.wrong_results]


def _check(
    cases: CaseFile, entry: Mapping[str, Any], pairs: Sequence[PairReport]
) -> WrongResultCheck:
    """Rejected only if, on every pair where the case matches as recorded, the edit breaks it.

    An edit naming a `pair` is checked there when that pair was run, else on every run pair.
    """
    wrong_id = str(entry.get("id"))
    edit = dict(entry)
    if "case" not in edit:
        return WrongResultCheck(wrong_id, False, "no edit declared for this wrong result")
    case_id = edit["case"]
    if case_id not in {case["id"] for case in cases.cases}:
        return WrongResultCheck(wrong_id, False, f"the file has no case {case_id}")
    recorded = expected_results(cases.case(case_id))
    candidates = [p for p in pairs if p.name == edit.get("pair")] or list(pairs)
    matching = [
        (p, seen)
        for p in candidates
        if (seen := p.observed.get(case_id)) is not None and not compare(recorded, seen)
    ]
    if not matching:
        return WrongResultCheck(wrong_id, False, f"no run pair matched {case_id} as recorded")
    differing: set[str] = set()
    for pair, seen in matching:
        expected, observed = recorded, seen
        if edit.get("target") == "expected":
            expected = _edited(recorded, edit)
        else:
            observed = _edited(seen, edit)
        differences = compare(expected, observed)
        over_budget = cases.budget is not None and len(observed.get("trace") or []) > cases.budget
        if not differences and not over_budget:
            return WrongResultCheck(wrong_id, False, f"accepted on {pair.name}")
        differing.update(m.key for m in differences)
    keys = ", ".join(sorted(differing)) or "budget"
    names = ", ".join(p.name for p, _ in matching)
    return WrongResultCheck(wrong_id, True, f"{case_id} on {names}: mismatch in {keys}")


def _edited(results: Mapping[str, Any], edit: Mapping[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(dict(results))
    for path, value in (edit.get("set") or {}).items():
        *parents, last = _steps(path)
        _walk(changed, parents)[last] = value
    for path, row in (edit.get("append") or {}).items():
        _walk(changed, _steps(path)).append(row)
    return changed


def _steps(path: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in path.split(".")]


def _walk(value: Any, steps: Sequence[Any]) -> Any:
    for step in steps:
        value = value[step]
    return value


@dataclass(frozen=True, slots=True)
class PairRun:
    """One pair's observations, by case id (None: the backend cannot express that case)."""

    backend: str
    adapter: str
    observed: Mapping[str, Observed | None]
    adapter_version: str | None = None


def evaluate(cases: CaseFile, runs: Sequence[PairRun]) -> Report:
    """Judge every pair's observations, then the listed wrong results against them."""
    pairs = [
        judge_pair(cases, run.backend, run.adapter, run.observed, run.adapter_version)
        for run in runs
    ]
    return Report(cases.path, pairs, check_wrong_results(cases, pairs))
