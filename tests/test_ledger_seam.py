"""The ledger answers what differs between its backends: the callers above never ask which one.

One function names the SQLite file: the writer's connections, the restore mark, the reconciler's
lock and the CLI all find the same absolute path, however the URL spelt it.
"""

from __future__ import annotations

import ast
import os
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import PG_URL
from writesafe.idempotency._restore_watch import CreatedMark, marks_of
from writesafe.ledger import FileMark, Ledger, mark_path
from writesafe.reconciler._reconcile import _single_worker_lock


def _file_marks(ledger: Ledger) -> list[Path]:
    marks = marks_of(ledger, None, CreatedMark(timedelta(hours=1)))
    return [mark.path for mark in marks if isinstance(mark, FileMark)]


def test_a_relative_sqlite_url_names_one_absolute_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    ledger = Ledger.from_url("sqlite+aiosqlite:///./ledger.db")
    assert ledger.file == tmp_path.resolve() / "ledger.db"
    lock = _single_worker_lock(ledger)
    assert lock is not None
    assert lock.path.parent == ledger.file.parent
    assert _file_marks(ledger) == [mark_path(ledger.file)]


def test_a_server_ledger_has_no_file(pg_schema: str) -> None:
    ledger = Ledger.from_url(PG_URL, schema=pg_schema)
    assert ledger.file is None
    assert _single_worker_lock(ledger) is None
    assert _file_marks(ledger) == []


ROOT = Path(__file__).resolve().parent.parent
BACKEND_NAMES = {"SqliteWriter", "PostgresWriter", "is_sqlite"}
LEDGER_JOBS = (
    "_ledger.py",
    "_hot_path.py",
    "_reads.py",
    "_reconciliation.py",
    "_ledger_time.py",
    "_lease_judges.py",
    "_due.py",
)


def _modules(*directories: str) -> list[Path]:
    """The .py files under `directories` (os.walk does not follow writesafe/'s package links)."""
    found = []
    for directory in directories:
        for base, _, names in os.walk(ROOT / directory):
            found += [Path(base) / name for name in names if name.endswith(".py")]
    return found


def _attributes(path: Path) -> list[tuple[str, str, int]]:
    """`(object, attribute, line)` of each `x.y` in `path`, `object` as written (`ws.ledger`)."""
    return [
        (ast.unparse(node.value), node.attr, node.lineno)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
    ]


def test_the_layers_above_ask_the_ledger_not_its_engine() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {owner}.{name}"
        for path in _modules("idempotency", "reconciler", "writesafe")
        for owner, name, line in _attributes(path)
        if owner.split(".")[-1] == "ledger" and name in {"engine", "is_sqlite", "writer"}
    ]
    assert found == []


def test_the_ledger_never_asks_which_backend_it_has() -> None:
    """Only `_backend` chooses one; the ledger's jobs ask its writer what differs."""
    found = [
        f"{name}: {used}"
        for name in LEDGER_JOBS
        for node in ast.walk(ast.parse((ROOT / "ledger" / name).read_text()))
        if isinstance(node, ast.Name | ast.alias)
        and (used := node.id if isinstance(node, ast.Name) else node.name) in BACKEND_NAMES
    ]
    assert found == []
