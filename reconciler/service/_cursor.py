"""The listing's opaque cursor: the `(updated_at, id)` of the last row of the previous page.

Spelled as unpadded base64url of compact JSON so it is URL-safe and carries nothing but a position;
the tenant comes from the API key, never from the cursor, so a cursor cannot widen what a key sees.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime

from ledger import OperationRecord, dumps_json

CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,200}$"
CURSOR_FORMAT = "writesafe-cursor"
_MAX_ID = 2**63


class InvalidCursor(ValueError):
    """The cursor was not made by this service."""


def encode_cursor(last: OperationRecord) -> str:
    text = dumps_json([last.updated_at.isoformat(), last.id])
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        stamp, last_id = json.loads(raw)
        updated_at = datetime.fromisoformat(stamp).astimezone(UTC)
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError, OverflowError) as error:
        raise InvalidCursor("the cursor is not one this service returned") from error
    if type(last_id) is not int or not 0 <= last_id < _MAX_ID:
        raise InvalidCursor("the cursor is not one this service returned")
    return updated_at, last_id
