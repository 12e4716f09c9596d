"""Reading an envelope someone else produced (a downstream, a rendering): trusted only if valid.

An envelope-shaped answer is accepted only when it validates and its typed fields agree with this
registry's verdict for its code. Anything else fails closed to UNKNOWN_ERROR with the raw answer
kept as bounded evidence: a downstream cannot talk writesafe into retrying.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from reconciler._classify import Classification
from reconciler._contract import CODES, Code, CodeRegistry, ErrorEnvelope, SideEffects
from reconciler._evidence import excerpt, valid_text

PARSE_LIMIT = 1 << 20
"""Bytes of a body parsed as JSON at most; a larger body is evidence, not data."""


class Malformed(ValueError):
    """A body or envelope that cannot be trusted; the message says why (no raw content)."""


def parse_json(body: bytes | str, limit: int = PARSE_LIMIT) -> Any:
    """JSON of a body no larger than `limit` bytes; `Malformed` otherwise."""
    size = len(body) if isinstance(body, bytes) else len(body.encode("utf-8", "replace"))
    if size > limit:
        raise Malformed(f"body of {size} bytes exceeds the {limit}-byte parse limit")
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:
        raise Malformed(f"body is not JSON: {type(error).__name__}") from None


def read_envelope(data: object, codes: CodeRegistry = CODES) -> Classification:
    """Accept `data` (JSON text or a decoded object) as an envelope, or fail closed."""
    try:
        if isinstance(data, bytes | str):
            data = parse_json(data)
        envelope = _validated(data, codes)
    except Malformed as error:
        return malformed(str(error), data, codes)
    return Classification(envelope, {"envelope": envelope.to_json_dict()})


def malformed(reason: str, raw: object, codes: CodeRegistry) -> Classification:
    """UNKNOWN_ERROR for an answer that could not be trusted, keeping a bounded excerpt of it."""
    envelope = codes.envelope(Code.UNKNOWN_ERROR, f"untrusted answer: {reason}")
    return Classification(envelope, {"reason": valid_text(reason), "raw": excerpt(_text(raw))})


def _validated(data: object, codes: CodeRegistry) -> ErrorEnvelope:
    if not isinstance(data, dict):
        raise Malformed(f"an envelope is a JSON object, not {type(data).__name__}")
    try:
        envelope = ErrorEnvelope.model_validate(data)
    except (ValidationError, RecursionError) as error:
        raise Malformed(f"invalid envelope: {_first_error(error)}") from None
    if envelope.code not in codes:
        raise Malformed(f"unregistered code {envelope.code}")
    verdict = codes.verdict(envelope.code)
    narrowed = envelope.code == Code.UNKNOWN_ERROR and envelope.side_effects is SideEffects.NONE
    if (
        envelope.retryable != verdict.retryable
        or envelope.next_action is not verdict.next_action
        or (envelope.side_effects is not verdict.side_effects and not narrowed)
    ):
        raise Malformed(f"typed fields of {envelope.code} contradict its verdict")
    return envelope


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
