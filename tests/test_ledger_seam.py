"""The ledger answers what differs between its backends: the callers above never ask which one.

One function names the SQLite file: the writer's connections, the restore mark, the reconciler's
lock and the CLI all find the same absolute path, however the URL spelt it.
"""

from __future__ import annotations

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
