"""The listing's cursor: the `(updated_at, id)` of the last row of the previous page.

Spelled `<microseconds since the epoch>_<id>`: exact (the ledger keeps microseconds), URL-safe,
and fully described by its pattern, so every cursor the schema admits is a valid position. It
carries nothing but a position: the tenant comes from the API key, so a hand-made cursor cannot
widen what a key sees. Clients should still treat it as opaque.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledger import OperationRecord

# ≤ 17 digits of microseconds stays within datetime's range; ≤ 18 digits of id within BIGINT.
CURSOR_PATTERN = r"^[0-9]{1,17}_[0-9]{1,18}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def encode_cursor(last: OperationRecord) -> str:
    return f"{(last.updated_at - _EPOCH) // _MICROSECOND}_{last.id}"


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """The position in a cursor that matches `CURSOR_PATTERN` (checked by the route)."""
    micros, last_id = cursor.split("_")
    return _EPOCH + int(micros) * _MICROSECOND, int(last_id)
