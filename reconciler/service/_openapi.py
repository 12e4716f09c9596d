"""OpenAPI details FastAPI does not produce by itself: errors documented as problem+json."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI

from reconciler.service._problems import PROBLEM_JSON, Problem

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
            "schema": {"type": "string"},
        }
    },
}

_DESCRIPTIONS = {
    400: "Malformed request (e.g. the body is not JSON, or a cursor this service did not make).",
    401: "No API key, or one that is unknown or revoked.",
    403: "The API key's role does not allow this.",
    404: "No operation under that key in the API key's scope.",
    409: "The operation is not in a state this action applies to.",
    413: "The request body is larger than the service accepts.",
    422: "The request does not match the schema.",
    503: "The ledger or Redis did not answer; nothing was changed.",
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` entries documenting each status as a problem."""
    return {
        status: {
            "model": Problem,
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
                            content[PROBLEM_JSON] = content.pop("application/json")
            self.openapi_schema = schema
        return self.openapi_schema
