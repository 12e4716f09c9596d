"""Validation of idempotency keys and scopes: they become database keys, so they are strict."""

from __future__ import annotations

import unicodedata

from writesafe.idempotency._errors import invalid_input

MAX_KEY_LENGTH = 255
DEFAULT_SCOPE = "default"


def validate_key(value: object, field: str = "idempotency_key") -> str:
    """Return `value` if it is a usable key: a non-empty printable string of ≤ 255 characters."""
    if not isinstance(value, str):
        raise invalid_input(field, f"{field} must be a string, not {type(value).__name__}")
    if not value:
        raise invalid_input(field, f"{field} must not be empty")
    if len(value) > MAX_KEY_LENGTH:
        raise invalid_input(field, f"{field} is {len(value)} characters long; the limit is 255")
    refuse_hidden_characters(value, field)
    if not value.isprintable() or value != value.strip():
        raise invalid_input(field, f"{field} must be printable, without surrounding whitespace")
    return value


def refuse_hidden_characters(value: str, field: str, *, allowed: str = "") -> str:
    """Return `value` unless it holds a control or format character (Unicode Cc, Cf) outside
    `allowed`: U+202E reverses the text after it, U+200B hides in it, and both would reach the
    console and the callers' envelopes as written."""
    for char in value:
        if unicodedata.category(char) in ("Cc", "Cf") and char not in allowed:
            raise invalid_input(
                field, f"{field} must not contain control or format characters (U+{ord(char):04X})"
            )
    return value
