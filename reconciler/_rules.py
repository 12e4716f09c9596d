"""A rule-based, versioned adapter from raw downstream responses to envelopes.

Rules are tried in order and the first match decides, so exact rules (status + body predicates)
must come before broad ones; a rule that an earlier rule makes unreachable is refused when the
adapter is built. Nothing matched, a body that cannot be read, a rule that breaks: UNKNOWN_ERROR,
with the raw response kept as bounded evidence. Exceptions without a response (connection errors,
timeouts, `ToolError`) go to the built-in exception classification.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import httpx
from pydantic_core import PydanticSerializationError, to_json

from writesafe.ledger import Clock, SystemClock
from writesafe.reconciler._causes import Untrusted
from writesafe.reconciler._classify import Classification, classify_exception, exception_evidence
from writesafe.reconciler._contract import Code, CodeRegistry, ErrorEnvelope, SideEffects
from writesafe.reconciler._evidence import excerpt, header_subset
from writesafe.reconciler._problem import from_problem
from writesafe.reconciler._response import RawResponse, response_of
from writesafe.reconciler._retry_after import MAX_RETRY_AFTER_MS, parse_retry_after
from writesafe.reconciler._wire import Malformed, parse_json

logger = logging.getLogger("writesafe")

Predicate = Callable[[RawResponse, Any], bool]
"""A custom test of a response and its parsed JSON body (`NOT_JSON` when it has none)."""


class _NotJson:
    def __repr__(self) -> str:
        return "NOT_JSON"


NOT_JSON: Any = _NotJson()
"""The parsed body of a response whose body is not (bounded, valid) JSON."""

_ENVELOPE_SCHEMA_PREFIX = "writesafe.error/"


@dataclass(frozen=True, slots=True)
class Rule:
    """If the response has one of `status` and the body has every `body` value, it is `code`.

    `body` maps dotted paths (`error.reason`, `items.0.code`) to the exact JSON value expected.
    The envelope's `field` is `field`, or the body's value at `field_from` translated by the
    adapter's `fields`. The delay is the response's `Retry-After`, else the number of milliseconds
    at the body's `retry_after_ms_from` path (a downstream that states it in JSON), else the fixed
    `retry_after_ms`; stated delays are clamped to the adapter's maximum.
    `side_effects=NONE` may only narrow UNKNOWN_ERROR, for a rule that proves nothing happened.
    `cause` is the envelope's typed cause (e.g. `Lost.TIMEOUT` for a gateway timeout).
    """

    code: str
    status: int | Collection[int] | None = None
    body: Mapping[str, Any] = field(default_factory=dict)
    when: Predicate | None = None
    field: str | None = None
    field_from: str | None = None
    retry_after_ms: int | None = None
    retry_after_ms_from: str | None = None
    side_effects: SideEffects | None = None
    cause: str | None = None
    message: str | None = None
    name: str | None = None

    @property
    def statuses(self) -> frozenset[int] | None:
        if self.status is None:
            return None
        return frozenset([self.status] if isinstance(self.status, int) else self.status)

    @property
    def label(self) -> str:
        return self.name or self.code

    def shadows(self, later: Rule) -> bool:
        """True if this rule matches everything `later` matches, so `later` could never fire."""
        if self.when is not None:
            return False
        mine, theirs = self.statuses, later.statuses
        covers_status = mine is None or (theirs is not None and theirs <= mine)
        return covers_status and all(
            path in later.body and _same(later.body[path], value)
            for path, value in self.body.items()
        )

    def matches(self, response: RawResponse, body: Any) -> bool:
        statuses = self.statuses
        if statuses is not None and response.status not in statuses:
            return False
        for path, expected in self.body.items():
            if not _same(_at(body, path), expected):
                return False
        return self.when is None or bool(self.when(response, body))


@dataclass(frozen=True, slots=True)
class ResponseAdapter:
    """An ordered, versioned list of rules; implements `Adapter`.

    `fields` translates downstream field names (`shipping.postcode`) to the tool's (`postcode`).
    With `accept_envelopes`, a body that is a `writesafe.error/1` envelope (or problem+json
    carrying one) is read as such, and fails closed if it is invalid; rules never see it.
    `answer_rules` judge successful answers: a 2xx whose body says it failed (`{"ok": false}`)
    is that failure, not a success (see `classify_answer`).
    """

    name: str
    version: str
    rules: tuple[Rule, ...] = ()
    fields: Mapping[str, str] = field(default_factory=dict)
    answer_rules: tuple[Rule, ...] = ()
    accept_envelopes: bool = True
    max_retry_after_ms: int = MAX_RETRY_AFTER_MS
    clock: Clock = field(default_factory=SystemClock, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "answer_rules", tuple(self.answer_rules))
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))
        for rules in (self.rules, self.answer_rules):
            for index, rule in enumerate(rules):
                for earlier in rules[:index]:
                    if earlier.shadows(rule):
                        raise ValueError(
                            f"{self.name}/{self.version}: rule {rule.label!r} can never match, "
                            f"{earlier.label!r} before it matches everything it does; put exact "
                            "rules before broad ones"
                        )

    def classify(self, error: BaseException, codes: CodeRegistry) -> Classification:
        """Classify a failure; never raises, and fails closed to UNKNOWN_ERROR."""
        try:
            response = response_of(error)
            if response is None:
                return classify_exception(error, codes)
            return self.classify_response(response, codes)
        except Exception as broken:
            logger.exception("adapter %s/%s failed", self.name, self.version)
            envelope = codes.envelope(
                Code.UNKNOWN_ERROR,
                f"adapter {self.name} failed",
                cause=Untrusted.ADAPTER_FAILED.value,
            )
            return Classification(
                envelope, {"adapter": self._tag(), "adapter_error": exception_evidence(broken)}
            )

    def classify_answer(self, answer: object, codes: CodeRegistry) -> Classification | None:
        """The failure a successful answer states, by `answer_rules`; None if it is a success.

        The answer is what the tool returned: an `httpx.Response` or `RawResponse` as is, any
        other value as the JSON body of a 200. Never raises: an answer rule that breaks fails
        closed to UNKNOWN_ERROR.
        """
        if not self.answer_rules:
            return None
        response = _answer_response(answer)
        if response is None:
            return None
        evidence, body = self._read(response)
        return self._first_match(self.answer_rules, response, body, evidence, codes)

    def classify_response(self, response: RawResponse, codes: CodeRegistry) -> Classification:
        """The first matching rule's envelope, or UNKNOWN_ERROR; never raises on bad input."""
        evidence, body = self._read(response)
        if self.accept_envelopes and _is_envelope(body):
            found = from_problem(self._clamped(body), codes)
            envelope = found.envelope.model_copy(update={"operation": None})
            return Classification(envelope, {**evidence, **found.evidence})
        matched = self._first_match(self.rules, response, body, evidence, codes)
        if matched is not None:
            return matched
        message = f"{self._tag()}: no rule for HTTP {response.status}"
        envelope = codes.envelope(Code.UNKNOWN_ERROR, message, cause=Untrusted.NO_RULE.value)
        return Classification(envelope, evidence)

    def _read(self, response: RawResponse) -> tuple[dict[str, Any], Any]:
        """The response's evidence and its parsed body (`NOT_JSON` when it has none)."""
        evidence = self._evidence(response)
        try:
            body: Any = parse_json(response.body)
        except Malformed as error:
            body = NOT_JSON
            evidence["body_error"] = str(error)
        return evidence, body

    def _first_match(
        self,
        rules: tuple[Rule, ...],
        response: RawResponse,
        body: Any,
        evidence: dict[str, Any],
        codes: CodeRegistry,
    ) -> Classification | None:
        for rule in rules:
            try:
                matched = rule.matches(response, body)
            except Exception as broken:  # a user predicate failed: trust nothing after it
                evidence["rule_error"] = {"rule": rule.label, **exception_evidence(broken)}
                message = f"{self._tag()}: rule {rule.label} failed to evaluate"
                cause = Untrusted.ADAPTER_FAILED.value
                envelope = codes.envelope(Code.UNKNOWN_ERROR, message, cause=cause)
                return Classification(envelope, evidence)
            if matched:
                evidence["rule"] = rule.label
                return Classification(self._envelope(rule, response, body, codes), evidence)
        return None

    def _envelope(
        self, rule: Rule, response: RawResponse, body: Any, codes: CodeRegistry
    ) -> ErrorEnvelope:
        message = rule.message or f"{self._tag()}: HTTP {response.status} matched {rule.label}"
        return codes.envelope(
            rule.code,
            message,
            field=rule.field or self._field(body, rule.field_from),
            retry_after_ms=self._retry_after(response, body, rule),
            side_effects=rule.side_effects,
            cause=rule.cause,
        )

    def _field(self, body: Any, path: str | None) -> str | None:
        if path is None:
            return None
        value = _at(body, path)
        if not isinstance(value, str):
            return None
        return self.fields.get(value, value)

    def _retry_after(self, response: RawResponse, body: Any, rule: Rule) -> int | None:
        stated = response.header("retry-after")
        if stated is not None:
            parsed = parse_retry_after(
                stated,
                now=self.clock.now(),
                date=response.header("date"),
                maximum_ms=self.max_retry_after_ms,
            )
            if parsed is not None:
                return parsed
        if rule.retry_after_ms_from is not None:
            in_body = _at(body, rule.retry_after_ms_from)
            if type(in_body) in (int, float) and in_body >= 0:
                return int(min(in_body, self.max_retry_after_ms))
        default_ms = rule.retry_after_ms
        return None if default_ms is None else min(default_ms, self.max_retry_after_ms)

    def _clamped(self, body: dict[str, Any]) -> dict[str, Any]:
        # A downstream's own envelope: its delay is clamped like a header before it is read
        # (readers refuse absurd delays; adapters clamp them). Its operation block describes the
        # downstream's operation, not ours: it is dropped once read.
        delay = body.get("retry_after_ms")
        if type(delay) is int and delay > self.max_retry_after_ms:
            return {**body, "retry_after_ms": self.max_retry_after_ms}
        return body

    def _evidence(self, response: RawResponse) -> dict[str, Any]:
        return {
            "adapter": self._tag(),
            "status": response.status,
            "headers": header_subset(response.headers),
            "body": excerpt(response.body),
        }

    def _tag(self) -> str:
        return f"{self.name}/{self.version}"


def _answer_response(answer: object) -> RawResponse | None:
    if isinstance(answer, RawResponse):
        return answer
    if isinstance(answer, httpx.Response):
        return RawResponse.from_httpx(answer)
    try:
        return RawResponse(200, (("content-type", "application/json"),), to_json(answer))
    except PydanticSerializationError:
        return None  # nothing JSON-shaped to judge: the answer stands


def _is_envelope(body: Any) -> bool:
    schema = body.get("schema") if isinstance(body, dict) else None
    return isinstance(schema, str) and schema.startswith(_ENVELOPE_SCHEMA_PREFIX)


def _at(body: Any, path: str) -> Any:
    """The value at a dotted path of parsed JSON, or NOT_JSON where the path does not exist."""
    value = body
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return NOT_JSON
    return value


def _same(actual: Any, expected: Any) -> bool:
    """JSON equality: `true` is not `1`, and `1` is not `"1"`."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_same(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(_same(a, e) for a, e in zip(actual, expected, strict=True))
        )
    return type(actual) in (int, float, str, type(None)) and actual == expected
