"""At most once: keys, fingerprints, the Redis key store, and the `WriteSafe` guard and decorator.

from idempotency import WriteSafe, WriteSafeError

ws = WriteSafe()

@ws.tool("submit_order", timeout=5.0)
async def submit_order(order: dict) -> dict: ...

await submit_order({"sku": "A1"}, idempotency_key="ord-7")

A plain `def` becomes a blocking `SyncTool` with the same guarantees; `ws.sync` is the blocking
face of `status`, `reconcile` and `resolve`.

Integrations: `FencedTransport` (or `fenced_client()`) fences every httpx request a guarded write
sends and forwards its key and fencing token; `idempotent_route` guards your FastAPI endpoints by
their `Idempotency-Key` header (`add_problem_handlers` answers FastAPI's own errors alike),
`idempotent_flask_view` and `idempotent_django_view` your Flask and Django views alike;
`idempotent_task` makes a Celery task's effect at most once per task id; `add_mcp_tool` serves a
tool to agents on an `MCPServer`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from idempotency._context import OperationContext, current_operation
from idempotency._errors import WriteSafeError
from idempotency._fence import LeaseLost
from idempotency._httpx import FencedTransport, SyncFencedTransport, fenced_client
from idempotency._keys import DEFAULT_SCOPE, MAX_KEY_LENGTH
from idempotency._settings import WriteSafeSettings
from idempotency._sync import SyncTool, SyncWriteSafe
from idempotency._tool import Invocation, Tool
from idempotency._writesafe import WriteSafe
from ledger import Status
from reconciler import (
    ErrorEnvelope,
    Found,
    LookupOperation,
    NotFound,
    OperationNotFound,
    OperationStatus,
    ReconcilerBusy,
    ReconcileReport,
    ResolutionRefused,
    ToolError,
    Unknown,
)

if TYPE_CHECKING:
    from idempotency._celery import idempotent_task
    from idempotency._django import idempotent_django_view
    from idempotency._fastapi import idempotent_route
    from idempotency._flask import idempotent_flask_view
    from idempotency._http import REPLAYED_HEADER
    from idempotency._http_errors import add_problem_handlers
    from idempotency._mcp import add_mcp_tool

# The integrations import their frameworks (FastAPI, the MCP SDK; Flask, Django, Celery are
# optional extras), which take most of a second: only on first use.
_INTEGRATIONS = {
    "REPLAYED_HEADER": "idempotency._http",
    "idempotent_route": "idempotency._fastapi",
    "add_problem_handlers": "idempotency._http_errors",
    "add_mcp_tool": "idempotency._mcp",
    "idempotent_flask_view": "idempotency._flask",  # extra: writesafe[flask]
    "idempotent_django_view": "idempotency._django",  # extra: writesafe[django]
    "idempotent_task": "idempotency._celery",  # extra: writesafe[celery]
}

__all__ = [
    "DEFAULT_SCOPE",
    "MAX_KEY_LENGTH",
    "REPLAYED_HEADER",
    "ErrorEnvelope",
    "FencedTransport",
    "Found",
    "Invocation",
    "LeaseLost",
    "LookupOperation",
    "NotFound",
    "OperationContext",
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
    "add_mcp_tool",
    "add_problem_handlers",
    "current_operation",
    "fenced_client",
    "idempotent_django_view",
    "idempotent_flask_view",
    "idempotent_route",
    "idempotent_task",
]


def __getattr__(name: str) -> Any:
    module = _INTEGRATIONS.get(name)
    if module is None:
        raise AttributeError(f"module 'idempotency' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
