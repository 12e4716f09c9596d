"""docs/api.md is generated from the OpenAPI document and must be current."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "api_docs.py"


def test_the_committed_api_reference_is_current() -> None:
    script = runpy.run_path(str(SCRIPT))
    target: Path = script["TARGET"]
    assert target.read_text() == script["current"](), (
        "docs/api.md is stale: run `python scripts/api_docs.py`"
    )


def test_the_reference_covers_every_operation_and_error_shape() -> None:
    text = (SCRIPT.parents[1] / "docs" / "api.md").read_text()
    for heading in (
        "### GET /v1/operations/{key}",
        "### GET /v1/operations/{key}/attempts",
        "### GET /v1/operations\n",
        "### POST /v1/operations/{key}/resolve",
        "### POST /v1/reconcile",
        "### GET /healthz",
        "### GET /readyz",
        "### GET /metrics",
        "### EnvelopeProblem",
        "### ProblemDetails",
        "### ErrorEnvelope",
    ):
        assert heading in text, heading
