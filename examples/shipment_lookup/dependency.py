"""The delivery-status dependency, scripted per execution, speaking its own JSON error codes.

`GET /shipments/{ref}` with a bearer token. Each request consumes the next scripted behaviour:
"OK" (behave normally: check the token, then the reference), "TEMP_UNAVAILABLE",
"ACCESS_DENIED", or a literal `{code, message}` body. A request beyond the script is answered
with SCRIPT_EXHAUSTED, so an execution the recording does not allow shows up in the trace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

VALID_TOKEN = "token-valid"
EXPIRED_TOKEN = "token-expired"
EXECUTION_HEADER = "X-Execution"

_REFERENCE = re.compile(r"^SHIP-\d{3}$")
_SHIPMENTS = {"SHIP-104": "in_transit"}


@dataclass(frozen=True, slots=True)
class Request:
    """What the dependency received: the only source of a trace's input and auth columns."""

    execution: int
    shipment_ref: str
    auth_ok: bool


class ShipmentService:
    """One scripted run of the dependency; `requests` logs every request it answered."""

    def __init__(self, script: Sequence[str | Mapping[str, Any]]) -> None:
        self._script = list(script)
        self.requests: list[Request] = []

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        reference = request.url.path.rsplit("/", 1)[-1]
        auth_ok = request.headers.get("Authorization") == f"Bearer {VALID_TOKEN}"
        execution = int(request.headers.get(EXECUTION_HEADER, "0"))
        self.requests.append(Request(execution, reference, auth_ok))
        turn = len(self.requests) - 1
        behaviour = self._script[turn] if turn < len(self._script) else "SCRIPT_EXHAUSTED"
        if behaviour == "OK":
            return _normal(reference, auth_ok)
        if isinstance(behaviour, Mapping):
            return httpx.Response(500, json=dict(behaviour))
        status = {"TEMP_UNAVAILABLE": 503, "ACCESS_DENIED": 403}.get(behaviour, 500)
        return httpx.Response(status, json={"code": behaviour, "message": behaviour.lower()})


def _normal(reference: str, auth_ok: bool) -> httpx.Response:
    if not auth_ok:
        return httpx.Response(401, json={"code": "AUTH_REQUIRED", "message": "token expired"})
    if not _REFERENCE.match(reference):
        body = {"code": "INVALID_ARGUMENT", "message": "expected SHIP-nnn", "field": "ref"}
        return httpx.Response(400, json=body)
    if reference not in _SHIPMENTS:
        return httpx.Response(404, json={"code": "NOT_FOUND", "message": "no such shipment"})
    return httpx.Response(200, json={"shipment_ref": reference, "status": _SHIPMENTS[reference]})
