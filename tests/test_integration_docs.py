"""The getting-started pages of docs/integrations/ run as written: each page's first Python
block is saved under the name its first line gives it and run the way the page says, in a
folder of its own (the embedded ledger is a SQLite file there)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "integrations"

# Sends what the Flask and Django pages' curl lines send, through each framework's test client.
CURLS = """
import json, sys
sent = [("ord-1", {"sku": "A1"}), ("ord-1", {"sku": "A1"}), ("ord-1", {"sku": "B2"}),
        (None, {"sku": "A1"})]
for key, body in sent:
    headers = {} if key is None else {"Idempotency-Key": key}
    status, replayed, content = post(json.dumps(body), headers)
    print(status, replayed, content.decode())
"""
FLASK = "from shop import app\nclient = app.test_client()\n" + (
    "def post(body, headers):\n"
    "    r = client.post('/orders', data=body, content_type='application/json', headers=headers)\n"
    "    return r.status_code, r.headers.get('Idempotent-Replayed'), r.get_data()\n"
)
DJANGO = "import shop\nfrom django.test import Client\nclient = Client()\n" + (
    "def post(body, headers):\n"
    "    r = client.post('/orders', body, 'application/json', headers=headers)\n"
    "    return r.status_code, r.headers.get('Idempotent-Replayed'), r.content\n"
)


def first_block(page: str, work: Path) -> Path:
    """Save `page`'s first Python block as the file its first line names."""
    block = re.search(r"```python\n(.*?)```", (DOCS / page).read_text(), re.DOTALL)
    assert block is not None, page
    name = re.match(r"# (\S+\.py)", block.group(1))
    assert name is not None, f"{page}: the block's first line names its file"
    path = work / name.group(1)
    path.write_text(block.group(1))
    return path


def run(work: Path, *arguments: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, *arguments],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(work)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_sync_page_runs_twice_and_replays(tmp_path: Path) -> None:
    script = first_block("sync.md", tmp_path)

    for _ in range(2):  # "run it twice: the second run replays"
        lines = run(tmp_path, script.name)
        assert lines[0] == "{'refund_id': 're-o-1', 'cents': 1200}"
        assert "replayed=True" in lines[1]
        assert lines[2:] == ["KEY_REUSED", "succeeded"]


@pytest.mark.parametrize(("page", "client"), [("flask.md", FLASK), ("django.md", DJANGO)])
def test_the_view_pages_answer_as_their_curl_lines_say(
    tmp_path: Path, page: str, client: str
) -> None:
    first_block(page, tmp_path)

    lines = run(tmp_path, "-c", client + CURLS)

    first, replay, reused, keyless = lines
    assert first == '201 None {"order_id":"o-1","sku":"A1"}'
    assert replay == '201 true {"order_id":"o-1","sku":"A1"}'
    assert reused.startswith("422 None {")
    assert '"code":"KEY_REUSED"' in reused
    assert keyless.startswith("400 None {")


def test_the_celery_page_imports(tmp_path: Path) -> None:
    """Its worker is not started here (the page's broker is the machine's default queue)."""
    first_block("celery.md", tmp_path)

    assert run(tmp_path, "-c", "import tasks; print(tasks.refund.name)") == ["tasks.refund"]
