"""Validation of idempotency keys and scopes: they become database keys, so they are strict."""

from __future__ import annotations

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
    if not value.isprintable() or value != value.strip():
        raise invalid_input(field, f"{field} must be printable, without surrounding whitespace")
    return value
