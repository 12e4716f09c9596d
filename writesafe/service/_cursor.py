"""The listing's cursor: an opaque, sealed position that opens only for the tenant it was made for.

The position is the `(updated_at, id)` of the last row of the previous page. Written in clear it
would show the ledger's global row id, so a tenant could estimate every other tenant's traffic
between two of its listings. It is therefore sealed with AES-GCM (`cryptography`): encrypted, so
it shows nothing, and authenticated with the tenant's scope as associated data, so a cursor that
was edited, or that was made for another tenant, does not open and is refused (422).

The key is derived (HKDF-SHA256) from `WRITESAFE_SERVICE_CURSOR_SECRET`; without one each service
process makes its own, and a cursor then opens only in the process that made it (set the secret
when several replicas serve one listing).
"""

from __future__ import annotations

import base64
import binascii
import os
import struct
from datetime import UTC, datetime, timedelta

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from writesafe.ledger import OperationRecord

_NONCE = 12
_POSITION = struct.Struct(">qq")  # microseconds since the epoch, row id
_SEALED = _NONCE + _POSITION.size + 16  # nonce, ciphertext, GCM tag
_LENGTH = (_SEALED * 4 + 2) // 3  # base64url without padding
CURSOR_PATTERN = rf"^[A-Za-z0-9_-]{{{_LENGTH}}}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class CursorInvalid(ValueError):
    """The cursor was not made by this service for this scope (edited, foreign or stale)."""


class Cursors:
    """Seals and opens the cursors of one service (one key)."""

    def __init__(self, secret: str | None = None) -> None:
        material = os.urandom(32) if secret is None else secret.encode()
        key = HKDF(algorithm=SHA256(), length=32, salt=None, info=b"writesafe cursor").derive(
            material
        )
        self._aead = AESGCM(key)

    def seal(self, last: OperationRecord, scope: str) -> str:
        position = _POSITION.pack((last.updated_at - _EPOCH) // _MICROSECOND, last.id)
        nonce = os.urandom(_NONCE)
        sealed = nonce + self._aead.encrypt(nonce, position, scope.encode())
        return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode()

    def open(self, cursor: str, scope: str) -> tuple[datetime, int]:
        """The position in `cursor`; `CursorInvalid` unless this service sealed it for `scope`."""
        try:
            sealed = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            nonce, body = sealed[:_NONCE], sealed[_NONCE:]
            micros, last_id = _POSITION.unpack(self._aead.decrypt(nonce, body, scope.encode()))
            return _EPOCH + micros * _MICROSECOND, last_id
        except (binascii.Error, ValueError, InvalidTag, struct.error, OverflowError) as error:
            raise CursorInvalid("the cursor is not one this service gave this API key") from error
