"""The suite's PostgreSQL connection budget: slots beyond PG_BUDGET wait for a release."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.conftest import PG_BUDGET, ConnectionBudget


def test_a_test_waits_until_the_budget_has_room(tmp_path: Path) -> None:
    budget = ConnectionBudget(tmp_path / "budget")
    got_in = threading.Event()

    def second_holder() -> None:
        with budget.hold(2):
            got_in.set()

    with budget.hold(PG_BUDGET - 1):
        waiter = threading.Thread(target=second_holder)
        waiter.start()
        time.sleep(0.3)
        assert not got_in.is_set()  # one slot free, two wanted: it waits
    waiter.join(timeout=5)
    assert got_in.is_set()


def test_released_slots_are_taken_again(tmp_path: Path) -> None:
    budget = ConnectionBudget(tmp_path / "budget")
    for _ in range(3):
        with budget.hold(PG_BUDGET):
            pass
