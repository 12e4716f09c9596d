"""Imports point downward only: writesafe/ (the entry floor) → idempotency → reconciler → ledger.

Every module imports the packages by their installed names (`writesafe.ledger`, never bare `ledger`:
other distributions on PyPI own the bare names). The entry floor, `writesafe/` (the public face, the
CLI, the service and the framework integrations in `writesafe.contrib`), may import all three;
`idempotency` must not import the floor (the public face imports it: that would be a cycle). The
integrations run inside the user's app: they import the core, never the CLI or the service.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BARE = {"idempotency", "reconciler", "ledger"}
# layer -> what it must not import ("entry": writesafe itself, writesafe.cli, writesafe.service)
FORBIDDEN = {
    "ledger": {"idempotency", "reconciler", "entry"},
    "reconciler": {"idempotency", "entry"},
    "idempotency": {"entry"},
}
ENTRY_CLI, ENTRY_SERVICE = ["writesafe", "cli"], ["writesafe", "service"]
SKIPPED = {"build", "dist", "__pycache__", "node_modules"}  # and hidden ones: .git, .venv*


def python_files(directory: Path) -> list[Path]:
    """The .py files under `directory`; os.walk does not follow the links in writesafe/ to the
    packages, so each module is read once, at its own path."""
    found = []
    for base, dirnames, filenames in os.walk(directory):
        here = Path(base)
        dirnames[:] = [
            d
            for d in dirnames
            if d not in SKIPPED and not d.startswith(".") and not d.endswith(".egg-info")
        ]
        found.extend(here / f for f in filenames if f.endswith(".py"))
    return sorted(found)


def imported_modules(path: Path) -> set[str]:
    """Absolute module names `path` imports, with `importlib.import_module("…")` strings."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "writesafe":
                names.update(f"writesafe.{a.name}" for a in node.names if a.name in BARE)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func).endswith("import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "writesafe":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in BARE else "entry"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_downward(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if layer(m) in FORBIDDEN[package]
        )
        for path in python_files(ROOT / package)
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_the_integrations_import_neither_the_cli_nor_the_service() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if m.split(".")[:2] in (ENTRY_CLI, ENTRY_SERVICE)
        )
        for path in python_files(ROOT / "writesafe" / "contrib")
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_nothing_imports_a_bare_package_name() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if m.split(".")[0] in BARE
        )
        for path in python_files(ROOT)
    }
    assert {path: found for path, found in offenders.items() if found} == {}


def test_the_checker_sees_upward_and_bare_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from writesafe import WriteSafe\n"
        "import writesafe.cli\n"
        "from writesafe.reconciler import ToolError\n"
        "from ledger import Status\n"
        "importlib.import_module('idempotency._fastapi')\n"
    )
    found = imported_modules(module)
    assert found == {
        "writesafe",
        "writesafe.cli",
        "writesafe.reconciler",
        "ledger",
        "idempotency._fastapi",
    }
    assert {layer(m) for m in found} == {"entry", "reconciler", None}
