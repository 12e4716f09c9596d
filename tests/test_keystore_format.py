"""The key store's cached outcome survives its Redis text form, and Redis itself, exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REDIS_URL
from writesafe.idempotency._keystore import RedisKeyStore
from writesafe.idempotency._store_answers import CachedOutcome, LeaseState

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


@pytest.mark.parametrize(
    "result",
    ['"a\\r\\nb"', "raw\r\n$5\r\n*2\r\n", '"\u00e9\u6f22\U0001f600"', '""', "0"],
)
async def test_a_cached_outcome_survives_redis_byte_for_byte(
    redis_prefix: str, result: str
) -> None:
    """The key store frames its own commands: protocol characters and multi-byte text in a
    result must come back exactly as they were written."""
    store = RedisKeyStore(REDIS_URL, prefix=redis_prefix)
    outcome = CachedOutcome("f" * 64, "submit", 1, 3, result)
    try:
        await store.cache("default", "k", outcome)
        claim = await store.claim("default", "k", "owner/f", 15)
    finally:
        await store.close()
    assert (claim.state, claim.outcome) == (LeaseState.CACHED, outcome)
