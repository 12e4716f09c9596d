"""A client worker: an agent that submits its share of the orders through writesafe and retries
as a real agent would — the same key, bounded, doing what each envelope's `next_action` says.

Every answer is journaled (one JSON line, flushed) so that a worker SIGKILLed and restarted by the
harness resumes from its journal: finished orders are skipped, corrections and fresh tokens are
remembered, and the order it was writing when killed is retried with the same key.

Each worker is also the *twin* of the worker before it: the orders the plan duplicates are
submitted by both, the twin at about the moment the owner reaches them, with the first payload
and token the owner used (a duplicate from another process, such as a redelivered job). The twin's
journal lines carry `"twin": true` and do not count as the owner's tries or final answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from tests.chaos._plan import order_refs
from tests.chaos.app import PLAN, submit_order, ws
from writesafe import ErrorEnvelope, WriteSafeError

MAX_TRIES = 25
MAX_SLEEP_SECONDS = 2.0


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The journal's complete lines (a SIGKILL may leave half a line at the end)."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


class Agent:
    def __init__(self, journal: TextIO, history: list[dict[str, Any]]) -> None:
        self._journal = journal
        # Own orders taken up: the pace of the twin's.
        self.started = sum(1 for e in history if e["kind"] == "final" and not e.get("twin"))
        self.progress = asyncio.Condition()
        self.corrections: Counter[str] = Counter()
        self.renewals: Counter[str] = Counter()
        # Tries count across restarts, the owner's and the twin's apart: a worker killed faster
        # than it can use up an order's tries (the last order left, waiting on an operator, or
        # with no reconciler to settle it) would otherwise never finish.
        self.tries: Counter[str] = Counter()
        self.twin_tries: Counter[str] = Counter()
        for entry in history:
            self._remember(entry)

    def _remember(self, entry: dict[str, Any]) -> None:
        if entry.get("twin"):
            # (A twin's envelopes change nothing else: its payload and token are the first.)
            if entry["kind"] != "final":
                self.twin_tries[entry["ref"]] += 1
            return
        if entry["kind"] != "final":
            self.tries[entry["ref"]] += 1
        code = (entry.get("envelope") or {}).get("code")
        if code == "INPUT_INVALID":
            self.corrections[entry["ref"]] += 1
        elif code == "AUTH_REQUIRED":
            self.renewals[entry["ref"]] += 1

    def _write(self, entry: dict[str, Any]) -> None:
        self._remember(entry)
        # The time helps to read a violation against the shop's and the ledger's; it is this
        # process's clock, skew included (the worker's log names its skew).
        self._journal.write(json.dumps({**entry, "at": time.time()}) + "\n")
        self._journal.flush()

    def payload(self, ref: str) -> dict[str, Any]:
        # A corrected order differs from the rejected one: that is the evidence a continuation
        # after INPUT_INVALID needs.
        return {"sku": "A1", "qty": 1, "postcode": f"56{self.corrections[ref]:04d}"}

    async def order(self, ref: str) -> None:
        async with self.progress:
            self.started += 1
            self.progress.notify_all()
        final = "gave_up"
        for _ in range(MAX_TRIES - self.tries[ref]):
            answer = await self._submit(ref, self.payload(ref), f"t{self.renewals[ref]}", {})
            if answer in ("correct_input", "authenticate", "retry_after_delay", "reconcile"):
                continue
            final = answer
            break
        self._write({"ref": ref, "kind": "final", "final": final})

    async def duplicate(self, ref: str) -> None:
        """Submit another worker's order as it does at first: same key, payload and token.
        What the envelope asks the owner to change (input, token) the twin leaves to it."""
        final = "gave_up"
        twin = {"twin": True}
        for _ in range(MAX_TRIES - self.twin_tries[ref]):
            answer = await self._submit(ref, self.payload(ref), "t0", twin)
            if answer not in ("retry_after_delay", "reconcile"):
                final = answer
                break
        self._write({"ref": ref, "kind": "final", "final": final, **twin})

    async def _submit(
        self, ref: str, payload: dict[str, Any], auth_context: str, extra: dict[str, Any]
    ) -> str:
        """One call, journaled; what the agent does next: the envelope's next action (after
        waiting its delay), or how the order ended (`result`, `envelope`, `untyped`)."""
        try:
            result = await submit_order(payload, idempotency_key=ref, auth_context=auth_context)
        except WriteSafeError as error:
            wire = error.envelope.to_json_dict()
            ErrorEnvelope.model_validate(wire)  # the wire form must read back
            self._write({"ref": ref, "kind": "envelope", "envelope": wire, **extra})
            action: str = wire["next_action"]
            if action in ("retry_after_delay", "reconcile"):
                delay = (wire["retry_after_ms"] or 500) / 1000
                await asyncio.sleep(min(delay, MAX_SLEEP_SECONDS))
            if action in ("correct_input", "authenticate", "retry_after_delay", "reconcile"):
                return action
            return "envelope"
        except Exception as error:  # the contract says this never happens: record it
            ours = ("/idempotency/", "/ledger/", "/reconciler/")
            frames = [
                f
                for f in traceback.extract_tb(error.__traceback__)
                if any(part in f.filename for part in ours)
            ]
            where = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in frames]
            self._write(
                {"ref": ref, "kind": "untyped", "error": repr(error)[:500], "where": where, **extra}
            )
            return "untyped"
        self._write({"ref": ref, "kind": "result", "result": result, **extra})
        return "result"


async def run(args: argparse.Namespace) -> None:
    journal_path = Path(args.run_dir) / f"journal-{args.index}.jsonl"
    history = read_journal(journal_path)
    finished = {(e["ref"], bool(e.get("twin"))) for e in history if e["kind"] == "final"}
    refs = order_refs(args.seed, args.orders)
    queue: asyncio.Queue[str] = asyncio.Queue()
    for ref in refs[args.index :: args.workers]:
        if (ref, False) not in finished:
            queue.put_nowait(ref)
    # The twin's orders, each with the position the owner reaches it at.
    owner = (args.index - 1) % args.workers
    twins: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    if args.workers > 1:
        for position, ref in enumerate(refs[owner :: args.workers]):
            if PLAN.duplicated(ref) and (ref, True) not in finished:
                twins.put_nowait((position, ref))
    with journal_path.open("a") as journal:
        agent = Agent(journal, history)

        async def lane() -> None:
            while not queue.empty():
                await agent.order(queue.get_nowait())

        async def twin_lane() -> None:
            while not twins.empty():
                position, ref = twins.get_nowait()
                async with agent.progress:
                    await agent.progress.wait_for(
                        lambda: agent.started >= position or queue.empty()  # noqa: B023
                    )
                await agent.duplicate(ref)

        try:
            await asyncio.gather(
                *(lane() for _ in range(args.concurrency)), twin_lane(), twin_lane()
            )
        finally:
            await ws.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--orders", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--concurrency", type=int, default=8)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
