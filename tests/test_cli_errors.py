"""Every `writesafe` command ends in its exit code and one line, never a traceback.

Exit codes: 0 ok, 1 failed, 2 usage, 3 store unreachable, 4 not found. Commands run in-process
through typer's runner, from a working directory of their own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.conftest import PG_URL, run_sync
from tests.conftest import _pg_execute as pg_execute
from writesafe import ToolError, WriteSafe, WriteSafeError
from writesafe.cli import app
from writesafe.ledger import head_revision, mark_path

DOWN = "postgresql+asyncpg://postgres@127.0.0.1:1/none"  # nothing listens on port 1
APP = """
from writesafe import WriteSafe

ws = WriteSafe("sqlite+aiosqlite:///writesafe.db")


@ws.tool("submit_order")
async def submit_order(order: dict) -> dict:
    return {"order_id": "o-1"}
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding the app as `myapp` (a fresh module for each test)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "myapp", raising=False)
    (tmp_path / "myapp.py").write_text(APP)
    return tmp_path


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def one_line_error(result: Result, code: int) -> str:
    """The command exited `code` with exactly one line on stderr and no traceback."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def test_status_with_the_database_down_is_exit_3() -> None:
    line = one_line_error(cli("status", "k1", "--database-url", DOWN), 3)
    assert "127.0.0.1:1/none could not be reached" in line


def test_resolve_with_the_ledger_down_is_exit_3() -> None:
    result = cli(
        "resolve", "k1", "--outcome", "failed", "--reason", "r", "--actor", "a",
        "--database-url", DOWN,
    )  # fmt: skip
    one_line_error(result, 3)


def test_a_key_over_the_limit_is_a_usage_error(workdir: Path) -> None:
    assert cli("db", "upgrade", "--app", "myapp:ws").exit_code == 0
    line = one_line_error(cli("status", "k" * 300, "--app", "myapp:ws"), 2)
    assert "300 characters long" in line


def test_read_commands_never_create_a_ledger(workdir: Path) -> None:
    for args in (
        ["status", "ord-7", "--app", "myapp:ws"],
        ["keys", "list", "--app", "myapp:ws"],
        ["reconcile", "myapp:ws"],
        ["db", "current", "--app", "myapp:ws"],
    ):
        line = one_line_error(cli(*args), 3)
        assert f"no ledger at {workdir / 'writesafe.db'}" in line, args
        assert "writesafe db upgrade" in line
    assert sorted(p.name for p in workdir.iterdir() if p.suffix != ".py") == []


def test_a_failed_keys_create_leaves_no_empty_ledger(workdir: Path) -> None:
    # No --app: a bare WriteSafe on ./writesafe.db, which does not migrate by itself.
    line = one_line_error(cli("keys", "create", "--scope", "a", "--name", "ops"), 1)
    assert "writesafe db upgrade" in line
    assert not (workdir / "writesafe.db").exists()
    refused = cli("keys", "create", "--scope", "", "--name", "ops", "--app", "myapp:ws")
    assert refused.exit_code == 2
    assert not (workdir / "writesafe.db").exists()
    assert not mark_path(workdir / "writesafe.db").exists()  # nor its restore mark


def test_status_json_uses_the_contract_names(workdir: Path) -> None:
    url = f"sqlite+aiosqlite:///{workdir / 'ledger.db'}"

    async def failed_operation() -> None:
        ws = WriteSafe(url)

        @ws.tool("submit_order")
        async def submit_order(order: dict[str, str]) -> None:
            raise ToolError("INPUT_INVALID", "bad sku", field="sku")

        with pytest.raises(WriteSafeError):
            await submit_order({}, idempotency_key="k1")
        await ws.close()

    run_sync(failed_operation())
    result = cli("status", "k1", "--database-url", url, "--json")
    assert result.exit_code == 0, result.output
    error = json.loads(result.stdout)["error"]
    assert error["schema"] == "writesafe.error/1"
    assert "schema_" not in result.stdout


def test_version() -> None:
    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("writesafe ")
    assert result.stdout.split()[1][0].isdigit()


def test_db_current_and_downgrade(workdir: Path) -> None:
    assert cli("db", "upgrade", "--app", "myapp:ws").exit_code == 0
    current = cli("db", "current", "--app", "myapp:ws")
    assert current.exit_code == 0
    assert f"at {head_revision()} (current)" in current.stdout
    down = cli("db", "downgrade", "0001", "--app", "myapp:ws")
    assert down.exit_code == 0, down.output
    assert "at 0001" in down.stdout
    behind = cli("db", "current", "--app", "myapp:ws")
    assert behind.exit_code == 1
    assert "writesafe db upgrade" in behind.stdout


def test_a_downgrade_to_no_such_revision_is_exit_2_and_changes_nothing(workdir: Path) -> None:
    """A mistyped revision is the caller's mistake (exit 2, one line naming the ones there are),
    checked before the ledger is opened; it was alembic's CommandError, exit 1."""
    assert cli("db", "upgrade", "--app", "myapp:ws").exit_code == 0
    line = one_line_error(cli("db", "downgrade", "9999", "--app", "myapp:ws"), 2)
    assert "'9999' is not a migration; one of base, 0001, " in line
    assert line.endswith(head_revision())
    assert f"at {head_revision()} (current)" in cli("db", "current", "--app", "myapp:ws").stdout


@pytest.mark.postgres
def test_status_on_an_unmigrated_schema_is_exit_1(pg_schema: str) -> None:
    line = one_line_error(cli("status", "k1", "--database-url", PG_URL, "--schema", pg_schema), 1)
    assert "writesafe db upgrade" in line


@pytest.mark.postgres
def test_db_upgrade_creates_a_missing_schema(pg_schema: str) -> None:
    missing = f"{pg_schema}_new"
    try:
        upgraded = cli("db", "upgrade", "--database-url", PG_URL, "--schema", missing)
        assert upgraded.exit_code == 0, upgraded.output
        current = cli("db", "current", "--database-url", PG_URL, "--schema", missing)
        assert current.exit_code == 0, current.output
    finally:
        run_sync(pg_execute(f'DROP SCHEMA IF EXISTS "{missing}" CASCADE'))
