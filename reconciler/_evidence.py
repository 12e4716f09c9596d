"""Bounded raw evidence: enough of a downstream answer to audit a decision, never all of it.

Bodies are cut to an excerpt, headers to an allowlist (so credentials and cookies are never
stored), secrets are redacted before anything is cut (`reconciler._redaction`), and text is made
valid UTF-8 so the ledger can always store it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from writesafe.reconciler._redaction import redact_text

BODY_EXCERPT_LIMIT = 2048
"""Characters of a body kept as evidence."""

HEADER_VALUE_LIMIT = 256

_REDACTION_MARGIN = 1024
"""Characters past the cut that are redacted with the excerpt, so a secret across it is found."""

EVIDENCE_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "date",
        "retry-after",
        "x-request-id",
        "request-id",
        "x-correlation-id",
        "ratelimit",
        "ratelimit-policy",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    }
)
"""Response headers worth keeping; everything else (Authorization, Set-Cookie, …) is dropped."""


def valid_text(text: str) -> str:
    """`text` with lone surrogates replaced, so that it always encodes as UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def excerpt(body: bytes | str, limit: int = BODY_EXCERPT_LIMIT) -> dict[str, Any]:
    """The start of a body plus its size, marking whether it was cut."""
    if isinstance(body, bytes):
        # A UTF-8 character is at most 4 bytes: decoding this much yields `limit` characters.
        head = body[: limit * 4]
        size, text, cut = len(body), head.decode("utf-8", "replace"), len(head) < len(body)
    else:
        size, text, cut = len(body.encode("utf-8", "replace")), body, False
    # Redacted before the cut (half a secret matches no rule), over a bounded span only.
    redacted = redact_text(text[: limit + _REDACTION_MARGIN])
    return {
        "excerpt": valid_text(redacted[:limit]),
        "bytes": size,
        "truncated": cut or len(text) > limit,
    }


def header_subset(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The allowlisted headers, lower-cased, values bounded."""
    kept: dict[str, str] = {}
    for name, value in headers:
        lowered = name.lower()
        if lowered in EVIDENCE_HEADERS:
            kept[lowered] = valid_text(redact_text(value)[:HEADER_VALUE_LIMIT])
    return kept
