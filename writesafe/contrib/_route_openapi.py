"""OpenAPI of guarded routes as they really answer: a required key header, errors as problems.

FastAPI documents a guarded route from its signature alone: the `Idempotency-Key` header optional
and `string | null` (the guard reads it itself, to answer 400 rather than FastAPI's 422), and every
error as FastAPI's `HTTPValidationError` in `application/json`. `document_problems` rewrites the
generated document: the header as the guard enforces it, and each status the guard answers
(400, 409, 422, 502, 503, 504) as `application/problem+json` with the problem's schema. The 422 of
every route becomes a problem too, since `add_problem_handlers` answers validation errors so.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from writesafe.idempotency._header import HEADER
from writesafe.idempotency._keys import MAX_KEY_LENGTH
from writesafe.reconciler import PROBLEM_MEDIA_TYPE, ProblemBody

GUARDED = "__writesafe_key_required__"
"""Set on a guarded endpoint: whether its route requires the header (see `idempotent_route`)."""

_COMPONENTS = "#/components/schemas/"

# One key character in each form: bare, a visible ASCII character; quoted (an RFC 8941
# sf-string), that or a space, `"` and `\` escaped. A key neither starts nor ends with a space
# and a bare one cannot start with `"`; `parse_idempotency_key` is the reference.
_VISIBLE = r"[!-~]"
_QUOTED_EDGE = r'(?:[!#-\[\]-~]|\\["\\])'
_QUOTED = r'(?:[ !#-\[\]-~]|\\["\\])'
KEY_PATTERN = (
    rf"^(?:[!#-~]{_VISIBLE}{{0,{MAX_KEY_LENGTH - 1}}}"
    rf'|"{_QUOTED_EDGE}(?:{_QUOTED}{{0,{MAX_KEY_LENGTH - 2}}}{_QUOTED_EDGE})?")$'
)
KEY_SCHEMA: dict[str, Any] = {"type": "string", "minLength": 1, "pattern": KEY_PATTERN}

_KEY_RESPONSES = {
    400: (
        "The `Idempotency-Key` header is missing, repeated or malformed, or the body is not valid "
        "JSON (INPUT_INVALID). Nothing ran."
    ),
    409: "A request with this key is still running; retry after `Retry-After` (IN_PROGRESS).",
    422: (
        "This key was used with another request (KEY_REUSED), or the request or the endpoint "
        "refused its input (INPUT_INVALID)."
    ),
    502: "The endpoint failed in a way it did not classify (UNKNOWN_ERROR).",
    503: (
        "The ledger could not be reached (TEMP_UNAVAILABLE) or the endpoint's retries ran out "
        "(RETRY_EXHAUSTED); nothing more will run for this request."
    ),
    504: (
        "The endpoint did not finish in time: its effect is unknown until reconciliation decides "
        "(OUTCOME_UNKNOWN). Retry the same key to learn the outcome."
    ),
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying the same key.",
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }
}
_VALIDATION = "The request does not match the schema (INPUT_INVALID)."
_MALFORMED_BODY = "The body is not valid JSON (INPUT_INVALID)."
_FASTAPI_ERRORS = ("HTTPValidationError", "ValidationError")


def document_problems(app: FastAPI) -> None:
    """Have `app.openapi()` describe the errors as they are answered (the FastAPI way to extend
    the document: replace the app's `openapi`, which caches what it returns)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            _rewrite(schema, app.routes)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _rewrite(schema: dict[str, Any], routes: list[Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    generated = ProblemBody.model_json_schema(
        by_alias=True, mode="serialization", ref_template=_COMPONENTS + "{model}"
    )
    components.update(generated.pop("$defs", {}))
    components[generated["title"]] = generated
    problem = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": _COMPONENTS + generated["title"]}}}
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        required: bool | None = getattr(route.endpoint, GUARDED, None)
        for method in route.methods or ():
            operation = schema["paths"].get(route.path_format, {}).get(method.lower())
            if operation is not None:
                _rewrite_operation(operation, problem, required)
    # FastAPI's validation error schemas stay only if a route of the user's still names them.
    removed = {name: components.pop(name) for name in _FASTAPI_ERRORS if name in components}
    if f'"{_COMPONENTS}{_FASTAPI_ERRORS[0]}"' in json.dumps(schema):
        components.update(removed)


def _rewrite_operation(
    operation: dict[str, Any], problem: dict[str, Any], required: bool | None
) -> None:
    """`required` is None for a route the guard does not run on."""
    responses: dict[str, Any] = operation.setdefault("responses", {})
    documented: dict[int, str] = {}
    if "422" in responses:
        documented[422] = _VALIDATION
    if "requestBody" in operation:
        documented[400] = _MALFORMED_BODY
    if required is not None:
        documented |= _KEY_RESPONSES
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "header" and parameter["name"] == HEADER:
                parameter["required"] = required
                parameter["schema"] = KEY_SCHEMA
    for status, description in sorted(documented.items()):
        existing = responses.get(str(status))
        if existing is None or _FASTAPI_ERRORS[0] in json.dumps(existing):
            existing = responses[str(status)] = {"description": description}
        existing.setdefault("content", {}).update(problem)  # beside what the endpoint answers
        if status in (409, 503):
            existing.setdefault("headers", {}).update(_RETRY_AFTER)
    operation["responses"] = dict(sorted(responses.items()))
