"""The restore decisions as tables: what a first execution does, what its lookup establishes,
and when a ledger's level is behind its mark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from writesafe.ledger import Level, Restored, Signal
from writesafe.reconciler._check import Check, LookupOutcome
from writesafe.reconciler._restored import FirstRun, after_first_lookup
from writesafe.reconciler._restored import decide_first_run as decide

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
OPEN = Restored(NOW - timedelta(hours=1), Signal.MARK, NOW, NOW + timedelta(days=1))


@pytest.mark.parametrize(
    ("restored", "has_lookup", "expected"),
    [
        (None, True, FirstRun.EXECUTE),
        (None, False, FirstRun.EXECUTE),
        (OPEN, True, FirstRun.LOOK_UP),
        (OPEN, False, FirstRun.REFUSE),
    ],
)
def test_a_first_execution_runs_at_once_unless_a_restore_is_open(
    restored: Restored | None, has_lookup: bool, expected: FirstRun
) -> None:
    assert decide(restored, has_lookup=has_lookup) is expected


@pytest.mark.parametrize(
    ("outcome", "result", "expected"),
    [
        (LookupOutcome.FOUND, '{"order": 1}', FirstRun.SETTLE),
        (LookupOutcome.NOT_FOUND, None, FirstRun.EXECUTE),
        (LookupOutcome.UNKNOWN, None, FirstRun.HOLD),
    ],
)
def test_the_lookup_before_a_first_execution_settles_runs_or_holds(
    outcome: LookupOutcome, result: str | None, expected: FirstRun
) -> None:
    assert after_first_lookup(Check(outcome, NOW, result=result)) is expected


@pytest.mark.parametrize(
    ("ledger", "mark", "behind"),
    [
        (Level(50, 7), Level(50, 7), False),
        (Level(90, 9), Level(50, 7), False),  # moved on since the mark was raised
        (Level(50, 7), Level(100, 7), True),  # rows after the restore point are gone
        (Level(150, 7), Level(100, 9), True),  # new rows passed the old top; the count did not
        (Level(0, 0), Level(0, 1), True),
    ],
)
def test_a_ledger_is_behind_its_mark_on_either_count(
    ledger: Level, mark: Level, behind: bool
) -> None:
    assert ledger.behind(mark) is behind
