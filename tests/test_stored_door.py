"""One door also for envelopes read back from the ledger: an edited row steers nothing.

A row's stored envelope is acted on by the guard (a repeat gets it back, a continuation is
decided by its code), by the replay gate (an unknown outcome without a lookup answers with it)
and shown by the read models. Each reads it through `admit_stored`: one that disagrees with its
code's verdict reads as UNKNOWN_ERROR, no retry, and the row keeps the raw text.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, update

from tests.conftest import MakeWriteSafe
from writesafe import ToolError, WriteSafe, WriteSafeError
from writesafe.ledger import Status
from writesafe.ledger._writer import operations
from writesafe.reconciler import SideEffects, Untrusted


async def _edit(ws: WriteSafe, key: str, **changes: object) -> str:
    """Rewrite members of the envelope stored under `key`, as a hand-edited row would; the
    edited text."""
    async with ws.ledger.engine.begin() as conn:
        where = operations.c.key == key
        text = (await conn.execute(select(operations.c.error).where(where))).scalar_one()
        edited = json.dumps({**json.loads(text), **changes})
        await conn.execute(update(operations).where(where).values(error=edited))
    return edited


async def _stored(ws: WriteSafe, key: str) -> str:
    async with ws.ledger.engine.connect() as conn:
        where = operations.c.key == key
        text: str = (await conn.execute(select(operations.c.error).where(where))).scalar_one()
        return text


async def test_the_guard_answers_a_repeat_with_the_admitted_envelope(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    calls = 0

    @ws.tool("order")
    async def order(sku: str) -> dict[str, str]:
        nonlocal calls
        calls += 1
        raise ToolError("INPUT_INVALID", "no such sku", field="sku")

    with pytest.raises(WriteSafeError):
        await order("A1", idempotency_key="k-edit")
    edited = await _edit(ws, "k-edit", retryable=True, next_action="retry_after_delay")
    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-edit")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.cause, envelope.retryable) == (
        "UNKNOWN_ERROR",
        Untrusted.VERDICT_CONTRADICTED,
        False,
    )
    assert envelope.side_effects is SideEffects.UNKNOWN
    assert envelope.operation is not None
    assert envelope.operation.status == Status.FAILED
    # Failed closed, it is terminal: a corrected input does not continue the key either.
    with pytest.raises(WriteSafeError) as corrected:
        await order("B2", idempotency_key="k-edit")
    assert corrected.value.envelope.code == "KEY_REUSED"
    assert calls == 1
    assert await _stored(ws, "k-edit") == edited  # the raw evidence stays in the row


async def test_the_replay_gate_answers_an_unknown_outcome_with_the_admitted_envelope(
    make_ws: MakeWriteSafe,
) -> None:
    ws = make_ws()
    calls = 0

    @ws.tool("order")  # no lookup: the gate answers with what the operation ended with
    async def order(sku: str) -> dict[str, str]:
        nonlocal calls
        calls += 1
        raise RuntimeError("nobody classified this")

    with pytest.raises(WriteSafeError) as first:
        await order("A1", idempotency_key="k-gate")
    assert first.value.envelope.code == "UNKNOWN_ERROR"
    await _edit(ws, "k-gate", field="postcode")
    with pytest.raises(WriteSafeError) as raised:
        await order("A1", idempotency_key="k-gate")
    envelope = raised.value.envelope
    assert (envelope.code, envelope.cause, envelope.field) == (
        "UNKNOWN_ERROR",
        Untrusted.FIELD_UNEXPECTED,
        None,
    )
    assert envelope.operation is not None
    assert envelope.operation.status == Status.OUTCOME_UNKNOWN
    assert calls == 1


async def test_the_read_models_show_the_admitted_envelope(make_ws: MakeWriteSafe) -> None:
    ws = make_ws()

    @ws.tool("order")
    async def order(sku: str) -> dict[str, str]:
        raise ToolError("ACCESS_DENIED", "not yours")

    with pytest.raises(WriteSafeError):
        await order("A1", idempotency_key="k-view")
    await _edit(ws, "k-view", field="postcode")
    status = await ws.status("k-view")
    assert status is not None
    assert status.error is not None
    assert (status.error.code, status.error.cause, status.error.field) == (
        "UNKNOWN_ERROR",
        Untrusted.FIELD_UNEXPECTED,
        None,
    )
    [run] = status.attempts
    assert run.error is not None
    assert run.error.code == "ACCESS_DENIED"
