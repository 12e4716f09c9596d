"""A client worker: an agent that submits its share of the orders through writesafe and retries
as a real agent would — the same key, bounded, doing what each envelope's `next_action` says.

Every answer is journaled (one JSON line, flushed) so that a worker SIGKILLed and restarted by the
harness resumes from its journal: finished orders are skipped, corrections and fresh tokens are
remembered, and the order it was writing when killed is retried with the same key.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

from idempotency import ErrorEnvelope, WriteSafeError
from tests.chaos._plan import order_refs
from tests.chaos.app import submit_order, ws

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
        self.corrections: Counter[str] = Counter()
        self.renewals: Counter[str] = Counter()
        # Tries count across restarts: a worker killed faster than it can use up an order's
        # tries (the last order left, waiting on an operator) would otherwise never finish.
        self.tries: Counter[str] = Counter()
        for entry in history:
            self._remember(entry)

    def _remember(self, entry: dict[str, Any]) -> None:
        if entry["kind"] != "final":
            self.tries[entry["ref"]] += 1
        code = (entry.get("envelope") or {}).get("code")
        if code == "INPUT_INVALID":
            self.corrections[entry["ref"]] += 1
        elif code == "AUTH_REQUIRED":
            self.renewals[entry["ref"]] += 1

    def _write(self, entry: dict[str, Any]) -> None:
        self._remember(entry)
        self._journal.write(json.dumps(entry) + "\n")
        self._journal.flush()

    def payload(self, ref: str) -> dict[str, Any]:
        # A corrected order differs from the rejected one: that is the evidence a continuation
        # after INPUT_INVALID needs.
        return {"sku": "A1", "qty": 1, "postcode": f"56{self.corrections[ref]:04d}"}

    async def order(self, ref: str) -> None:
        final = "gave_up"
        for _ in range(MAX_TRIES - self.tries[ref]):
            try:
                result = await submit_order(
                    self.payload(ref), idempotency_key=ref, auth_context=f"t{self.renewals[ref]}"
                )
            except WriteSafeError as error:
                wire = error.envelope.to_json_dict()
                ErrorEnvelope.model_validate(wire)  # the wire form must read back
                self._write({"ref": ref, "kind": "envelope", "envelope": wire})
                action = wire["next_action"]
                if action in ("correct_input", "authenticate"):
                    continue
                if action in ("retry_after_delay", "reconcile"):
                    delay = (wire["retry_after_ms"] or 500) / 1000
                    await asyncio.sleep(min(delay, MAX_SLEEP_SECONDS))
                    continue
                final = "envelope"
                break
            except Exception as error:  # the contract says this never happens: record it
                ours = ("/idempotency/", "/ledger/", "/reconciler/")
                frames = [
                    f
                    for f in traceback.extract_tb(error.__traceback__)
                    if any(part in f.filename for part in ours)
                ]
                where = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in frames]
                self._write(
                    {"ref": ref, "kind": "untyped", "error": repr(error)[:500], "where": where}
                )
                final = "untyped"
                break
            else:
                self._write({"ref": ref, "kind": "result", "result": result})
                final = "result"
                break
        self._write({"ref": ref, "kind": "final", "final": final})


async def run(args: argparse.Namespace) -> None:
    journal_path = Path(args.run_dir) / f"journal-{args.index}.jsonl"
    history = read_journal(journal_path)
    finished = {e["ref"] for e in history if e["kind"] == "final"}
    mine = order_refs(args.seed, args.orders)[args.index :: args.workers]
    queue: asyncio.Queue[str] = asyncio.Queue()
    for ref in mine:
        if ref not in finished:
            queue.put_nowait(ref)
    with journal_path.open("a") as journal:
        agent = Agent(journal, history)

        async def lane() -> None:
            while not queue.empty():
                await agent.order(queue.get_nowait())

        try:
            await asyncio.gather(*(lane() for _ in range(args.concurrency)))
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
