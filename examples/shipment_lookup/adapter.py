"""The shipment dependency's codes on the contract: one exact rule per code it documents.

Its INVALID_ARGUMENT names its own field (`ref`); the tool's parameter is `shipment_ref`, so the
adapter translates the name. The lookup is read-only, so nothing it answers can have had an
effect: the final rule proves `side_effects: none` for every other answer, which stays
UNKNOWN_ERROR (no retry, raw response kept) but needs no reconciliation.
"""

from __future__ import annotations

from writesafe.reconciler import Code, ResponseAdapter, Rule, SideEffects, Untrusted

SHIPMENT_ADAPTER = ResponseAdapter(
    name="shipment-lookup",
    version="1",
    rules=(
        Rule(Code.INPUT_INVALID, body={"code": "INVALID_ARGUMENT"}, field_from="field"),
        Rule(Code.AUTH_REQUIRED, body={"code": "AUTH_REQUIRED"}),
        Rule(Code.TEMP_UNAVAILABLE, body={"code": "TEMP_UNAVAILABLE"}, retry_after_ms=1_000),
        Rule(Code.ACCESS_DENIED, body={"code": "ACCESS_DENIED"}),
        Rule(
            Code.UNKNOWN_ERROR,
            side_effects=SideEffects.NONE,
            cause=Untrusted.NO_RULE.value,
            name="read-only fallback",
        ),
    ),
    fields={"ref": "shipment_ref"},
)
