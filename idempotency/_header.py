"""The `Idempotency-Key` request header (IETF httpapi draft): one sf-string, validated strictly.

The draft makes the value an RFC 8941 sf-string (`Idempotency-Key: "8e03978e-…"`); many clients
send the bare value instead (Stripe style). Both are accepted; anything else is the caller's input
to fix, reported before the ledger is touched.
"""

from __future__ import annotations

from writesafe.idempotency._arguments import KEY_PARAMETER
from writesafe.idempotency._errors import invalid_input
from writesafe.idempotency._keys import validate_key

HEADER = "Idempotency-Key"
FIELD = KEY_PARAMETER  # the envelope names the key alike wherever it came from

_VISIBLE = frozenset(chr(c) for c in range(0x21, 0x7F))
_STRING_CHARS = _VISIBLE | {" "}


def parse_idempotency_key(values: list[str], *, required: bool) -> str | None:
    """The key carried by the request's `Idempotency-Key` header fields (None if absent and
    optional); raises `WriteSafeError` INPUT_INVALID for a missing, repeated or malformed key."""
    if not values:
        if required:
            raise invalid_input(FIELD, f"this operation requires an {HEADER} header")
        return None
    if len(values) > 1:
        raise invalid_input(FIELD, f"send exactly one {HEADER} header, not {len(values)}")
    value = values[0].strip(" \t")
    key = _sf_string(value) if value.startswith('"') else _bare(value)
    return validate_key(key, FIELD)


def _sf_string(value: str) -> str:
    """Decode an RFC 8941 sf-string: printable ASCII between quotes, `\\"` and `\\\\` escapes."""
    chars: list[str] = []
    index = 1
    while index < len(value):
        char = value[index]
        if char == "\\":
            escaped = value[index + 1 : index + 2]
            if escaped not in ('"', "\\"):
                raise invalid_input(FIELD, f"{HEADER} has an invalid escape")
            chars.append(escaped)
            index += 2
            continue
        if char == '"':
            if index != len(value) - 1:
                raise invalid_input(FIELD, f"{HEADER} has text after its closing quote")
            return "".join(chars)
        if char not in _STRING_CHARS:
            raise invalid_input(FIELD, f"{HEADER} must be printable ASCII")
        chars.append(char)
        index += 1
    raise invalid_input(FIELD, f"{HEADER} has no closing quote")


def _bare(value: str) -> str:
    if not all(char in _VISIBLE for char in value):
        raise invalid_input(FIELD, f"{HEADER} must be printable ASCII without spaces (or quoted)")
    return value
