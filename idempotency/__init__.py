"""At most once: keys, fingerprints, the Redis key store, and the `WriteSafe` guard and decorator.

from writesafe import WriteSafe, WriteSafeError

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

from writesafe.idempotency._context import (
    NoCurrentOperation,
    OperationContext,
    current_operation,
)
from writesafe.idempotency._errors import WriteSafeError
from writesafe.idempotency._fence import LeaseLost
from writesafe.idempotency._httpx import FencedTransport, SyncFencedTransport, fenced_client
from writesafe.idempotency._keys import DEFAULT_SCOPE, MAX_KEY_LENGTH
from writesafe.idempotency._logging import OperationFilter, configure_logging
from writesafe.idempotency._settings import WriteSafeSettings
from writesafe.idempotency._sync import SyncTool, SyncWriteSafe
from writesafe.idempotency._tool import Invocation, Tool
from writesafe.idempotency._tracing import (
    inject_trace_context,
    instrument_tracing,
    uninstrument_tracing,
)
from writesafe.idempotency._writesafe import WriteSafe
from writesafe.ledger import Status
from writesafe.reconciler import (
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
    from writesafe.idempotency._celery import idempotent_task
    from writesafe.idempotency._django import IdempotencyMiddleware, idempotent_django_view
    from writesafe.idempotency._fastapi import idempotent_route
    from writesafe.idempotency._flask import idempotent_flask_view
    from writesafe.idempotency._http import REPLAYED_HEADER
    from writesafe.idempotency._http_errors import add_problem_handlers
    from writesafe.idempotency._mcp import add_mcp_tool

# The integrations import their frameworks (FastAPI, the MCP SDK; Flask, Django, Celery are
# optional extras), which take most of a second: only on first use.
_INTEGRATIONS = {
    "REPLAYED_HEADER": "writesafe.idempotency._http",
    "idempotent_route": "writesafe.idempotency._fastapi",
    "add_problem_handlers": "writesafe.idempotency._http_errors",
    "add_mcp_tool": "writesafe.idempotency._mcp",
    "idempotent_flask_view": "writesafe.idempotency._flask",  # extra: writesafe[flask]
    "idempotent_django_view": "writesafe.idempotency._django",  # extra: writesafe[django]
    "IdempotencyMiddleware": "writesafe.idempotency._django",
    "idempotent_task": "writesafe.idempotency._celery",  # extra: writesafe[celery]
}

__all__ = [
    "DEFAULT_SCOPE",
    "MAX_KEY_LENGTH",
    "REPLAYED_HEADER",
    "ErrorEnvelope",
    "FencedTransport",
    "Found",
    "IdempotencyMiddleware",
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
    "add_mcp_tool",
    "add_problem_handlers",
    "configure_logging",
    "current_operation",
    "fenced_client",
    "idempotent_django_view",
    "idempotent_flask_view",
    "idempotent_route",
    "idempotent_task",
    "inject_trace_context",
    "instrument_tracing",
    "uninstrument_tracing",
]


def __getattr__(name: str) -> Any:
    module = _INTEGRATIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
