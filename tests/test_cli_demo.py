"""`writesafe demo` tells the whole story and leaves no key executed twice."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from writesafe.cli import app


def test_demo_runs_the_story_without_a_second_order() -> None:
    result = CliRunner().invoke(app, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    story = json.loads(result.output)
    assert "{'" not in result.output  # no Python reprs, even inside strings
    answers = {(step["step"]): step["answer"] for step in story["steps"]}
    operations = {operation["key"]: operation for operation in story["operations"]}
    orders = story["shop_orders"]

    assert answers["same key again"] == answers["first order"]
    assert answers["20 concurrent duplicates"] == "one answer for all"
    assert answers["same key, new payload"].startswith("KEY_REUSED")
    assert answers["invalid postcode"].startswith("INPUT_INVALID")
    assert answers["timeout after commit"].startswith("OUTCOME_UNKNOWN")
    # The retry's lookup finds the order the shop committed and returns it: no second order.
    assert answers["retry after timeout"] == f"result {json.dumps(orders['ord-5'])}"
    assert operations["ord-5"]["status"] == "succeeded"
    assert operations["ord-5"]["executions"] == 1
    assert operations["ord-3"]["executions"] == 2  # the busy shop was retried within bounds
    assert operations["ord-4"]["executions"] == 1  # invalid input is not retried
    assert sorted(orders) == ["ord-1", "ord-2", "ord-3", "ord-5"]  # one order per key


def test_demo_prints_tables_for_people() -> None:
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "The ledger" in result.output
    assert "no key ran twice" in result.output
    assert "The order-submission story" in result.output  # what it shows
    assert "temporary directory" in result.output  # where the ledger lives
    assert "Try next" in result.output
    assert "{'order_id'" not in result.output  # JSON, not Python reprs


def test_what_the_demo_says_to_try_next_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The "Try next" commands, run as printed: the kept ledger, then an operation's status (its
    result as JSON, not a Python repr); a second run on that ledger says why nothing executed."""
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(app, ["demo"])
    advice = " ".join(first.output.split())  # rich wraps lines
    commands = re.findall(r"`(writesafe [^`]+)`", advice[advice.index("Try next") :])
    assert [c.split()[1] for c in commands] == ["demo", "status"]
    keep, status = (command.split()[1:] for command in commands)
    kept = runner.invoke(app, keep)
    assert kept.exit_code == 0, kept.output
    assert "already held" not in kept.output
    shown = runner.invoke(app, status)
    assert shown.exit_code == 0, shown.output
    assert '{"order_id": "ord-004", "sku": "E5"}' in shown.output
    assert "{'" not in shown.output
    again = runner.invoke(app, [*keep, "--json"])
    assert json.loads(again.output)["resumed"] is True
    again = runner.invoke(app, keep)
    assert "This ledger already held the story's keys" in " ".join(again.output.split())
    assert "0 orders for 5 operations: no key ran twice" in again.output
