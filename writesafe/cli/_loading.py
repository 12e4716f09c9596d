"""Loading the user's `WriteSafe` from a `module:attribute` path, the way uvicorn loads apps."""

from __future__ import annotations

import importlib
import os
import sys

import typer
from rich.console import Console
from rich.markup import escape

from writesafe.cli._exit import ExitCode
from writesafe.idempotency import SettingsRefused, WriteSafe
from writesafe.ledger import UnsupportedDatabase

err = Console(stderr=True)


def fail(message: str, code: ExitCode) -> typer.Exit:
    """Print `message` to stderr and return the exit to raise."""
    # One line, whatever the width: no wrapping, and brackets in the message are not markup.
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(int(code))


def import_object(path: str, example: str = "myapp.tools:ws") -> object:
    """Import `module:attribute` (the working directory is importable)."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise fail(f"expected module:attribute (e.g. {example}), got {path!r}", ExitCode.USAGE)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise fail(f"cannot import {module_name!r}: {error}", ExitCode.USAGE) from error
    except Exception as error:  # the user's module raised while importing: say so, briefly
        message = f"importing {module_name!r} failed: {type(error).__name__}: {error}"
        raise fail(message, ExitCode.USAGE) from error
    value: object = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise fail(f"{module_name!r} has no attribute {attribute!r}", ExitCode.USAGE)
        value = getattr(value, part)
    return value


def load_app(path: str) -> WriteSafe:
    """Import `module:attribute`; it must be a WriteSafe."""
    value = import_object(path)
    if not isinstance(value, WriteSafe):
        kind = type(value).__name__
        raise fail(f"{path} is a {kind}, not a writesafe.WriteSafe", ExitCode.USAGE)
    return value


def app_or_settings(app: str | None, database_url: str | None, schema: str | None) -> WriteSafe:
    """The named application, or a bare `WriteSafe` from the options and WRITESAFE_* variables."""
    if app is not None:
        return load_app(app)
    try:
        return WriteSafe(database_url, schema=schema, auto_migrate=False)
    except UnsupportedDatabase as error:  # a sync driver, an unknown scheme, a bad URL option
        option = "--" + error.setting.replace("_", "-")
        raise fail(f"{option}: {error}", ExitCode.USAGE) from error
    except SettingsRefused as refused:
        raise fail(str(refused), ExitCode.USAGE) from None
