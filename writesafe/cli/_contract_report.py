"""The compatibility report of `writesafe contract check`, as text lines and as JSON."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from writesafe.reconciler.conformance import CaseFile, PairReport, Report


def report_lines(cases: CaseFile, report: Report) -> list[str]:
    lines = [cases.path]
    for pair in report.pairs:
        lines.extend(_pair_lines(cases, pair))
    recorded = [p for p in report.pairs if p.expectation is not None]
    if recorded:
        agreeing = sum(1 for p in recorded if p.agrees_with_recording)
        lines.append(f"recorded compatibility table: {agreeing}/{len(recorded)} pairs reproduced")
    if report.wrong_results:
        rejected = sum(1 for w in report.wrong_results if w.rejected)
        lines.append(f"wrong results: {rejected}/{len(report.wrong_results)} rejected")
        for wrong in report.wrong_results:
            mark = "rejected" if wrong.rejected else "NOT REJECTED"
            lines.append(f"  {wrong.id}: {mark} ({wrong.detail})")
    failing = [p.name for p in report.pairs if not p.ok]
    lines.append("OK" if report.ok else f"MISMATCH: {', '.join(failing) or 'wrong results'}")
    return lines


def _pair_lines(cases: CaseFile, pair: PairReport) -> list[str]:
    version = f" ({pair.adapter_version})" if pair.adapter_version else ""
    head = f"  {pair.backend} + {pair.adapter}{version}: "
    head += f"{pair.matched}/{len(pair.applicable)} cases match"
    if pair.not_applicable:
        head += f" (n/a: {', '.join(pair.not_applicable)})"
    if pair.expectation is not None:
        recorded = pair.expectation
        fails = ", ".join(recorded.fails) or "none"
        verdict = "reproduced" if pair.agrees_with_recording else "NOT reproduced"
        head += f"; recorded {recorded.cases} cases, failing {fails}: {verdict}"
    lines = [head]
    if cases.totals:
        lines.extend(_totals_lines(cases, pair))
    for failure in pair.failures:
        lines.append(f"    FAIL {failure.case}")
        lines.append(f"      expected  {_results(failure.expected)}")
        lines.append(f"      observed  {_results(failure.observed)}")
    lines.extend(f"    problem: {problem}" for problem in pair.problems)
    return lines


def _totals_lines(cases: CaseFile, pair: PairReport) -> list[str]:
    """The counts in the file's own words (its vocabulary names what follows an execution)."""
    observed = pair.counts
    executions = observed.get("executions", 0)
    counted = ("initial", *dict.fromkeys(cases.vocabulary.counts_after.values()))
    parts = [f"{observed[key]} {key.replace('_', ' ')}" for key in counted]
    ended = sum(
        1
        for case, seen in pair.observed.items()
        if seen is not None
        and seen.get("disposition") not in (None, cases.vocabulary.success)
        and not any(f.case == case and _mismatched(f, "disposition") for f in pair.failures)
    )
    lines = [
        f"    {executions} executions: {', '.join(parts)}",
        f"    {observed.get('succeeded', 0)} succeeded, {ended} ended in their disposition",
    ]
    wrong = {n: t for n, t in pair.totals.items() if t[0] != t[1]}
    if wrong:
        lines.append(
            "    totals differ: "
            + ", ".join(f"{n} recorded {e}, observed {o}" for n, (e, o) in wrong.items())
        )
    else:
        lines.append("    totals match the recording")
    return lines


def _mismatched(failure: Any, key: str) -> bool:
    return any(m.key == key for m in failure.mismatches)


def _results(results: dict[str, Any]) -> str:
    return "; ".join(f"{key} {json.dumps(value)}" for key, value in results.items())


def report_json(report: Report) -> dict[str, Any]:
    return {
        "file": report.path,
        "ok": report.ok,
        "pairs": [
            {
                "backend": pair.backend,
                "adapter": pair.adapter,
                "adapter_version": pair.adapter_version,
                "cases": len(pair.applicable),
                "matched": pair.matched,
                "not_applicable": pair.not_applicable,
                "failures": [asdict(failure) for failure in pair.failures],
                "counts": pair.counts,
                "totals": {n: {"recorded": e, "observed": o} for n, (e, o) in pair.totals.items()},
                "problems": pair.problems,
                "recorded": asdict(pair.expectation) if pair.expectation else None,
                "reproduces_recording": pair.agrees_with_recording,
                "observed": pair.observed,
            }
            for pair in report.pairs
        ],
        "wrong_results": [asdict(wrong) for wrong in report.wrong_results],
    }
