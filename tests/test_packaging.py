"""The distribution's package list and mapping match the tree, so no new package is left out of
the wheel (idempotency/, reconciler/, ledger/ install as writesafe.idempotency, … by a mapping)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {
    "writesafe": "writesafe",
    **{f"writesafe.{p}": p for p in ("idempotency", "reconciler", "ledger")},
}


def packages_in_tree() -> set[str]:
    found = set()
    for name, directory in MAPPED.items():
        for base, dirnames, _ in os.walk(ROOT / directory):
            here = Path(base)
            dirnames[:] = [
                d for d in dirnames if d != "__pycache__" and not (here / d).is_symlink()
            ]
            if (here / "__init__.py").exists():
                found.add(".".join([name, *here.relative_to(ROOT / directory).parts]))
    return found


def test_every_package_in_the_tree_is_listed_and_mapped() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == MAPPED
    assert set(setuptools["packages"]) == packages_in_tree()


def test_the_package_is_typed() -> None:
    assert (ROOT / "writesafe" / "py.typed").exists()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in data["package-data"]["writesafe"]
