"""The public face: `writesafe.__all__` is pinned, every name in it resolves, nothing leaks.

Like httpx's `test_exported_members`: adding or removing a public name is a deliberate change of
this list, never a side effect of an import.
"""

from __future__ import annotations

import subprocess
import sys
from types import ModuleType

import pytest

import writesafe

EXPORTED = [
    "DEFAULT_SCOPE",
    "MAX_KEY_LENGTH",
    "ErrorEnvelope",
    "FencedTransport",
    "Found",
    "Invocation",
    "LeaseLost",
    "LookupOperation",
    "NoCurrentOperation",
    "NotFound",
    "OperationContext",
    "OperationFilter",
    "OperationNotFound",
    "OperationStatus",
    "ReconcileReport",
    "ReconcilerBusy",
    "ResolutionRefused",
    "Status",
    "SyncFencedTransport",
    "SyncTool",
    "SyncWriteSafe",
    "Tool",
    "ToolError",
    "Unknown",
    "WriteSafe",
    "WriteSafeError",
    "WriteSafeSettings",
    "configure_logging",
    "current_operation",
    "fenced_client",
    "inject_trace_context",
    "instrument_tracing",
    "uninstrument_tracing",
]


def test_exported_members() -> None:
    assert writesafe.__all__ == EXPORTED
    for name in EXPORTED:
        assert getattr(writesafe, name) is not None, name


def test_nothing_public_is_left_out_of_all() -> None:
    defined_here = {
        name
        for name, value in vars(writesafe).items()
        if not name.startswith("_")
        and not isinstance(value, ModuleType)
        and str(getattr(value, "__module__", "")).startswith("writesafe")
    }
    assert defined_here - set(EXPORTED) == set()


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from writesafe import *", namespace)
    assert sorted(set(namespace) - {"__builtins__"}) == sorted(EXPORTED)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(ImportError, match="no_such_name"):
        exec("from writesafe import no_such_name", {})


def test_the_integrations_load_on_first_use() -> None:
    # Nor do redis-py (only with a Redis URL) and the MCP wire types (only for MCP renderings):
    # each takes about half a second, in every worker and CLI process.
    code = (
        "import sys, writesafe; "
        "loaded = {'fastapi', 'mcp', 'mcp_types', 'redis'} & set(sys.modules); "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
