"""What a team installs is what is tested: the wheel and the sdist, each installed in a fresh venv
outside the checkout, run the demo and serve the API and console; every file under writesafe/
ships; a user's code type-checks under `mypy --strict` from the README's install and the wheel."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.loopback import serving

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def shipped_tree() -> set[str]:
    """Every file of the distribution as the tree holds it: writesafe/ with the linked packages."""
    found = set()
    for base, dirnames, filenames in os.walk(ROOT / "writesafe", followlinks=True):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        here = Path(base).relative_to(ROOT)
        found.update((here / name).as_posix() for name in filenames)
    return found


@dataclass(frozen=True)
class Archives:
    wheel: Path
    sdist: Path


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Archives:
    """`python -m build`: the sdist, then the wheel built from that sdist (as an index would)."""
    out = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    return Archives(wheel=next(out.glob("*.whl")), sdist=next(out.glob("*.tar.gz")))


def test_every_file_under_writesafe_ships_in_the_wheel_and_the_sdist(archives: Archives) -> None:
    tree = shipped_tree()
    assert {"writesafe/py.typed", "writesafe/ledger/migrations/script.py.mako"} <= tree
    assert any(name.startswith("writesafe/service/templates/") for name in tree)
    with zipfile.ZipFile(archives.wheel) as wheel:
        in_wheel = {n for n in wheel.namelist() if not n.startswith("writesafe-0.1.0.dist-info/")}
    assert in_wheel == tree
    with tarfile.open(archives.sdist) as sdist:
        in_sdist = {m.name.split("/", 1)[1] for m in sdist.getmembers() if m.isfile()}
    assert tree <= in_sdist


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def installed(
    request: pytest.FixtureRequest, archives: Archives, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A fresh venv outside the checkout with the archive, its service extra (the test serves the
    console) and their dependencies (pip's cache makes that quick); the checkout's own pip installs
    into it. The core alone is tests/test_lean_core.py's."""
    venv = tmp_path_factory.mktemp(f"venv-{request.param}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    archive = getattr(archives, request.param)
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    install = [*pip, "install", "--quiet", f"{archive}[service]"]
    done = subprocess.run(install, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def outside_env() -> dict[str, str]:
    """This process's environment without what would put the checkout on the path."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}


def run_outside(venv: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """`command` from the venv's bin/, in `cwd`, with nothing of the checkout on the path."""
    return subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]],
        cwd=cwd,
        env=outside_env(),
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_installed_package_is_the_archive_and_runs_the_demo(
    installed: Path, tmp_path: Path
) -> None:
    where_from = "import writesafe; print(writesafe.__file__)"
    where = run_outside(installed, tmp_path, "python", "-c", where_from)
    assert Path(where.stdout.strip()).is_relative_to(installed), where
    demo = run_outside(installed, tmp_path, "writesafe", "demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr


APP = """
from writesafe import WriteSafe

ws = WriteSafe("sqlite+aiosqlite:///{db}")


@ws.tool("submit_order")
async def submit_order(order: dict[str, str]) -> dict[str, str]:
    return {{"order_id": "o-1"}}
"""


@pytest.fixture
def served(installed: Path, tmp_path: Path) -> Iterator[str]:
    """`writesafe serve shop:ws` from the venv on a free port, its app in a directory of its own."""
    (tmp_path / "shop.py").write_text(APP.format(db=tmp_path / "ledger.db"))
    command = [str(installed / "bin" / "writesafe"), "serve", "shop:ws"]
    with serving(command, cwd=tmp_path, env=outside_env()) as base:
        yield base


def test_the_installed_service_serves_the_console_and_its_openapi(served: str) -> None:
    console = httpx.get(f"{served}/console/", follow_redirects=True)
    assert console.status_code == 200, console.text
    assert "Operator console" in console.text  # the login template, from the package data
    stylesheet = httpx.get(f"{served}/console/static/console.css")
    assert stylesheet.status_code == 200
    assert stylesheet.text.strip()
    openapi = httpx.get(f"{served}/openapi.json")
    assert openapi.status_code == 200
    assert "/v1/operations" in openapi.json()["paths"]


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
    placed = await submit_order.key("ord-7")({"sku": "A1"})
    reference: str = placed["reference"]
    return reference
"""


# What a user gets wrong: each line is the one error mypy must report there (`# error: CODE`).
USER_MISTAKES = """
from writesafe import WriteSafe

ws = WriteSafe()


@ws.tool("submit_order")
async def submit_order(order: dict[str, str], quantity: int) -> dict[str, str]:
    return order


async def main() -> None:
    await submit_order.key("ord-7")({"sku": "A1"}, "two")  # error: arg-type
    await submit_order.key("ord-7", scop="tenant-a")({"sku": "A1"}, 2)  # error: call-arg
    await submit_order.key("ord-7")({"sku": "A1"})  # error: call-arg
    await submit_order({"sku": "A1"}, 2, idempotency_kay="ord-7")  # error: call-arg
"""


def strict_mypy(python: Path, module: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """`mypy --strict` on `module` as its own project, finding writesafe where `python` does:
    no MYPYPATH, no checkout on the path, so only an install mypy can follow passes."""
    env = {k: v for k, v in outside_env().items() if k != "MYPYPATH"}
    command = [sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python)]
    return subprocess.run(
        [*command, "--cache-dir", str(cache), str(module)],
        cwd=module.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_user_snippet_passes_strict_mypy_under_the_readme_install(tmp_path: Path) -> None:
    """The checkout's venv is the README's `pip install -e .`."""
    snippet = tmp_path / "user_code.py"
    snippet.write_text(USER_SNIPPET)
    # The checkout's cache is kept between runs: the packages it checks are at the same paths.
    done = strict_mypy(Path(sys.executable), snippet, ROOT / ".mypy_cache" / "user-snippet")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_payload_and_a_misspelt_option_are_type_errors(tmp_path: Path) -> None:
    snippet = tmp_path / "user_mistakes.py"
    snippet.write_text(USER_MISTAKES)
    done = strict_mypy(Path(sys.executable), snippet, ROOT / ".mypy_cache" / "user-snippet")
    expected = {
        (number, line.rsplit("# error: ", 1)[1])
        for number, line in enumerate(USER_MISTAKES.splitlines(), start=1)
        if "# error: " in line
    }
    reported = {
        (int(found[1]), found[2])
        for found in re.finditer(
            r"user_mistakes\.py:(\d+): error: .*\[([a-z-]+)\]$", done.stdout, re.M
        )
    }
    assert reported == expected, done.stdout + done.stderr


# The sdist's wheel holds the same files (the first test): mypy runs once, on the wheel's install.
@pytest.mark.parametrize("installed", ["wheel"], indirect=True)
def test_a_user_snippet_passes_strict_mypy_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    snippet = tmp_path / "user_code.py"
    snippet.write_text(USER_SNIPPET)
    done = strict_mypy(installed / "bin" / "python", snippet, tmp_path / ".mypy_cache")
    assert done.returncode == 0, done.stdout + done.stderr
