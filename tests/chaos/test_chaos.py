"""The chaos run in the normal suite (short, with writer stalls and skewed clocks), and the
checker's ability to see each violation."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections import Counter

import pytest

from tests.chaos._checker import VIOLATIONS, LedgerRow, check
from tests.chaos._harness import run_chaos
from tests.chaos._plan import DriverFault, Fault, Plan
from tests.chaos._skew import _STATE, faketime_installed, sweep_stale_state
from tests.pgbouncer import available
from writesafe import Status

SEED = 20261206
ORDERS = 40
# A short run sees every shop fault and every stall point only if they are more frequent than in
# a long one: at this seed, every fault kind comes up among the first requests, and five orders
# stall before their send (one before the fence, two after it, two after the check at the write),
# in all three workers. An order's stall is its own, not its first execution's: a first
# execution that never gets there (its fence closed by another stall in its process, the ledger
# out of reach, its process killed: the at-write stalls were lost that way on a loaded machine)
# leaves it to the next, in whichever process.
SHORT_RUN_WEIGHTS = {f: 0.44 if f is Fault.OK else 0.08 for f in Fault}
STALL_RATE = 0.14
# The runs skew the workers' and reconcilers' clocks: without libfaketime they are skipped, as
# the other skewed tests are, rather than failed.
needs_faketime = pytest.mark.skipif(
    not faketime_installed(),
    reason="needs libfaketime: apt-get install faketime (.ci/run installs it)",
)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.pg_connections(30)  # 3 workers, 2 reconcilers and the driver: 27 seen at peak
@needs_faketime
def test_a_short_chaos_run_keeps_every_invariant() -> None:
    plan = Plan(seed=SEED, weights=SHORT_RUN_WEIGHTS, stall_rate=STALL_RATE)
    report = asyncio.run(
        run_chaos(orders=ORDERS, workers=3, seed=SEED, plan=plan, log=lambda *_: None)
    )
    verdict = report.verdict
    broken = {k: v for k, v in verdict.violations.items() if v}
    assert broken == {}, report.run_dir
    # Every fault kind was really exercised, so the invariants were tested against all of them.
    assert {f.value for f in Fault} <= set(verdict.shop_faults)
    assert set(report.driver_faults) == {f.value for f in DriverFault}
    assert report.writer_stalls["self before_fence"] > 0
    assert report.writer_stalls["self after_fence"] > 0
    assert report.writer_stalls["self at_write"] > 0
    assert report.writer_stalls["driver"] > 0
    assert any(not k.endswith(" +0 s") for k in report.skews if k.startswith("worker"))
    assert any(not k.endswith(" +0 s") for k in report.skews if k.startswith("reconciler"))
    assert report.operations == ORDERS
    assert verdict.reconciled > 0


POOLED_ORDERS = 24


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.pg_connections(12)  # the pooler's 8 server connections, the driver and the checks
@pytest.mark.skipif(not available(), reason="pgbouncer is not installed (.ci/run installs it)")
@needs_faketime
def test_a_short_chaos_run_through_a_transaction_pooler_keeps_every_invariant() -> None:
    """The same faults with every ledger connection of the workers and reconcilers going through
    PgBouncer in transaction mode (shorter: the long run above covers every fault kind)."""
    plan = Plan(seed=SEED, weights=SHORT_RUN_WEIGHTS, stall_rate=STALL_RATE)
    report = asyncio.run(
        run_chaos(
            orders=POOLED_ORDERS,
            workers=2,
            reconcilers=1,
            seed=SEED,
            plan=plan,
            pooler=True,
            log=lambda *_: None,
        )
    )
    broken = {k: v for k, v in report.verdict.violations.items() if v}
    assert broken == {}, report.run_dir
    assert report.operations == POOLED_ORDERS
    assert report.driver_faults.total() > 0


def _row(key: str, status: Status, order_id: str | None = None) -> LedgerRow:
    result = None if order_id is None else f'{{"order_id": "{order_id}", "ref": "{key}"}}'
    return LedgerRow(key, status, result, looked_up=False)


def _final(ref: str, kind: str = "result") -> dict[str, object]:
    return {"ref": ref, "kind": "final", "final": kind}


def test_the_checker_reports_each_kind_of_violation() -> None:
    plan = Plan(seed=1, lookup_broken_rate=0.0)
    refs = [f"r{n}" for n in range(9)]
    orders = {"r0": ["o1", "o2"], "r1": ["o3"], "r3": ["o4"], "r4": ["o5"], "r7": ["o6"]}
    ledger = {
        "r0": _row("r0", Status.SUCCEEDED, "o1"),  # two effects: a duplicate
        "r1": _row("r1", Status.FAILED),  # an effect the ledger calls failed: lost
        "r2": _row("r2", Status.SUCCEEDED, "o9"),  # success without an effect: phantom
        "r3": _row("r3", Status.SUCCEEDED, "o9"),  # success naming another order
        "r4": _row("r4", Status.OUTCOME_UNKNOWN),  # never resolved
        "r5": _row("r5", Status.NEEDS_ATTENTION),  # escalated though the lookup worked
        "r6": _row("r6", Status.FAILED),
        "r7": _row("r7", Status.SUCCEEDED, "o6"),
    }
    journal = [_final(ref) for ref in refs if ref != "r8"] + [
        {"ref": "r6", "kind": "untyped", "error": "KeyError()"},
        {"ref": "r7", "kind": "result", "result": {"order_id": "o5"}},
    ]
    verdict = check(plan, refs, orders, Counter(), ledger, journal)
    assert verdict.violations == {
        "duplicates": ["r0"],
        "lost": ["r1"],
        "phantom": ["r2"],
        "wrong_result": ["r3"],
        "unresolved": ["r4"],
        "unexpected_escalation": ["r5"],
        "untyped": ["r6"],
        "unanswered": ["r8"],
        "caller_wrong_result": ["r7"],
    }
    assert set(verdict.violations) == set(VIOLATIONS)


def test_an_escalation_is_allowed_where_the_lookup_cannot_answer() -> None:
    plan = Plan(seed=1, lookup_broken_rate=1.0)
    ledger = {"r0": _row("r0", Status.NEEDS_ATTENTION)}
    verdict = check(plan, ["r0"], {"r0": ["o1"]}, Counter(), ledger, [_final("r0", "envelope")])
    assert verdict.ok
    assert verdict.escalated == 1


@pytest.mark.skipif(not _STATE.is_dir(), reason="libfaketime keeps its state in /dev/shm")
def test_the_sweep_removes_libfaketimes_state_of_gone_processes_and_keeps_the_live_ones() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    names = ("faketime_shm_{}", "sem.faketime_sem_{}")
    dead = [_STATE / name.format(gone.pid) for name in names]
    live = [_STATE / name.format(os.getpid()) for name in names]
    try:
        for path in (*dead, *live):
            path.touch()
        assert sweep_stale_state() >= len(dead)
        assert not any(path.exists() for path in dead)
        assert all(path.exists() for path in live)
    finally:
        for path in (*dead, *live):
            path.unlink(missing_ok=True)
