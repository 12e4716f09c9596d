"""FastAPI's HTTP errors of guarded endpoints: an endpoint's own refusals in, problem+json out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from writesafe.contrib._http import Refusal, problem
from writesafe.contrib._route_openapi import document_problems
from writesafe.idempotency._errors import WriteSafeError, invalid_input
from writesafe.reconciler import ErrorEnvelope


def http_exception_refusal(error: BaseException) -> Refusal | None:
    """An endpoint's `HTTPException`, as the refusal it says (see `RefusalAdapter`)."""
    if not isinstance(error, HTTPException):
        return None
    detail = error.detail if isinstance(error.detail, str) else None
    return Refusal(error.status_code, detail, (error.headers or {}).get("Retry-After"))


def problem_response(envelope: ErrorEnvelope, *, status: int | None = None) -> JSONResponse:
    """The envelope as problem+json (see `_http.problem`)."""
    rendered = problem(envelope, status=status)
    return JSONResponse(rendered.body, rendered.status, headers=rendered.headers)


def add_problem_handlers(app: FastAPI) -> None:
    """Answer FastAPI's request validation errors and any `WriteSafeError` an endpoint lets
    through as problem+json carrying the envelope, like the guarded routes' own failures; the
    app's OpenAPI then documents them so (`document_problems`)."""
    app.add_exception_handler(RequestValidationError, _validation_problem)
    app.add_exception_handler(WriteSafeError, _writesafe_problem)
    document_problems(app)


async def _validation_problem(_request: Request, error: Exception) -> JSONResponse:
    """Malformed JSON is a 400 (the request cannot be read), a schema violation a 422."""
    assert isinstance(error, RequestValidationError)
    first: Mapping[str, Any] = error.errors()[0] if error.errors() else {}
    if first.get("type") == "json_invalid":
        return problem_response(
            invalid_input("body", "the body is not valid JSON").envelope, status=400
        )
    location = [str(part) for part in first.get("loc", ())]
    field = ".".join(location[1:] if location[:1] == ["body"] else location) or "body"
    message = f"{field}: {first.get('msg', 'invalid')}"
    return problem_response(invalid_input(field, message).envelope)


async def _writesafe_problem(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, WriteSafeError)
    return problem_response(error.envelope)
