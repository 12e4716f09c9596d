"""Reading an envelope someone else produced (a downstream, a rendering): trusted only if valid.

An envelope-shaped answer is accepted only when it validates and means what its code's verdict
says (`disagreement`). Anything else fails closed to UNKNOWN_ERROR whose `cause` is the exact
reason (`Untrusted`), with the raw answer kept as bounded evidence: a downstream cannot talk
writesafe into retrying, or into believing nothing happened.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from writesafe.reconciler._admission import disagreement, untrusted
from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._classify import Classification
from writesafe.reconciler._contract import CODES, CodeRegistry, ErrorEnvelope
from writesafe.reconciler._evidence import excerpt

PARSE_LIMIT = 1 << 20
"""Bytes of a body parsed as JSON at most; a larger body is evidence, not data."""


class Malformed(ValueError):
    """A body or envelope that cannot be trusted; the message says why (no raw content)."""

    def __init__(self, reason: Untrusted, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def parse_json(body: bytes | str, limit: int = PARSE_LIMIT) -> Any:
    """JSON of a body no larger than `limit` bytes; `Malformed` otherwise."""
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8", "replace"))
    if size > limit:
        raise Malformed(
            Untrusted.TOO_LARGE, f"body of {size} bytes exceeds the {limit}-byte parse limit"
        )
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:
        raise Malformed(Untrusted.NOT_JSON, f"body is not JSON: {type(error).__name__}") from None


def read_envelope(data: object, codes: CodeRegistry = CODES) -> Classification:
    """Accept `data` (JSON text or a decoded object) as an envelope, or fail closed."""
    try:
        envelope = parse_envelope(data, codes)
    except Malformed as error:
        return malformed(error, data, codes)
    return Classification(envelope, {"envelope": envelope.to_json_dict()})


def parse_envelope(data: object, codes: CodeRegistry) -> ErrorEnvelope:
    """The envelope in `data` if it validates and agrees with its verdict; `Malformed` if not."""
    if isinstance(data, bytes | str):
        data = parse_json(data)
    if not isinstance(data, dict):
        raise Malformed(
            Untrusted.NOT_AN_OBJECT, f"an envelope is a JSON object, not {type(data).__name__}"
        )
    try:
        envelope = ErrorEnvelope.model_validate(data)
    except (ValidationError, RecursionError) as error:
        raise Malformed(
            Untrusted.INVALID_ENVELOPE, f"invalid envelope: {_first_error(error)}"
        ) from None
    reason = disagreement(envelope, codes, proven=False)
    if reason is not None:
        raise Malformed(reason, f"{envelope.code} does not mean what it says: {reason.value}")
    return envelope


def malformed(error: Malformed, raw: object, codes: CodeRegistry) -> Classification:
    """UNKNOWN_ERROR for an answer that could not be trusted, keeping a bounded excerpt of it."""
    return untrusted(error.reason, str(error), {"raw": excerpt(_text(raw))}, codes)


def _first_error(error: ValidationError | RecursionError) -> str:
    if isinstance(error, RecursionError):
        return "nested too deeply"
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "envelope"
    return f"{where}: {first['type']}"


def _text(raw: object) -> bytes | str:
    if isinstance(raw, bytes | str):
        return raw
    try:
        return json.dumps(raw, default=repr, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return f"<unserialisable {type(raw).__name__}>"
