"""The key store's cached outcome survives its Redis text form exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from idempotency._keystore import CachedOutcome

printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1)


@given(
    tool=printable,
    executions=st.integers(min_value=1, max_value=10_000),
    max_executions=st.integers(min_value=1, max_value=10_000),
    result=st.text(),
)
def test_a_cached_outcome_round_trips(
    tool: str, executions: int, max_executions: int, result: str
) -> None:
    outcome = CachedOutcome("f" * 64, tool, executions, max_executions, result)
    assert CachedOutcome.decode(outcome.encode()) == outcome
