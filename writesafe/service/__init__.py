"""The writesafe HTTP service: operation status, listing, attempts, reconciliation, resolution.

This package is an entry point: it may import `idempotency`, which the rest of `reconciler` must
not. `create_app(ws)` builds the FastAPI application; `writesafe serve module:ws` runs it.
"""

from writesafe._extras import MissingExtra

try:
    from writesafe.service._api_keys import MAX_TOKEN_LENGTH, create_api_key, hash_token
    from writesafe.service._apidoc import render_markdown
    from writesafe.service._app import VERSION, create_app
    from writesafe.service._auth import Principal
    from writesafe.service._problems import EnvelopeProblem, ProblemDetails
    from writesafe.service._settings import ServiceSettings
except ModuleNotFoundError as missing:  # FastAPI, Jinja2, limits, ...: the `service` extra
    raise MissingExtra(__name__, "service", missing) from missing

__all__ = [
    "MAX_TOKEN_LENGTH",
    "VERSION",
    "EnvelopeProblem",
    "Principal",
    "ProblemDetails",
    "ServiceSettings",
    "create_api_key",
    "create_app",
    "hash_token",
    "render_markdown",
]
