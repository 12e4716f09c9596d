"""OpenAPI details FastAPI does not produce by itself: errors documented as problem+json."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI

from writesafe.reconciler import PROBLEM_MEDIA_TYPE
from writesafe.service._problems import (
    ENVELOPE_STATUSES,
    EnvelopeProblem,
    ExpiredProblem,
    ProblemDetails,
)

OVERVIEW = """\
What happened to write-safe operations, by key; listings by status, tool and age; reconciliation
on demand; and operator resolution of what reconciliation could not decide.

**Authentication.** Every endpoint except `/healthz`, `/readyz` and this document needs
`Authorization: Bearer <API key>`. Keys are made with
`writesafe keys create --scope S --role reader|operator|admin --name N`; the service stores only
their SHA-256. A key sees only its own scope: another scope's operation answers 404 exactly like a
missing one (and so does a key another scope's retention pruned). `reader` keys read; `operator`
keys also resolve operations and run `POST /v1/reconcile` over their scope; `admin` keys also act
deployment-wide: their reconciliation pass spans every scope, and only they read `/metrics`.

**Errors** are `application/problem+json` (RFC 9457). 401 (`AUTH_REQUIRED`), 403
(`ACCESS_DENIED`), 422 (`INPUT_INVALID`: malformed JSON, schema violations, unknown body fields or
query parameters, each listed in `errors`), 429 (`RATE_LIMITED`, with `Retry-After`) and 503
(`TEMP_UNAVAILABLE`, with `Retry-After`) carry the `writesafe.error/1` envelope as extension
members: branch on `code`. 404, 405 (with `Allow`), 409, 410 and 413 are plain problems with a
`code` of the service's own: `NOT_FOUND`, `METHOD_NOT_ALLOWED`, `CONFLICT`, `EXPIRED` (the key's
operation was pruned after the retention period, at `expired_at`), `BODY_TOO_LARGE`.

**Limits.** Request bodies up to 64 KiB (`WRITESAFE_SERVICE_MAX_BODY_BYTES`), else 413;
idempotency keys up to 255 characters; API keys up to 128 characters. Requests per API key
(default 100/s) and, without a valid key, per client address (`/readyz` and unknown keys; default
20/s) are rate-limited: `WRITESAFE_SERVICE_RATE_LIMIT_PER_KEY`, `…_RATE_LIMIT_ANONYMOUS`.

**Pagination.** `GET /v1/operations` is keyset-paginated on `(updated_at, id)`, oldest change
first: pass `next_cursor` back as `cursor` until it is null. A page stays correct while rows are
added; an operation that changes meanwhile moves to the end. Cursors are sealed: opaque, and
valid only for the scope of the key that got them (an edited or foreign cursor is a 422).
"""

_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "The Bearer challenge (RFC 6750).",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    503: {
        "Retry-After": {
            "description": "Seconds to wait before trying again.",
            "schema": {"type": "string", "pattern": "^[0-9]+$"},
        }
    },
}
_HEADERS[429] = _HEADERS[503]

_DESCRIPTIONS = {
    401: "No API key, or one that is unknown or revoked (AUTH_REQUIRED).",
    403: "The API key's role does not allow this (ACCESS_DENIED).",
    404: (
        "No operation under that key in the API key's scope: never used, or pruned so long ago "
        "that its tombstone is gone too (WRITESAFE_TOMBSTONE_RETENTION)."
    ),
    409: "The operation is not in a state this action applies to.",
    410: (
        "The key's operation finished and was pruned after the retention period, at "
        "`expired_at` (EXPIRED): a new call with the key is a new operation."
    ),
    413: "The request body is larger than the service accepts.",
    422: "The request is malformed or does not match the schema (INPUT_INVALID).",
    429: "Over the rate limit of the API key or client; wait `Retry-After` (RATE_LIMITED).",
    503: "The ledger or Redis did not answer; nothing was changed (TEMP_UNAVAILABLE).",
}


_MODELS = {**dict.fromkeys(ENVELOPE_STATUSES, EnvelopeProblem), 410: ExpiredProblem}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries documenting each status as a problem."""
    return {
        status: {
            "model": _MODELS.get(status, ProblemDetails),
            "description": _DESCRIPTIONS.get(status, HTTPStatus(status).phrase),
            **({"headers": _HEADERS[status]} if status in _HEADERS else {}),
        }
        for status in statuses
    }


class ServiceApp(FastAPI):
    """FastAPI documents every `model` response as application/json; errors here are problems."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            schema = super().openapi()
            for path in schema["paths"].values():
                for operation in path.values():
                    for status, response in operation.get("responses", {}).items():
                        content = response.get("content", {})
                        if int(status) >= 400 and "application/json" in content:
                            content[PROBLEM_MEDIA_TYPE] = content.pop("application/json")
            self.openapi_schema = schema
        return self.openapi_schema
