"""Plant each known bug in a throwaway copy of the repository and show that a check catches it.

    python scripts/mutation_check.py [--only NAME ...] [--orders 120] [--no-baseline]
        [--no-chaos | --no-tests]

A proof that cannot fail proves nothing. Each mutation in `scripts/mutations/` is one deliberate
bug that the tests or a short chaos run must catch; this script copies the working tree's tracked
files to a temporary directory, applies one patch there (never to the repository), runs the
mutation's checks in the copy and reports which check failed and how long it took. The baseline
runs the same checks on an unpatched copy first: a check that fails without the bug catches
nothing. Exit status 0 when every patch applied, the baseline passed and every bug was caught;
1 otherwise; a patch that no longer applies is reported as such. Not run in CI: it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "scripts" / "mutations"


@dataclass(frozen=True)
class Check:
    """A command run in the copy; it catches the bug when it exits non-zero."""

    name: str
    command: tuple[str, ...]


@dataclass(frozen=True)
class Mutation:
    name: str  # the patch is scripts/mutations/<name>.patch
    bug: str
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class Outcome:
    check: str
    caught: bool
    seconds: float
    detail: str


def chaos(name: str, orders: int, seed: int, *options: str) -> Check:
    command = ("-m", "tests.chaos", "--orders", str(orders), "--workers", "3", "--seed", str(seed))
    return Check(name, (*command, *options))


def pytest(*selection: str) -> Check:
    return Check(
        f"pytest {' '.join(selection)}",
        ("-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *selection),
    )


def mutations(orders: int) -> tuple[Mutation, ...]:
    no_reconcilers = chaos("chaos, no reconcilers", orders, 7101, "--reconcilers", "0")
    reconcilers = chaos("chaos, 2 reconcilers", orders, 7102)
    return (
        Mutation(
            "a_takeover_reexecutes",
            "a guard that re-executes an expired lease without reconciliation",
            (pytest("tests/test_guard.py"), no_reconcilers),
        ),
        Mutation(
            "b_cache_before_commit",
            "a Redis copy written before the ledger commits",
            (pytest("tests/test_cache_fills.py"), reconcilers),
        ),
        Mutation(
            "c_settle_ignored",
            "a settle window ignored",
            (pytest("tests/test_reconcile_inline.py"), reconcilers),
        ),
        Mutation(
            "d_gate_skips_lookup",
            "a replay gate that re-runs OUTCOME_UNKNOWN without a lookup",
            (pytest("tests/test_reconcile_inline.py"), no_reconcilers),
        ),
    )


def copy_tree(target: Path) -> None:
    """The working tree's tracked files (committed or not), without the virtualenv."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = ROOT / name.decode()
        destination = target / name.decode()
        if source.is_symlink():  # writesafe/idempotency -> ../idempotency, and its siblings
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.symlink_to(os.readlink(source))
        elif source.is_file():
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    imported = subprocess.run(
        [sys.executable, "-c", "import writesafe.idempotency._guard as g; print(g.__file__)"],
        cwd=target,
        env={**_environment(), "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
    ).stdout.strip()
    # The project's editable install maps writesafe.* to this checkout: a copy that imported it
    # would test the unpatched code, and every planted bug would look missed or, worse, caught.
    if not Path(imported).resolve().is_relative_to(target.resolve()):
        raise SystemExit(f"the copy in {target} imports {imported or 'nothing'}, not its own code")


def apply(patch: Path, copy: Path) -> str | None:
    """Apply `patch` in `copy`; the reason when it does not apply cleanly."""
    for mode in (("--check",), ()):
        done = subprocess.run(
            ["git", "apply", *mode, str(patch)], cwd=copy, capture_output=True, text=True
        )
        if done.returncode != 0:
            return (
                done.stderr.strip().splitlines()[0] if done.stderr.strip() else "git apply failed"
            )
    return None


def run_check(check: Check, copy: Path) -> Outcome:
    verdict = copy / "verdict.json"
    command = [sys.executable, *check.command]
    if _is_chaos(check):
        command += ["--json", str(verdict)]
    began = time.monotonic()
    done = subprocess.run(
        command,
        cwd=copy,
        env={**_environment(), "PYTHONPATH": str(copy)},
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - began
    caught = done.returncode != 0
    if verdict.exists():
        data = json.loads(verdict.read_text())
        broken = {k: v for k, v in data["violations"].items() if v}
        detail = ", ".join(f"{k} {v}" for k, v in broken.items()) or "every invariant 0"
        detail += f" (seed {data['seed']})"
        verdict.unlink()
    else:
        lines = done.stdout.strip().splitlines() or [""]
        failures = [line.split(" - ")[0] for line in lines if line.startswith(("FAILED", "ERROR"))]
        detail = "; ".join([*failures[:2], lines[-1]])[:240]
    return Outcome(check.name, caught, seconds, detail)


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@dataclass(frozen=True)
class Row:
    bug: str
    check: str
    verdict: str
    seconds: float | None
    detail: str

    def markdown(self) -> str:
        took = "—" if self.seconds is None else f"{self.seconds:.0f} s"
        return f"| {self.bug} | {self.check} | {self.verdict} | {took} | {self.detail} |"


def baseline(checks: list[Check]) -> list[Row]:
    """The checks on an unpatched copy: each must pass, or its failing catches nothing."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="mutation-baseline-") as tmp:
        copy_tree(Path(tmp))
        for check in checks:
            outcome = run_check(check, Path(tmp))
            verdict = "FAILS WITHOUT A BUG" if outcome.caught else "passes"
            rows.append(
                Row("(none: the baseline)", check.name, verdict, outcome.seconds, outcome.detail)
            )
            print(rows[-1].markdown(), flush=True)
    return rows


def plant(mutation: Mutation, checks: list[Check]) -> list[Row]:
    """Apply the mutation in a fresh copy and run its checks there."""
    with tempfile.TemporaryDirectory(prefix=f"mutation-{mutation.name}-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        problem = apply(PATCHES / f"{mutation.name}.patch", copy)
        if problem is not None:
            row = Row(mutation.bug, "—", "PATCH DOES NOT APPLY", None, problem)
            print(row.markdown(), flush=True)
            return [row]
        rows = []
        for check in checks:
            outcome = run_check(check, copy)
            verdict = "caught" if outcome.caught else "missed"
            rows.append(Row(mutation.bug, check.name, verdict, outcome.seconds, outcome.detail))
            print(rows[-1].markdown(), flush=True)
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="mutation names (default: all)")
    parser.add_argument("--orders", type=int, default=120, help="orders per chaos check")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unpatched run")
    parser.add_argument("--no-chaos", action="store_true", help="run the tests only")
    parser.add_argument("--no-tests", action="store_true", help="run the chaos checks only")
    args = parser.parse_args()
    chosen = [m for m in mutations(args.orders) if not args.only or m.name in args.only]

    def wanted(mutation: Mutation) -> list[Check]:
        skipped = {True: args.no_chaos, False: args.no_tests}
        return [c for c in mutation.checks if not skipped[_is_chaos(c)]]

    print("| bug | check | verdict | time | what it saw |")
    print("|---|---|---|---|---|", flush=True)
    rows: list[Row] = []
    if not args.no_baseline:
        unique = {c.name: c for m in chosen for c in wanted(m)}
        rows += baseline(list(unique.values()))
    ok = all(r.verdict == "passes" for r in rows)
    for mutation in chosen:
        planted = plant(mutation, wanted(mutation))
        ok &= any(r.verdict == "caught" for r in planted)
        rows += planted
    sys.exit(0 if ok else 1)


def _is_chaos(check: Check) -> bool:
    return "tests.chaos" in check.command


if __name__ == "__main__":
    main()
