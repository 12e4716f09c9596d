"""The contract itself: every built-in verdict, user codes, bounds, and fail-closed reading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from writesafe.reconciler import (
    CODES,
    Code,
    CodeRegistry,
    Disposition,
    ErrorEnvelope,
    NextAction,
    OperationInfo,
    SideEffects,
    ToolError,
    UnknownCode,
    Verdict,
    read_envelope,
)
from writesafe.reconciler._classify import classify_exception
from writesafe.reconciler._contract import BUILTIN_VERDICTS, MESSAGE_LIMIT
from writesafe.reconciler._problem import HTTP_STATUS
from writesafe.reconciler._schema import envelope_json_schema
from writesafe.reconciler._webmcp import WEBMCP_CODES

SCHEMA_FILE = Path(__file__).parent.parent / "docs" / "schema" / "writesafe.error.1.json"

N, U = SideEffects.NONE, SideEffects.UNKNOWN
A, D = NextAction, Disposition

# DESIGN.md's table, written out independently of the code's table.
EXPECTED_VERDICTS = {
    "INPUT_INVALID": (N, False, A.CORRECT_INPUT, D.NEEDS_INPUT),
    "AUTH_REQUIRED": (N, False, A.AUTHENTICATE, D.NEEDS_AUTH),
    "ACCESS_DENIED": (N, False, A.STOP, D.REFUSED),
    "TEMP_UNAVAILABLE": (N, True, A.RETRY_AFTER_DELAY, D.RETRY_EXHAUSTED),
    "DEPENDENCY_BUSY": (N, True, A.RETRY_AFTER_DELAY, D.RETRY_EXHAUSTED),
    "RATE_LIMITED": (N, True, A.RETRY_AFTER_DELAY, D.RETRY_EXHAUSTED),
    "OUTCOME_UNKNOWN": (U, False, A.RECONCILE, None),
    "IN_PROGRESS": (U, True, A.RETRY_AFTER_DELAY, None),
    "KEY_REUSED": (N, False, A.CORRECT_INPUT, None),
    "RETRY_EXHAUSTED": (N, False, A.STOP, D.RETRY_EXHAUSTED),
    "UNKNOWN_ERROR": (U, False, A.HANDOFF, D.UNKNOWN),
    "RESULT_NOT_STORED": (U, False, A.HANDOFF, D.UNKNOWN),
}


@pytest.mark.parametrize("code", EXPECTED_VERDICTS)
def test_every_builtin_verdict(code: str) -> None:
    side_effects, retryable, next_action, disposition = EXPECTED_VERDICTS[code]
    verdict = CODES.verdict(code)
    assert verdict == Verdict(side_effects, retryable, next_action, disposition)
    envelope = CODES.envelope(code, "m")
    assert (envelope.code, envelope.retryable, envelope.next_action, envelope.side_effects) == (
        code,
        retryable,
        next_action,
        side_effects,
    )


def test_the_builtin_table_has_exactly_the_designed_codes() -> None:
    assert set(BUILTIN_VERDICTS) == set(EXPECTED_VERDICTS) == {c.value for c in Code}


def test_user_codes_need_an_explicit_coherent_verdict() -> None:
    codes = CodeRegistry()
    verdict = Verdict("none", False, "correct_input", "needs_input")  # type: ignore[arg-type]
    codes.register("OUT_OF_STOCK", verdict)
    assert codes.verdict("OUT_OF_STOCK").next_action is NextAction.CORRECT_INPUT
    envelope = codes.envelope("OUT_OF_STOCK", "sold out", field="sku")
    assert (envelope.code, envelope.retryable, envelope.field) == ("OUT_OF_STOCK", False, "sku")
    assert "OUT_OF_STOCK" not in CODES  # registries are independent
    codes.register("OUT_OF_STOCK", verdict)  # the same verdict again is harmless
    with pytest.raises(ValueError, match="different verdict"):
        codes.register("OUT_OF_STOCK", Verdict(N, False, A.STOP, D.REFUSED))
    with pytest.raises(ValueError, match="different verdict"):
        codes.register("INPUT_INVALID", Verdict(N, True, A.RETRY_AFTER_DELAY, None))
    with pytest.raises(ValueError, match="UPPER_SNAKE_CASE"):
        codes.register("out-of-stock", verdict)


@pytest.mark.parametrize(
    "incoherent",
    [
        (N, True, A.STOP, None),  # retryable but told to stop
        (N, False, A.RETRY_AFTER_DELAY, None),  # told to retry but not retryable
        (N, False, A.RECONCILE, None),  # reconcile what had no effect?
        ("maybe", False, A.STOP, None),
        (N, "no", A.STOP, None),
        (N, False, "dance", None),
        (N, False, A.STOP, "eventually"),
    ],
)
def test_incoherent_verdicts_are_refused(incoherent: tuple[Any, ...]) -> None:
    with pytest.raises((ValueError, TypeError)):
        Verdict(*incoherent)


def test_unknown_codes_fail_closed() -> None:
    with pytest.raises(UnknownCode):
        CODES.verdict("SHIPMENT_QUANTUM_FLUX")
    envelope = CODES.envelope("SHIPMENT_QUANTUM_FLUX", "please try again")
    assert envelope.code == Code.UNKNOWN_ERROR
    assert envelope.retryable is False
    assert envelope.next_action is NextAction.HANDOFF
    assert envelope.side_effects is SideEffects.UNKNOWN
    assert "SHIPMENT_QUANTUM_FLUX" in envelope.message
    raised = classify_exception(ToolError("SHIPMENT_QUANTUM_FLUX", "please try again"), CODES)
    assert raised.envelope.code == Code.UNKNOWN_ERROR


def test_messages_are_bounded_and_carry_no_tracebacks_or_control_characters() -> None:
    text = "bad\x00input\x1b[31m " + "x" * 2000
    envelope = CODES.envelope(Code.INPUT_INVALID, text)
    assert len(envelope.message) == MESSAGE_LIMIT
    assert "\x00" not in envelope.message
    assert "\x1b" not in envelope.message
    leaked = 'it broke\nTraceback (most recent call last):\n  File "x.py", line 1'
    assert CODES.envelope(Code.UNKNOWN_ERROR, leaked).message == "it broke"


def valid_wire() -> dict[str, Any]:
    operation = OperationInfo(key="k", status="failed", attempt=1, attempts_left=2)
    return CODES.envelope(Code.INPUT_INVALID, "m", field="f", operation=operation).to_json_dict()


@pytest.mark.parametrize(
    "change",
    [
        {"code": "VALIDATION_FAILED"},  # not registered
        {"retryable": True},  # contradicts INPUT_INVALID's verdict
        {"next_action": "retry_after_delay"},
        {"side_effects": "unknown"},
        {"schema": "writesafe.error/2"},
        {"retryable": "false"},  # wrong type
        {"retry_after_ms": -1},
        {"retry_after_ms": 1.5},
        {"code": "input_invalid"},
        {"extra": 1},
        {"operation": {"key": "k"}},
        {"message": None},
    ],
    ids=lambda change: ",".join(f"{k}={v}" for k, v in change.items()),
)
def test_malformed_envelopes_fail_closed(change: dict[str, Any]) -> None:
    found = read_envelope({**valid_wire(), **change})
    assert found.envelope.code == Code.UNKNOWN_ERROR
    assert found.envelope.side_effects is SideEffects.UNKNOWN
    assert found.evidence["raw"]["excerpt"]


def test_a_valid_envelope_is_read_back_exactly() -> None:
    wire = valid_wire()
    assert read_envelope(wire).envelope.to_json_dict() == wire
    assert read_envelope(json.dumps(wire)).envelope.to_json_dict() == wire
    minimal = {
        k: wire[k] for k in ("code", "message", "retryable", "next_action", "side_effects", "field")
    }
    assert read_envelope(minimal).envelope.code == Code.INPUT_INVALID


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
envelope_like = st.fixed_dictionaries(
    {},
    optional={
        key: json_values | st.sampled_from(values)
        for key, values in {
            "schema": ["writesafe.error/1"],
            "code": [c.value for c in Code] + ["NOPE"],
            "message": ["m"],
            "retryable": [True, False],
            "field": ["postcode"],
            "retry_after_ms": [0, 1000],
            "next_action": [a.value for a in NextAction],
            "side_effects": [s.value for s in SideEffects],
        }.items()
    },
)


@settings(max_examples=500, deadline=None)
@given(data=json_values | envelope_like)
def test_fuzzed_envelopes_are_either_coherent_or_unknown_error(data: Any) -> None:
    envelope = read_envelope(data).envelope
    verdict = CODES.verdict(envelope.code)
    assert envelope.retryable == verdict.retryable
    assert envelope.next_action is verdict.next_action


def test_committed_schema_is_what_the_model_generates() -> None:
    committed = json.loads(SCHEMA_FILE.read_text())
    assert committed == envelope_json_schema(), (
        "docs/schema/writesafe.error.1.json is stale: regenerate it with "
        "`writesafe contract schema > docs/schema/writesafe.error.1.json`"
    )


def test_emitted_envelopes_validate_against_the_published_schema() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    for code in Code:
        validator.validate(CODES.envelope(code, "m").to_json_dict())
    validator.validate(valid_wire())
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**valid_wire(), "retryable": "false"})
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**valid_wire(), "message": "x" * (MESSAGE_LIMIT + 1)})
    assert ErrorEnvelope.model_validate(valid_wire()).to_json_dict() == valid_wire()


def test_docs_table_states_every_code_as_built() -> None:
    """docs/contract.md's code table is the contract users read: it must be the code's."""
    text = (SCHEMA_FILE.parent.parent / "contract.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0] in CODES:
            rows[cells[0]] = cells[1:]
    assert set(rows) == {code.value for code in Code}
    for code, (side_effects, retryable, next_action, stops_as, http, webmcp) in rows.items():
        verdict = CODES.verdict(code)
        assert side_effects.rstrip("¹") == verdict.side_effects.value, code
        assert retryable == ("yes" if verdict.retryable else "no"), code
        assert next_action == verdict.next_action.value, code
        assert stops_as == (verdict.disposition.value if verdict.disposition else "—"), code
        assert int(http) == HTTP_STATUS[code][0], code
        assert webmcp == WEBMCP_CODES[code].value, code
