"""Imports point downward only: idempotency → reconciler → ledger."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Entry packages may import upward: they load the user's WriteSafe.
ENTRY_PACKAGES = ("reconciler/cli", "reconciler/service")
FORBIDDEN = {"ledger": {"idempotency", "reconciler"}, "reconciler": {"idempotency"}}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules(package: str) -> list[Path]:
    return [
        path
        for path in sorted((ROOT / package).rglob("*.py"))
        if not str(path.relative_to(ROOT)).startswith(ENTRY_PACKAGES)
    ]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_downward(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in modules(package)
        if imported_packages(path) & FORBIDDEN[package]
    }
    assert offenders == {}


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from idempotency import WriteSafe\nimport reconciler.cli\n")
    assert imported_packages(module) == {"idempotency", "reconciler"}
