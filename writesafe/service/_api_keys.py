"""API key secrets: their format, how they are made, and the one way they are hashed.

A key reads `wsk_<key id>_<secret>`: the 12-hex-digit key id is public (listed, revoked by), the
secret is 32 bytes from `secrets` (43 base64url characters). The `wsk_` prefix lets secret
scanners recognise a leaked key.

The ledger stores only SHA-256 of the whole key. A slow password hash (bcrypt, argon2) exists to
make guessing low-entropy passwords expensive; a 256-bit random secret cannot be guessed whatever
the hash, so a fast, deterministic one costs nothing in safety, lets each request find its key with
one indexed lookup, and a leaked table still yields no usable key.
"""

from __future__ import annotations

import hashlib
import re
import secrets

from writesafe.idempotency._keys import validate_key
from writesafe.ledger import ApiKeyRecord, ApiKeys, Role

PREFIX = "wsk_"
MAX_TOKEN_LENGTH = 128
"""Longer bearer values are refused before hashing: no key this service makes is that long."""

_TOKEN = re.compile(r"^wsk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}$")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def well_formed(token: str) -> bool:
    """Whether `token` could be a key this service made (checked before any database lookup)."""
    return len(token) <= MAX_TOKEN_LENGTH and _TOKEN.match(token) is not None


async def create_api_key(
    store: ApiKeys, *, scope: str, role: Role, name: str
) -> tuple[ApiKeyRecord, str]:
    """Store a new key and return it with its secret, which is shown once and never stored.

    Raises `WriteSafeError` (INPUT_INVALID) for a scope or name the ledger would not accept.
    """
    scope, name = validate_key(scope, "scope"), validate_key(name, "name")
    key_id = secrets.token_hex(6)
    token = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    record = await store.add(
        key_id=key_id, secret_hash=hash_token(token), scope=scope, role=role, name=name
    )
    return record, token
