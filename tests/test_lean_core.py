"""A lean core: without any extra the guard, the ledger and the CLI work (the demo runs), and each
integration, imported without its extra, says in one line which extra to install.

Each check runs in a fresh interpreter whose imports of the extras' packages fail as if they
were not installed (`BLOCK`), which is what `pip install writesafe` leaves.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The top-level modules each extra brings (and the core must not need).
EXTRAS = {
    "fastapi": ["fastapi", "starlette"],
    "service": ["uvicorn", "prometheus_client", "jinja2", "limits", "multipart", "cryptography"],
    "mcp": ["mcp"],
    "django": ["django"],
    "flask": ["flask", "werkzeug"],
    "celery": ["celery", "kombu"],
    "otel": ["opentelemetry"],
}
BLOCKED = sorted(module for modules in EXTRAS.values() for module in modules)

BLOCK = f"""
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def without_extras(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a new interpreter where no extra is installed."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_demo_runs_on_the_core_alone() -> None:
    ran = without_extras(
        "from writesafe.cli import main; sys.argv = ['writesafe', 'demo', '--json']; main()"
    )
    assert ran.returncode == 0, ran.stderr
    story = json.loads(ran.stdout)
    assert sorted(story["shop_orders"]) == ["ord-1", "ord-2", "ord-3", "ord-5"]  # one per key
    assert {operation["status"] for operation in story["operations"]} >= {"succeeded"}


@pytest.mark.parametrize(
    ("module", "extra"),
    [
        ("writesafe.contrib.fastapi", "fastapi"),
        ("writesafe.contrib.flask", "flask"),
        ("writesafe.contrib.django", "django"),
        ("writesafe.contrib.celery", "celery"),
        ("writesafe.contrib.mcp", "mcp"),
        ("writesafe.service", "service"),
    ],
)
def test_an_integration_without_its_extra_says_which_to_install(module: str, extra: str) -> None:
    ran = without_extras(
        f"""
        try:
            import {module}
        except ModuleNotFoundError as error:
            print(type(error).__name__, error, sep="\\n")
        """
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [
        "MissingExtra",
        f"{module} needs the {extra!r} extra: pip install 'writesafe[{extra}]'",
    ]


def test_serve_without_the_service_extra_is_one_line_and_exit_2() -> None:
    ran = without_extras(
        "from writesafe.cli import main; sys.argv = ['writesafe', 'serve', 'app:ws']; main()"
    )
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        "error: writesafe serve needs the 'service' extra: pip install 'writesafe[service]'"
    ]


def test_dev_brings_every_extra_and_the_core_none() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional: dict[str, list[str]] = project["optional-dependencies"]
    assert set(optional) - {"dev", "bench"} == set(EXTRAS)
    assert optional["dev"][0] == f"writesafe[{','.join(EXTRAS)}]"
    core = {re.split(r"[\[<>=]", requirement)[0] for requirement in project["dependencies"]}
    brought = {re.split(r"[\[<>=]", r)[0] for e in EXTRAS for r in optional[e]} - {"writesafe"}
    assert core & brought == set()
