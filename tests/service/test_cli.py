"""`writesafe serve` and `writesafe keys` as a user runs them.

`serve` runs as a real process on a real port; the other commands run in-process through typer's
runner (the same code path, without paying an interpreter start per command).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from tests.conftest import PG_URL
from tests.loopback import free_port, serving
from writesafe.cli import app as cli_app

APP = """
from writesafe import WriteSafe

ws = WriteSafe("sqlite+aiosqlite:///{db}")


@ws.tool("submit_order")
async def submit_order(order: dict) -> dict:
    return {{"order_id": "o-1"}}
"""


@dataclass
class Project:
    """A directory holding the user's application module, as `writesafe` is run from it."""

    path: Path
    module: str

    def write(self, source: str, suffix: str = "") -> str:
        name = f"{self.module}{suffix}"
        (self.path / f"{name}.py").write_text(source)
        return name

    def cli(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(cli_app, list(args), env=env)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    monkeypatch.chdir(tmp_path)  # `writesafe` imports the app from the working directory
    made = Project(tmp_path, f"shop_{uuid.uuid4().hex[:8]}")
    made.write(APP.format(db=tmp_path / "ledger.db"))
    return made


@pytest.fixture
def server(project: Project) -> Iterator[str]:
    """`writesafe serve <app> --host 127.0.0.1 --port <free>` in its own process."""
    command = [sys.executable, "-c", "from writesafe.cli import main; main()", "serve"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with serving(
        [*command, f"{project.module}:ws", "--host", "127.0.0.1"], cwd=project.path, env=env
    ) as base:
        yield base


@pytest.mark.slow
def test_serve_and_keys_end_to_end(project: Project, server: str) -> None:
    app = f"{project.module}:ws"
    created = project.cli(
        "keys", "create", "--app", app, "--scope", "default", "--role", "operator",
        "--name", "ops", "--json",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    key: dict[str, Any] = json.loads(created.stdout)
    assert key["token"].startswith(f"wsk_{key['key_id']}_")
    assert (key["scope"], key["role"], key["name"]) == ("default", "operator", "ops")
    headers = {"Authorization": f"Bearer {key['token']}"}
    assert httpx.get(f"{server}/readyz").json()["checks"] == {"database": "ok"}
    assert httpx.get(f"{server}/v1/operations", headers=headers).status_code == 200
    assert httpx.post(f"{server}/v1/reconcile", headers=headers).status_code == 200

    listed = project.cli("keys", "list", "--app", app, "--json")
    assert [k["key_id"] for k in json.loads(listed.stdout)] == [key["key_id"]]
    assert key["token"] not in listed.stdout

    revoked = project.cli("keys", "revoke", key["key_id"], "--app", app, "--json")
    assert revoked.exit_code == 0, revoked.output
    assert json.loads(revoked.stdout)["revoked_at"] is not None
    assert httpx.get(f"{server}/v1/operations", headers=headers).status_code == 401
    assert json.loads(project.cli("keys", "list", "--app", app, "--json").stdout) == []
    everything = json.loads(project.cli("keys", "list", "--app", app, "--all", "--json").stdout)
    assert [k["key_id"] for k in everything] == [key["key_id"]]
    assert project.cli("keys", "revoke", "000000000000", "--app", app).exit_code == 4


def test_keys_refuse_bad_arguments(project: Project) -> None:
    app = f"{project.module}:ws"
    for args in (
        ["--scope", "", "--name", "x"],
        ["--scope", "a\tb", "--name", "x"],
        ["--scope", "a", "--name", "x" * 256],
        ["--scope", "a", "--name", "x", "--role", "root"],
        ["--name", "x"],
    ):
        result = project.cli("keys", "create", "--app", app, *args)
        assert result.exit_code == 2, (args, result.output)
    # A refused create leaves no ledger behind, and listing does not create one.
    assert project.cli("keys", "list", "--app", app, "--json").exit_code == 3
    assert not (project.path / "ledger.db").exists()


def test_keys_create_makes_admin_keys(project: Project) -> None:
    app = f"{project.module}:ws"
    args = ["--scope", "ops", "--role", "admin", "--name", "prometheus", "--json"]
    created = project.cli("keys", "create", "--app", app, *args)
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["role"] == "admin"
    listed = json.loads(project.cli("keys", "list", "--app", app, "--json").stdout)
    assert [(k["scope"], k["role"]) for k in listed] == [("ops", "admin")]


def test_keys_and_serve_explain_a_wrong_app_path(project: Project) -> None:
    missing = project.cli("serve", "no_such_module:ws")
    assert missing.exit_code == 2
    assert "cannot import 'no_such_module'" in missing.stderr
    not_ws = project.cli("serve", f"{project.module}:submit_order")
    assert not_ws.exit_code == 2
    assert "not a writesafe.WriteSafe" in not_ws.stderr
    broken = project.write("raise RuntimeError('missing SHOP_URL')\n", "_broken")
    raised = project.cli("serve", f"{broken}:ws")
    assert raised.exit_code == 2
    assert f"importing '{broken}' failed: RuntimeError: missing SHOP_URL" in raised.stderr
    assert project.cli("keys", "list", "--app", "nope").exit_code == 2


def test_keys_and_serve_exit_3_when_the_database_is_unreachable(project: Project) -> None:
    down = project.write(
        "from writesafe import WriteSafe\n"
        "ws = WriteSafe('postgresql+asyncpg://postgres@127.0.0.1:1/none')\n",
        "_down",
    )
    served = project.cli("serve", f"{down}:ws", "--port", str(free_port()))
    assert served.exit_code == 3, served.output
    assert "could not be reached" in served.stderr
    assert project.cli("keys", "list", "--app", f"{down}:ws").exit_code == 3
    url = "postgresql+asyncpg://postgres@127.0.0.1:1/none"
    assert project.cli("keys", "list", "--database-url", url).exit_code == 3


@pytest.mark.postgres
def test_serve_and_keys_refuse_an_unmigrated_schema(project: Project, pg_schema: str) -> None:
    env = {"WRITESAFE_DATABASE_URL": PG_URL, "WRITESAFE_DB_SCHEMA": pg_schema}
    bare = project.write("from writesafe import WriteSafe\nws = WriteSafe()\n", "_pg")
    served = project.cli("serve", f"{bare}:ws", "--port", str(free_port()), env=env)
    assert served.exit_code == 1
    assert "writesafe db upgrade" in served.stderr
    listed = project.cli("keys", "list", env=env)
    assert listed.exit_code == 1
    assert "writesafe db upgrade" in listed.stderr
    assert project.cli("db", "upgrade", env=env).exit_code == 0
    created = project.cli("keys", "create", "--scope", "t", "--name", "n", "--json", env=env)
    assert created.exit_code == 0, created.output
