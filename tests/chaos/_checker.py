"""The invariant checker: the shop's orders against the ledger and against what callers were told.

Invariants (each violation is listed by reference, so a failing run says exactly what broke):
- at most one effect per logical order (`duplicates`);
- a final ledger state that agrees with the shop: succeeded ⇔ an order exists, failed ⇔ none, and
  the recorded result names the shop's order (`lost`, `phantom`, `wrong_result`);
- nothing left `in_flight` or `outcome_unknown` (`unresolved`);
- `needs_attention` only where the plan made the truth undecidable (`unexpected_escalation`);
- every caller got a result or a typed envelope, and every result names the shop's order
  (`untyped`, `unanswered`, `caller_wrong_result`).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.chaos._plan import Plan
from writesafe.ledger import Status, loads_json

VIOLATIONS = (
    "duplicates",
    "lost",
    "phantom",
    "wrong_result",
    "unresolved",
    "unexpected_escalation",
    "untyped",
    "unanswered",
    "caller_wrong_result",
)


@dataclass(frozen=True)
class LedgerRow:
    key: str
    status: Status
    result: str | None
    looked_up: bool  # at least one lookup attempt was recorded


@dataclass
class Verdict:
    """What the checker found: violations by kind (refs), and counts for the summary."""

    violations: dict[str, list[str]] = field(default_factory=lambda: {v: [] for v in VIOLATIONS})
    statuses: Counter[str] = field(default_factory=Counter)
    shop_faults: Counter[str] = field(default_factory=Counter)
    orders_with_effect: int = 0
    reconciled: int = 0
    escalated: int = 0
    answers: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())


def shop_state(db_path: str) -> tuple[dict[str, list[str]], Counter[str]]:
    """Order ids by reference, and requests by fault (refused stale tokens as `refused_stale`),
    from the shop's own database."""
    db = sqlite3.connect(db_path)
    try:
        orders: dict[str, list[str]] = {}
        for ref, order_id in db.execute("SELECT ref, id FROM orders ORDER BY id"):
            orders.setdefault(ref, []).append(f"o{order_id}")
        faults = Counter(dict(db.execute("SELECT fault, count(*) FROM requests GROUP BY fault")))
        (refused,) = db.execute("SELECT count(*) FROM refusals").fetchone()
        if refused:
            faults["refused_stale"] = refused
    finally:
        db.close()
    return orders, faults


def check(
    plan: Plan,
    refs: list[str],
    orders: dict[str, list[str]],
    shop_faults: Counter[str],
    ledger: dict[str, LedgerRow],
    journal: list[dict[str, Any]],
) -> Verdict:
    verdict = Verdict(shop_faults=shop_faults)
    bad = verdict.violations
    verdict.orders_with_effect = sum(1 for ref in refs if orders.get(ref))
    # A twin's final answer is not the owner's: the owner must have answered too.
    finals = {e["ref"]: e["final"] for e in journal if e["kind"] == "final" and not e.get("twin")}
    for entry in journal:
        verdict.answers[entry["kind"]] += entry["kind"] != "final"
        if entry["kind"] == "untyped":
            bad["untyped"].append(entry["ref"])
        if entry["kind"] == "result":
            effect = orders.get(entry["ref"], [])
            if not effect or entry["result"].get("order_id") != effect[0]:
                bad["caller_wrong_result"].append(entry["ref"])
    for ref in refs:
        effect = orders.get(ref, [])
        row = ledger.get(ref)
        if len(effect) > 1:
            bad["duplicates"].append(ref)
        if ref not in finals:  # (an untyped final answer is counted as `untyped`)
            bad["unanswered"].append(ref)
        if row is None:
            if effect:
                bad["lost"].append(ref)
            continue
        verdict.statuses[row.status.value] += 1
        if row.looked_up and row.status in (Status.SUCCEEDED, Status.FAILED):
            verdict.reconciled += 1
        if row.status in (Status.IN_FLIGHT, Status.OUTCOME_UNKNOWN):
            bad["unresolved"].append(ref)
        elif row.status is Status.NEEDS_ATTENTION:
            verdict.escalated += 1
            if not plan.lookup_broken(ref):
                bad["unexpected_escalation"].append(ref)
        elif row.status is Status.SUCCEEDED:
            if not effect:
                bad["phantom"].append(ref)
            elif row.result is None or loads_json(row.result).get("order_id") != effect[0]:
                bad["wrong_result"].append(ref)
        elif row.status is Status.FAILED and effect:
            bad["lost"].append(ref)
    return verdict
