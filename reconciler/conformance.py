"""The contract check's face: the judge of recorded scenarios, the published schema, the vectors.

`writesafe contract check|schema|vectors` uses it, and so may anyone who checks a backend/adapter
pair or writes a client in another language. The guard never does: it lives beside the contract,
not in it.
"""

from __future__ import annotations

from typing import Any

from writesafe.reconciler._evaluator import (
    CaseFile,
    Observed,
    PairReport,
    PairRun,
    Report,
    ScenarioRunner,
    evaluate,
)
from writesafe.reconciler._schema import envelope_json_schema

__all__ = [
    "CaseFile",
    "Observed",
    "PairReport",
    "PairRun",
    "Report",
    "ScenarioRunner",
    "conformance_vectors",
    "envelope_json_schema",
    "evaluate",
]


def conformance_vectors() -> dict[str, Any]:
    """The conformance vectors document (every built-in code in every rendering, and the
    fail-closed inputs). Its MCP renderings load `mcp_types` (about half a second): only here."""
    from writesafe.reconciler._vectors import vectors as document

    return document()
