"""Redaction at capture time: secrets are cut out of evidence and messages before anyone keeps them.

Evidence is read by every reader key of a tenant (and kept for the retention period), so what a
tool's exception or a downstream body happened to contain must not be kept as it was. The built-in
rules remove, from every string:

- URLs' userinfo (`user:password@`), query strings and fragments: they are where API keys,
  signatures and one-time tokens travel;
- the values of credential headers and key-like `name=value` / `"name": "value"` pairs
  (`Authorization`, `Cookie`, `X-Api-Key`, `api_key`, `token`, `password`, `secret`, …);
- token-shaped values: well-known prefixes (`sk_live_…`, `ghp_…`, `xoxb-…`, `AKIA…`, `wsk_…`),
  JWTs, bearer credentials, and any long run of letters and digits (≥ 32 characters) that is not
  a UUID.

The rules over-redact on purpose: an identifier lost from the evidence costs an operator a lookup,
a leaked key costs a tenant its account. Dict members whose *name* is key-like lose their value
whatever it is. A deployment adds its own rules with a `Redactor` (`WriteSafe(redact=…)`), which
runs after the built-in ones on every string; one that raises fails closed (the string is dropped).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("writesafe.redaction")

REDACTED = "[REDACTED]"

Redactor = Callable[[str], str]
"""A deployment's own rule: the text in, the text with its secrets replaced out."""

_KEY_LIKE = (
    r"[\w-]*(?:authorization|cookie|api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|pwd"
    r"|credential|signature|session|private[_-]?key|client[_-]?secret|auth)[\w-]*"
)
_KEY_LIKE_NAME = re.compile(rf"^{_KEY_LIKE}$", re.IGNORECASE)
_STOP = r"\s\"'<>`"  # where a URL or a value ends in prose, JSON or a log line

_URL = re.compile(
    rf"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)"
    rf"(?P<userinfo>[^/?#{_STOP}@]*@)?"
    rf"(?P<rest>[^?#{_STOP}]*)"
    rf"(?P<query>\?[^#{_STOP}]*)?"
    rf"(?P<fragment>#[^{_STOP}]*)?"
)
_COOKIE_HEADER = re.compile(r"(?im)\b((?:set-)?cookie\s*:\s*)[^\r\n]+")
_PAIR = re.compile(
    rf"(?i)(?P<name>\b{_KEY_LIKE})(?P<sep>\"?\s*[:=]\s*\"?)"
    rf"(?P<value>(?:(?:bearer|basic|digest|token|bot)\s+)?[^\s&,;{_STOP}]+)"
)
_TOKENS = re.compile(
    r"\b(?:"
    r"(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{6,}"  # Stripe
    r"|whsec_[A-Za-z0-9]{6,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}"  # GitHub
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|wsk_[0-9a-f]{12}_[A-Za-z0-9_-]+"  # this service's own API keys
    r"|eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"  # JWTs
    r")"
    r"|(?i:\bbearer\s+)[A-Za-z0-9._~+/=-]+"
)
_LONG_RUN = re.compile(r"[A-Za-z0-9_+/=-]{32,}")
_UUID = re.compile(r"^[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def redact_text(text: str) -> str:
    """`text` with the built-in rules applied (idempotent: redacting twice changes nothing)."""
    text = _URL.sub(_without_credentials, text)
    text = _COOKIE_HEADER.sub(rf"\1{REDACTED}", text)
    text = _PAIR.sub(_without_value, text)
    text = _TOKENS.sub(REDACTED, text)
    return _LONG_RUN.sub(_unless_identifier, text)


def _without_credentials(match: re.Match[str]) -> str:
    query = f"?{REDACTED}" if match["query"] else ""
    fragment = f"#{REDACTED}" if match["fragment"] else ""
    userinfo = f"{REDACTED}@" if match["userinfo"] else ""
    return f"{match['scheme']}{userinfo}{match['rest']}{query}{fragment}"


def _without_value(match: re.Match[str]) -> str:
    return f"{match['name']}{match['sep']}{REDACTED}"


def _unless_identifier(match: re.Match[str]) -> str:
    run = match[0]
    secret_shaped = any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
    return REDACTED if secret_shaped and not _UUID.match(run) else run


@dataclass(frozen=True, slots=True)
class Redaction:
    """The built-in rules plus a deployment's own `redactor`, applied to whatever is captured."""

    redactor: Redactor | None = None

    def text(self, text: str) -> str:
        text = redact_text(text)
        if self.redactor is None:
            return text
        try:
            redacted = self.redactor(text)
        except Exception:
            logger.exception("the deployment's redactor failed; the text is dropped")
            return REDACTED
        return redacted if isinstance(redacted, str) else REDACTED

    def evidence(self, value: Any) -> Any:
        """Every string in a JSON-like value redacted; key-like members lose their value."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                name: REDACTED
                if isinstance(name, str) and _KEY_LIKE_NAME.match(name)
                else self.evidence(member)
                for name, member in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.evidence(item) for item in value]
        return value


DEFAULT_REDACTION = Redaction()
