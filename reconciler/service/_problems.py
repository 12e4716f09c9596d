"""Every error the service answers is RFC 9457 problem+json, whatever raised it.

Starlette and FastAPI answer their own errors (404, 405, validation) in plain JSON; the handlers
here re-render them, so a client parses one error shape from every endpoint and status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

PROBLEM_JSON = "application/problem+json"


class InvalidParam(BaseModel):
    """One reason a request was refused: which part of it, and why."""

    location: str = Field(description="body, query, path or header")
    pointer: str = Field(description="JSON Pointer into the body, or the parameter's name")
    detail: str


class Problem(BaseModel):
    """An RFC 9457 problem; members beyond these are extensions (e.g. the error envelope)."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str
    status: int = Field(ge=400, le=599)
    detail: str | None = None
    instance: str | None = None
    errors: list[InvalidParam] | None = None


def problem_response(
    status: int,
    detail: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    errors: Sequence[InvalidParam] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> JSONResponse:
    """A plain problem: `about:blank` with the status phrase as title (RFC 9457 §4.2.1)."""
    problem = Problem(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        errors=list(errors) if errors is not None else None,
        **(extensions or {}),
    )
    return JSONResponse(
        problem.model_dump(mode="json", exclude_none=True),
        status_code=status,
        headers=dict(headers or {}),
        media_type=PROBLEM_JSON,
    )


async def http_error(_request: Request, error: Exception) -> JSONResponse:
    """Starlette/FastAPI HTTP errors (404, 405 with its Allow header, 401, 403, 413…)."""
    assert isinstance(error, HTTPException)
    detail = error.detail if error.detail != HTTPStatus(error.status_code).phrase else None
    return problem_response(error.status_code, detail, headers=error.headers)


async def validation_error(_request: Request, error: Exception) -> JSONResponse:
    """Malformed JSON is a 400; a well-formed request that breaks the schema is a 422."""
    assert isinstance(error, RequestValidationError)
    issues = [_issue(e) for e in error.errors()]
    if any(e.get("type") == "json_invalid" for e in error.errors()):
        return problem_response(400, "the request body is not valid JSON", errors=issues)
    return problem_response(422, "the request does not match the schema", errors=issues)


def _issue(error: Mapping[str, Any]) -> InvalidParam:
    location, *path = (str(part) for part in error.get("loc", ()))
    if location == "body":
        pointer = "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in path)
    else:
        pointer = ".".join(path)
    return InvalidParam(location=location, pointer=pointer, detail=str(error.get("msg", "")))
