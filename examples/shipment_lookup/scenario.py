"""Run a recorded shipment-lookup case as a client would, and report what actually happened.

The client calls the guarded lookup with the case id as its idempotency key. When the envelope
asks for corrected input or a renewed login and the case scripts one, it calls again with the
same key (a continuation); otherwise it stops. Everything reported comes from observation: the
ledger's execution attempts (code, next action, start time on the simulated clock), the
dependency's request log (input, whether the token was accepted) and what each call returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from examples._sandbox import elapsed_ms, executions, sandbox
from examples.shipment_lookup.adapter import SHIPMENT_ADAPTER
from examples.shipment_lookup.dependency import (
    EXECUTION_HEADER,
    EXPIRED_TOKEN,
    VALID_TOKEN,
    ShipmentService,
)
from writesafe import WriteSafe, WriteSafeError
from writesafe.reconciler import Adapter, ErrorEnvelope

MAX_EXECUTIONS = 3
MAX_RENEWALS = 1

# This client has no operator to hand an unknown error to: for it, a handoff is where it stops.
CLIENT_ACTIONS = {"handoff": "stop"}


@dataclass(slots=True)
class Session:
    """The client's credentials; the tool sends them, the guard sees their hash as auth_context."""

    token: str = VALID_TOKEN


@dataclass(frozen=True, slots=True)
class CallEnd:
    """How one call ended: after which execution, with which client action."""

    last_execution: int
    action: str


class ShipmentRunner:
    """`writesafe contract check` runner for shipment_lookup.yaml."""

    backends: Mapping[str, Callable[[Sequence[Any]], ShipmentService]] = {
        "scripted": ShipmentService
    }
    adapters: Mapping[str, Adapter] = {"adapter": SHIPMENT_ADAPTER}
    default_pair = ("scripted", "adapter")
    declarations = Path(__file__).with_name("declarations.yaml")
    """The recorded file's vocabulary and wrong-result edits, which it cannot carry itself."""

    async def run(
        self,
        case: Mapping[str, Any],
        backend: Callable[[Sequence[Any]], ShipmentService],
        adapter: Adapter,
    ) -> dict[str, Any]:
        service = backend(case["dependency"])
        async with sandbox() as (ws, _clock):
            ends, disposition = await _client(ws, service, adapter, case)
            attempts = await executions(ws, case["id"])
        requests = {request.execution: request for request in service.requests}
        actions = {end.last_execution: end.action for end in ends}
        trace = []
        for attempt in attempts:
            number = attempt.execution or 0
            seen = requests.get(number)
            code = "OK" if attempt.outcome == "succeeded" else attempt.code
            action = actions.get(number) or _said(attempt.error)
            trace.append(
                [
                    number,
                    seen.shipment_ref if seen else None,
                    seen.auth_ok if seen else None,
                    code,
                    action,
                    elapsed_ms(attempt.started_at),
                ]
            )
        return {"trace": trace, "disposition": disposition}


async def _client(
    ws: WriteSafe, service: ShipmentService, adapter: Adapter, case: Mapping[str, Any]
) -> tuple[list[CallEnd], str]:
    session = Session()
    transport = service.transport()
    async with httpx.AsyncClient(transport=transport, base_url="https://shipments.test") as http:

        @ws.tool("shipment_lookup", adapter=adapter, max_executions=MAX_EXECUTIONS)
        async def lookup_shipment(shipment_ref: str) -> dict[str, Any]:
            execution = str(ws.current_operation().execution)
            response = await http.get(
                f"/shipments/{shipment_ref}",
                headers={"Authorization": f"Bearer {session.token}", EXECUTION_HEADER: execution},
            )
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result

        ends: list[CallEnd] = []
        renewals = 0
        calls = list(zip(case["inputs"], case["auth"], strict=True))
        for index, (reference, authenticated) in enumerate(calls):
            session.token = VALID_TOKEN if authenticated else EXPIRED_TOKEN
            try:
                await lookup_shipment.key(case["id"], auth_context=session.token)(reference)
            except WriteSafeError as error:
                envelope = error.envelope
                action = CLIENT_ACTIONS.get(envelope.next_action, envelope.next_action.value)
                ends.append(CallEnd(_executed(service), action))
                more = index + 1 < len(calls)
                if more and action == "correct_input":
                    continue
                if more and action == "authenticate" and renewals < MAX_RENEWALS:
                    renewals += 1
                    continue
                disposition = ws.codes.verdict(envelope.code).disposition
                return ends, disposition.value if disposition else envelope.code
            ends.append(CallEnd(_executed(service), "complete"))
            return ends, "success"
    raise AssertionError("a case always scripts at least one call")


def _executed(service: ShipmentService) -> int:
    return service.requests[-1].execution if service.requests else 0


def _said(envelope: ErrorEnvelope | None) -> str | None:
    return envelope.next_action.value if envelope else None


runner = ShipmentRunner()
