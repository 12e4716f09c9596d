"""The typed causes an envelope carries in its `cause` member, so that software can tell why
without reading the message.

UNKNOWN_ERROR says why nothing more specific could be trusted (`Untrusted`); OUTCOME_UNKNOWN says
how the answer was lost (`Lost`, the distinction the WebMCP codes draw) or, answered again, why
it is still not settled (`Unsettled`); RETRY_EXHAUSTED names the code whose retries used up the
budget; `ledger` and `key_store` name writesafe's own stores as the dependency at fault.
"""

from __future__ import annotations

from enum import StrEnum


class Untrusted(StrEnum):
    """The exact reason an answer became UNKNOWN_ERROR instead of what it claimed to be."""

    # The answer is not an envelope at all.
    NOT_JSON = "not_json"
    TOO_LARGE = "too_large"
    NOT_AN_OBJECT = "not_an_object"
    INVALID_ENVELOPE = "invalid_envelope"
    # It is one, but its meaning contradicts the contract.
    UNREGISTERED_CODE = "unregistered_code"
    VERDICT_CONTRADICTED = "verdict_contradicted"
    FIELD_MISSING = "field_missing"
    FIELD_UNEXPECTED = "field_unexpected"
    DELAY_OUT_OF_RANGE = "delay_out_of_range"
    UNPROVEN_NO_EFFECT = "unproven_no_effect"
    # The rendering around it cannot be trusted.
    NOT_AN_ERROR = "not_an_error"
    NOT_COMPLETE = "not_complete"
    EMPTY_CONTENT = "empty_content"
    NO_ENVELOPE = "no_envelope"
    COPIES_DISAGREE = "copies_disagree"
    NOT_WEBMCP = "not_webmcp"
    # Nothing that produces envelopes recognised the failure.
    NO_RULE = "no_rule"
    REFUSED_REQUEST = "refused_request"  # a client error that names nothing to correct
    ADAPTER_FAILED = "adapter_failed"
    UNCLASSIFIED_EXCEPTION = "unclassified_exception"
    NO_STORED_FAILURE = "no_stored_failure"
    # The effect proved absent, but the failure before it was one nobody classified.
    ABSENT_AFTER_UNCLASSIFIED = "absent_after_unclassified"
    # A bare WebMCP code said no more than this.
    TOOL_UNAVAILABLE = "tool_unavailable"
    BARE_FAILURE = "bare_failure"


LEDGER = "ledger"
"""The cause of a failure of writesafe's own ledger (not of the tool's dependency): retry later,
or, where an execution may have run, reconcile."""


class LedgerCause(StrEnum):
    """What went wrong with the ledger, so that software can tell an outage from a mistake
    (`reconciler._ledger_causes` tells them apart)."""

    UNREACHABLE = "ledger_unreachable"  # the server did not answer, or the connection broke
    BUSY = "ledger_busy"  # the server or its pooler refused more clients, or a lock timed out
    BUDGET = "ledger_budget"  # this process's own connection budget stayed used up
    STATEMENT = "ledger_statement"  # the server rejected a statement: a defect, not an outage
    # Set up wrongly: schema missing or not migrated, wrong credentials or database, a pooler
    # that breaks prepared statements (`?pooler=transaction` is missing), a bad URL.
    MISCONFIGURED = "ledger_misconfigured"

    @property
    def retryable(self) -> bool:
        """Only an outage or a crowd passes; a mistake stays until someone fixes it."""
        return self in (LedgerCause.UNREACHABLE, LedgerCause.BUSY, LedgerCause.BUDGET)


KEY_STORE = "key_store"
"""The cause of a failure of writesafe's Redis key store (the HTTP service's rate limits and
readiness ask it; the guard itself never fails on it)."""


LEDGER_RESTORED = "ledger_restored"
"""The cause of a first execution that did not run because the ledger was restored and may have
forgotten it (`writesafe.reconciler._restored`)."""


class Lost(StrEnum):
    """How the answer of a call that may have had an effect was lost."""

    TIMEOUT = "timeout"  # no answer in time: it may or may not have worked
    INTERRUPTED = "interrupted"  # the connection broke after the request was sent
    CANCELLED = "cancelled"  # the call was cancelled while it ran


class Unsettled(StrEnum):
    """Why an unknown outcome, answered again, is still unknown (nothing ran again)."""

    NO_LOOKUP = "no_lookup"  # the tool has no lookup: nothing can settle it but an operator
    LOOKUP_UNKNOWN = "lookup_unknown"  # the lookup could not tell (it failed or said unknown)
    SETTLING = "settling"  # not found, but too soon after the send to prove absence
    NEEDS_ATTENTION = "needs_attention"  # reconciliation gave up: an operator must resolve it
