"""OpenAPI details FastAPI does not produce by itself: errors documented as problem+json."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI

from reconciler import PROBLEM_MEDIA_TYPE
from reconciler.service._problems import ENVELOPE_STATUSES, EnvelopeProblem, ProblemDetails

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

_DESCRIPTIONS = {
    401: "No API key, or one that is unknown or revoked (AUTH_REQUIRED).",
    403: "The API key's role does not allow this (ACCESS_DENIED).",
    404: "No operation under that key in the API key's scope.",
    409: "The operation is not in a state this action applies to.",
    413: "The request body is larger than the service accepts.",
    422: "The request is malformed or does not match the schema (INPUT_INVALID).",
    503: "The ledger or Redis did not answer; nothing was changed (TEMP_UNAVAILABLE).",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries documenting each status as a problem."""
    return {
        status: {
            "model": EnvelopeProblem if status in ENVELOPE_STATUSES else ProblemDetails,
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
