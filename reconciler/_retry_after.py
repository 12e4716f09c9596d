"""`Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date, clamped to a sane range.

An HTTP-date is measured against the response's own `Date` header when it has one (both come
from the server's clock), else against ours. Anything unparseable is ignored, never guessed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

MAX_RETRY_AFTER_MS = 600_000
"""The longest stated delay honoured: a dependency asking for more is capped at ten minutes."""

_MAX_DIGITS = 12  # delta-seconds beyond this is already far past the cap


def parse_retry_after(
    value: str,
    *,
    now: datetime,
    date: str | None = None,
    maximum_ms: int = MAX_RETRY_AFTER_MS,
) -> int | None:
    """Milliseconds to wait, in [0, maximum_ms]; None if `value` is neither form."""
    text = value.strip()
    if text.isascii() and text.isdigit():
        milliseconds = maximum_ms if len(text) > _MAX_DIGITS else int(text) * 1000
        return min(milliseconds, maximum_ms)
    until = _http_date(text)
    if until is None:
        return None
    reference = _http_date(date) if date is not None else None
    delta = until - (reference or now)
    return int(min(max(delta.total_seconds() * 1000, 0), maximum_ms))


def _http_date(text: str) -> datetime | None:
    try:
        parsed = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    # HTTP-dates are always GMT; a date without a zone is read as such.
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
