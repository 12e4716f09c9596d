"""Redaction at capture time: secrets are cut out of evidence and messages before anyone keeps them.

Evidence is read by every reader key of a tenant (and kept for the retention period), so what a
tool's exception or a downstream body happened to contain must not be kept as it was. The rules
follow the structures credentials travel in, not one spelling of them; from every string they
remove:

- URLs' userinfo (`user:password@`), query strings and fragments: they are where API keys,
  signatures and one-time tokens travel;
- whole header lines whose name is a credential (`Authorization: …`, `Cookie: …`);
- the value of every key-like pair (`Authorization`, `Cookie`, `X-Api-Key`, `api_key`, `token`,
  `password`, `secret`, …) in the shapes text takes: JSON (also JSON inside a JSON string),
  Python dict, kwargs and tuple reprs in either quote style and as bytes (`b'…'`), form bodies
  and `name: value` prose. A quoted value goes whole, spaces and scheme included;
- credentials after an HTTP auth scheme (`Basic`, `Bearer`, `Token`, `Digest`) wherever they
  stand;
- token-shaped values: well-known prefixes (`sk_live_…`, `ghp_…`, `xoxb-…`, `AKIA…`, `wsk_…`),
  JWTs, and any long run of letters and digits (≥ 32 characters) that is not a UUID.

The rules over-redact on purpose: an identifier lost from the evidence costs an operator a lookup,
a leaked key costs a tenant its account. Dict members whose *name* is key-like lose their value
whatever it is. A deployment adds its own rules with a `Redactor` (`WriteSafe(redact=…)`), which
runs after the built-in ones on every string; one that raises fails closed (the string is dropped).
Redaction is on the failure path only; it costs tens of microseconds per message
(docs/service.md, "Redaction").
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

# A name is key-like when it holds one of these words. The patterns below find every `name:` /
# `name=` and ask this of the name, rather than search for the words themselves: a word pattern
# inside `[\w-]*` backtracks over every long word of the text, which made redaction quadratic.
_KEY_WORDS = re.compile(
    r"authorization|cookie|api[_-]?key|access[_-]?key|secret|token|passw(?:or)?d|pwd"
    r"|credential|signature|session|private[_-]?key|client[_-]?secret|auth",
    re.IGNORECASE,
)
_NAME = r"(?P<word>[\w-]{1,64})"
_STOP = r"\s\"'<>`"  # where a URL or a value ends in prose, JSON or a log line

_URL = re.compile(
    rf"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)"
    rf"(?P<userinfo>[^/?#{_STOP}@]*@)?"
    rf"(?P<rest>[^?#{_STOP}]*)"
    rf"(?P<query>\?[^#{_STOP}]*)?"
    rf"(?P<fragment>#[^{_STOP}]*)?"
)
# A header block's credential line goes whole: its value may hold spaces, commas and quotes.
_HEADER_LINE = re.compile(rf"(?m)^(?P<name>[ \t]*{_NAME}[ \t]*:[ \t]*)(?P<value>\S[^\r\n]*)")
_COOKIE_HEADER = re.compile(r"(?im)\b((?:set-)?cookie\s*:\s*)[^\r\n]+")
# A quoted string in any of the forms a repr or a JSON body writes one: "…", '…', b'…', and
# \"…\" (JSON inside a JSON string), each with its escapes.
_QUOTED = (
    r"b?(?:\\\"(?:(?!\\\").)*\\\"|\\'(?:(?!\\').)*\\'"
    r"|\"(?:[^\"\\\r\n]|\\.)*\"|'(?:[^'\\\r\n]|\\.)*')"
)
_SCHEMES = r"(?:bearer|basic|digest|token|bot)"
_BARE = rf"(?:{_SCHEMES}\s+)?[^\s&,;()\[\]{{}}{_STOP}]+"
_VALUE = rf"{re.escape(REDACTED)}|{_QUOTED}|{_BARE}"  # what was redacted already stays so
# `"name": "value"`, `'name': b'value'`, `('name', 'value')`: a quoted name, then `:`, `=` or
# the comma of a tuple, then the value quoted or bare.
_QUOTED_PAIR = re.compile(
    rf"(?i)(?P<name>b?(?P<q>\\?[\"']){_NAME}(?P=q)\s*[:=,]\s*)(?P<value>{_VALUE})"
)
# `name=value`, `name='value'` (kwargs), `name: value` (prose), `name=value&…` (forms).
_PAIR = re.compile(rf"(?i)(?P<name>(?<![\w\"'-]){_NAME}\s*[:=]\s*)(?P<value>{_VALUE})")
# An auth scheme's credentials wherever they stand; Digest's are a list of parameters.
_SCHEME_CREDENTIALS = re.compile(
    r"(?i)\b(?P<name>(?:bearer|basic|token)\s+)(?P<value>[A-Za-z0-9._~+/=-]+)"
    r"|\b(?P<digest>digest\s+)(?:[\w-]+=(?:\\?\"(?:(?!\\?\").)*\\?\"|[^\s,'\"]+)(?:,\s*)?)+"
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
)
_LONG_RUN = re.compile(r"[A-Za-z0-9_+/=-]{32,}")
_UUID = re.compile(r"^[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")


def redact_text(text: str) -> str:
    """`text` with the built-in rules applied (idempotent: redacting twice changes nothing)."""
    text = _URL.sub(_without_credentials, text)
    text = _HEADER_LINE.sub(_without_value, text)
    text = _COOKIE_HEADER.sub(rf"\1{REDACTED}", text)
    text = _QUOTED_PAIR.sub(_without_value, text)
    text = _PAIR.sub(_without_value, text)
    text = _SCHEME_CREDENTIALS.sub(_without_credential, text)
    text = _TOKENS.sub(REDACTED, text)
    return _LONG_RUN.sub(_unless_identifier, text)


def _without_credentials(match: re.Match[str]) -> str:
    query = f"?{REDACTED}" if match["query"] else ""
    fragment = f"#{REDACTED}" if match["fragment"] else ""
    userinfo = f"{REDACTED}@" if match["userinfo"] else ""
    return f"{match['scheme']}{userinfo}{match['rest']}{query}{fragment}"


def key_like(name: str) -> bool:
    """Whether a member or header called `name` holds a credential (`X-Api-Key`, `db_password`)."""
    return re.fullmatch(r"[\w-]+", name) is not None and _KEY_WORDS.search(name) is not None


def _without_value(match: re.Match[str]) -> str:
    value = match["value"]
    if not _KEY_WORDS.search(match["word"]):
        # Not a credential, but its value may hold pairs that are (JSON inside a JSON string).
        return f"{match['name']}{match.re.sub(_without_value, value)}"
    if value.strip("'\"\\b") == REDACTED:
        return match[0]
    # A quoted value keeps its quotes, so the repr or the JSON around it stays well-formed.
    quoted = re.fullmatch(r"(b?\\?[\"'])(?:.*?)(\\?[\"'])", value, re.DOTALL)
    if quoted is not None and value != quoted[1]:
        return f"{match['name']}{quoted[1]}{REDACTED}{quoted[2]}"
    return f"{match['name']}{REDACTED}"


def _without_credential(match: re.Match[str]) -> str:
    if match["digest"] is not None:
        return f"{match['digest']}{REDACTED}"
    value = match["value"]
    # Prose says "Basic authentication" or "the token expired": a credential has a digit or
    # base64/JWT punctuation in it (one that does not stays, like any other word).
    if value == REDACTED or not re.search(r"[0-9+/=._~-]", value):
        return match[0]
    return f"{match['name']}{REDACTED}"


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
                if isinstance(name, str) and key_like(name)
                else self.evidence(member)
                for name, member in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.evidence(item) for item in value]
        return value


DEFAULT_REDACTION = Redaction()
