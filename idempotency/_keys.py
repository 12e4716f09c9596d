"""Validation of idempotency keys and scopes: they become database keys, so they are strict."""

from __future__ import annotations

import functools
import re

from writesafe.idempotency._errors import invalid_input

MAX_KEY_LENGTH = 255
DEFAULT_SCOPE = "default"
HIDDEN_CATEGORIES = ("Cc", "Cf")
# Every control and format character (Unicode Cc and Cf) of Unicode 15.1, as inclusive ranges.
# A table rather than `unicodedata`: Pythons ship different Unicode versions (3.11 has 14.0,
# which lacks U+13439–1343F), and the refusal and the service's schema must be one rule on all
# of them. tests/service/test_headers_and_text.py checks it against each Python's own data.
HIDDEN_RANGES = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip


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
    found = _hidden_pattern(allowed).search(value)
    if found is not None:
        raise invalid_input(
            field,
            f"{field} must not contain control or format characters (U+{ord(found[0]):04X})",
        )
    return value


@functools.cache
def _hidden_pattern(allowed: str) -> re.Pattern[str]:
    return re.compile(f"[{hidden_characters(allowed)}]")


def hidden_characters(allowed: str = "") -> str:
    """The body of a regular expression's character class that holds every control and format
    character but `allowed`: a schema's `pattern` that says what `refuse_hidden_characters`
    refuses. Those of the Basic Multilingual Plane are written `\\uXXXX`, which Python's `re` and
    ECMA-262 both read; the few beyond it have no escape both read, so they stand as themselves."""
    runs: list[tuple[int, int]] = []
    for first, last in HIDDEN_RANGES:  # split where an allowed character stands
        start = first
        for code in range(first, last + 1):
            if chr(code) in allowed:
                if start < code:
                    runs.append((start, code - 1))
                start = code + 1
        if start <= last:
            runs.append((start, last))
    return "".join(_in_class(a) if a == b else f"{_in_class(a)}-{_in_class(b)}" for a, b in runs)


def _in_class(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)
