"""Every problem the service answers carries a `code`, and its OpenAPI says so.

Regression: a plain problem took its `code` from the service's table only, so a status outside it
(anything Starlette raises besides 404, 405, 409, 413, 500) had none, and the documented schema
allowed that.
"""

from __future__ import annotations

import json

import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request

from writesafe import WriteSafe
from writesafe.service import create_app
from writesafe.service._problems import SERVICE_CODES, http_error

REQUEST = Request({"type": "http", "method": "GET", "path": "/", "headers": []})


@pytest.mark.parametrize(
    ("status", "code"),
    [*SERVICE_CODES.items(), (406, "NOT_ACCEPTABLE"), (415, "UNSUPPORTED_MEDIA_TYPE")],
)
async def test_a_plain_problem_always_has_a_code(status: int, code: str) -> None:
    response = await http_error(REQUEST, HTTPException(status))
    body = json.loads(bytes(response.body))
    assert (response.status_code, body["type"], body["code"]) == (status, "about:blank", code)


def test_every_documented_problem_requires_a_code() -> None:
    document = create_app(WriteSafe()).openapi()
    schemas = document["components"]["schemas"]
    problems = {
        content["schema"]["$ref"].rsplit("/", 1)[1]
        for path in document["paths"].values()
        for operation in path.values()
        for status, response in operation["responses"].items()
        if int(status) >= 400
        for content in response["content"].values()
    }
    assert problems == {"ProblemDetails", "EnvelopeProblem", "ExpiredProblem"}
    for name in problems:
        assert "code" in schemas[name]["required"], name
    assert "expired_at" in schemas["ExpiredProblem"]["required"]
