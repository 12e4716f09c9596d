"""The distribution's package list and mapping match the tree, so no new package is left out of
the wheel (idempotency/, reconciler/, ledger/ install as writesafe.idempotency, … by a mapping),
and a user's code type-checks under `mypy --strict` as the docs write it."""

from __future__ import annotations

import os
import subprocess
import sys
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


# What a user writes, as the docs write it. The `type: ignore` is part of the check: under
# --strict an unused ignore is an error, so the line proves `.key` is a `str`, neither `Any` (an
# untyped decorator or package) nor `str | None` (which would be a union-attr error instead).
USER_SNIPPET = """
from typing import Any

import writesafe
from writesafe import WriteSafe

ws = WriteSafe()


@ws.tool("submit_order", timeout=5.0)
async def submit_order(order: dict[str, Any]) -> dict[str, Any]:
    operation = ws.current_operation()
    operation.fence()  # immediately before the send
    reference: str = operation.key
    writesafe.current_operation().fence()
    wrong: int = ws.current_operation().key  # type: ignore[assignment]
    return {"reference": reference, **order}


async def main() -> str:
    placed = await submit_order({"sku": "A1"}, idempotency_key="ord-7")
    reference: str = placed["reference"]
    return reference
"""


def test_a_user_snippet_passes_strict_mypy(tmp_path: Path) -> None:
    snippet = tmp_path / "user_code.py"
    snippet.write_text(USER_SNIPPET)
    # The editable install's import hook is invisible to mypy; MYPYPATH points it at the tree,
    # whose writesafe/ links the three packages exactly as the wheel lays them out.
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    cache = ROOT / ".mypy_cache" / "user-snippet"
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
    done = subprocess.run(
        [*command, "--cache-dir", str(cache), str(snippet)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
