"""Validation of idempotency keys and scopes: they become database keys, so they are strict."""

from __future__ import annotations

import unicodedata

from writesafe.idempotency._errors import invalid_input

MAX_KEY_LENGTH = 255
DEFAULT_SCOPE = "default"
HIDDEN_CATEGORIES = ("Cc", "Cf")
# The blocks that hold every control and format character (tests/test_keys.py scans all of
# Unicode on each Python to keep this true): scanning only these keeps the import fast.
_HIDDEN_BLOCKS = (
    range(0x0000, 0x2100),
    range(0xFE00, 0x10000),
    range(0x11000, 0x1E000),
    range(0xE0000, 0xE0100),
)


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
        if unicodedata.category(char) in HIDDEN_CATEGORIES and char not in allowed:
            raise invalid_input(
                field, f"{field} must not contain control or format characters (U+{ord(char):04X})"
            )
    return value


def hidden_characters(allowed: str = "") -> str:
    """The body of a regular expression's character class that holds every control and format
    character but `allowed`: a schema's `pattern` that says what `refuse_hidden_characters`
    refuses. Those of the Basic Multilingual Plane are written `\\uXXXX`, which Python's `re` and
    ECMA-262 both read; the few beyond it have no escape both read, so they stand as themselves."""
    hidden = [
        code
        for block in _HIDDEN_BLOCKS
        for code in block
        if unicodedata.category(chr(code)) in HIDDEN_CATEGORIES and chr(code) not in allowed
    ]
    runs: list[tuple[int, int]] = []
    for code in hidden:
        if runs and runs[-1][1] == code - 1:
            runs[-1] = (runs[-1][0], code)
        else:
            runs.append((code, code))
    return "".join(_in_class(a) if a == b else f"{_in_class(a)}-{_in_class(b)}" for a, b in runs)


def _in_class(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)
