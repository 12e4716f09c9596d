"""`writesafe status` reads at 80 columns, the width of a terminal nobody resized: no line is
wider, and no code, outcome, time or word of an operator's reason is cut."""

from __future__ import annotations

import asyncio
import re

import pytest
from typer.testing import CliRunner

from tests.conftest import run_sync
from writesafe import WriteSafe, WriteSafeError
from writesafe.cli import app as cli_app

REASON = (
    "the customer confirmed by phone that order 88417 never reached the warehouse, see ticket T-12"
)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The demo's operations (a busy dependency retried, an unknown outcome found by a lookup)
    and one an operator settled with a long reason."""
    url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('status') / 'ledger.db'}"
    demo = CliRunner().invoke(cli_app, ["demo", "--database-url", url])
    assert demo.exit_code == 0, demo.output

    async def settled() -> None:
        ws = WriteSafe(url)

        @ws.tool("refund_order", timeout=0.05)
        async def refund_order(order: dict[str, str]) -> dict[str, str]:
            await asyncio.sleep(1)
            return {}

        try:
            with pytest.raises(WriteSafeError) as unknown:
                await refund_order({"order": "88417"}, idempotency_key="refund-88417")
            assert unknown.value.code == "OUTCOME_UNKNOWN"
            await ws.resolve(
                "refund-88417",
                outcome="failed",
                reason=REASON,
                actor="dana.operations",
                evidence={"checked": "ticket T-12"},
            )
        finally:
            await ws.close()

    run_sync(settled())
    return url


def status_at_80(url: str, key: str) -> str:
    shown = CliRunner().invoke(
        cli_app, ["status", key, "--database-url", url], env={"COLUMNS": "80"}
    )
    assert shown.exit_code == 0, shown.output
    return shown.stdout


@pytest.mark.parametrize("key", ["ord-3", "ord-5", "refund-88417"])
def test_no_line_is_wider_than_80_columns(ledger: str, key: str) -> None:
    shown = status_at_80(ledger, key)
    assert max(len(line) for line in shown.splitlines()) <= 80, shown
    assert "…" not in shown, shown  # rich's mark of a cut cell


def cells(shown: str) -> set[str]:
    """The words of the output, with the table's rules and edges taken out."""
    return set(re.split(r"[\s│┃┌┐└┘├┤┬┴┼─━]+", shown))


def test_codes_outcomes_and_times_are_whole(ledger: str) -> None:
    busy = cells(status_at_80(ledger, "ord-3"))
    assert {"failed", "DEPENDENCY_BUSY", "succeeded", "execution"} <= busy
    unknown = cells(status_at_80(ledger, "ord-5"))
    # The timed-out execution is closed by what the caller's lookup found; its code stays.
    assert {"succeeded", "OUTCOME_UNKNOWN", "lookup", "found", "caller"} <= unknown
    attempts = status_at_80(ledger, "ord-5").split("attempts (UTC)")[1]
    assert len(re.findall(r"\b\d\d:\d\d:\d\d\.\d{3}\b", attempts)) == 2  # each start, whole
    assert re.search(r"\b\d{4}-\d\d-\d\d\b", attempts)  # and the day they began


def test_an_operators_reason_wraps_by_words(ledger: str) -> None:
    shown = cells(status_at_80(ledger, "refund-88417"))
    assert set(REASON.split()) <= shown
    assert {"dana.operations:", "operator"} <= shown
