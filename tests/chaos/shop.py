"""A small shop that misbehaves on purpose: orders keyed by client reference, faults by plan.

    python -m tests.chaos.shop --db shop.db --port 8123 --plan '<plan json>'

`POST /orders` creates an order (it does NOT deduplicate by reference: a second effect must stay
visible to the checker), misbehaving as the seeded plan says for that reference's n-th request.
With the plan's `fenced` downstream it checks the `Fencing-Token` a fenced client forwards: a
request whose token is lower than the highest this reference has sent is refused (409) before
anything else, as a downstream that keeps the highest token per key would; the `plain` downstream
checks nothing. `GET /orders/{ref}` is the lookup by client reference. Every request and its fault
is logged in the shop's own SQLite table `requests`, the ground truth the checker reads; refused
ones in `refusals`.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from tests.chaos._plan import Downstream, Fault, Plan, plan_from_json

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ref TEXT NOT NULL, payload TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS ix_orders_ref ON orders (ref);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ref TEXT NOT NULL, n INTEGER NOT NULL,
    fault TEXT NOT NULL, token INTEGER, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS ix_requests_ref ON requests (ref);
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ref TEXT NOT NULL, token INTEGER NOT NULL,
    highest INTEGER NOT NULL, at REAL NOT NULL);
"""


class OrderRequest(BaseModel):
    ref: str
    sku: str
    qty: int
    postcode: str


class _Dropped(Response):
    """Announces a body longer than it sends: the server closes the connection mid-response."""

    def __init__(self) -> None:
        super().__init__(content=b'{"order_id"', media_type="application/json")
        self.headers["content-length"] = "4096"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


def open_db(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(SCHEMA)
    return db


def create_app(db_path: str, plan: Plan) -> FastAPI:
    db = open_db(db_path)
    timings = plan.timings
    background: set[asyncio.Task[None]] = set()
    app = FastAPI(title="chaos shop")

    def commit(order: OrderRequest) -> dict[str, Any]:
        cursor = db.execute(
            "INSERT INTO orders (ref, payload, created_at) VALUES (?, ?, ?)",
            (order.ref, order.model_dump_json(), time.time()),
        )
        return {"order_id": f"o{cursor.lastrowid}", "ref": order.ref}

    def log_request(ref: str, token: int | None) -> Fault:
        (n,) = db.execute("SELECT count(*) FROM requests WHERE ref = ?", (ref,)).fetchone()
        fault = plan.fault(ref, n)
        db.execute(
            "INSERT INTO requests (ref, n, fault, token, at) VALUES (?, ?, ?, ?, ?)",
            (ref, n, fault.value, token, time.time()),
        )
        return fault

    def stale(ref: str, token: int | None) -> bool:
        """A fenced downstream's check: has this reference sent a higher token already?"""
        if plan.downstream is Downstream.PLAIN or token is None:
            return False
        (highest,) = db.execute("SELECT max(token) FROM requests WHERE ref = ?", (ref,)).fetchone()
        if highest is None or token >= highest:
            return False
        db.execute(
            "INSERT INTO refusals (ref, token, highest, at) VALUES (?, ?, ?, ?)",
            (ref, token, highest, time.time()),
        )
        return True

    async def commit_later(order: OrderRequest, token: int | None) -> None:
        await asyncio.sleep(timings.late_commit)
        # A fenced downstream checks the token where it writes: a newer execution's request
        # may have arrived while this one waited to commit.
        if not stale(order.ref, token):
            commit(order)

    @app.post("/orders", status_code=201)
    async def submit(
        order: OrderRequest, fencing_token: int | None = Header(default=None)
    ) -> Response:
        if stale(order.ref, fencing_token):
            return JSONResponse({"reason": "stale fencing token"}, status_code=409)
        fault = log_request(order.ref, fencing_token)
        if fault is Fault.INPUT_INVALID:
            body = {"code": "INPUT_INVALID", "field": "postcode", "message": "not served"}
            return JSONResponse(body, status_code=422)
        if fault is Fault.AUTH_REQUIRED:
            return JSONResponse({"error": "unauthenticated"}, status_code=401)
        if fault is Fault.DEPENDENCY_BUSY:
            headers = {"Retry-After": str(timings.retry_after_seconds)}
            return JSONResponse({"reason": "LOCKED"}, status_code=503, headers=headers)
        if fault is Fault.HANG_NO_COMMIT:
            await asyncio.sleep(timings.hang)
            return JSONResponse({"reason": "gave up"}, status_code=503)
        if fault is Fault.COMMIT_LATE:
            task = asyncio.create_task(commit_later(order, fencing_token))
            background.add(task)
            task.add_done_callback(background.discard)
            await asyncio.sleep(timings.hang)
            return JSONResponse({"reason": "accepted late"}, status_code=202)
        created = commit(order)
        if fault is Fault.COMMIT_THEN_HANG:
            await asyncio.sleep(timings.hang)
        if fault is Fault.COMMIT_THEN_DROP:
            return _Dropped()
        return JSONResponse(created, status_code=201)

    @app.get("/orders/{ref}")
    async def lookup(ref: str) -> Response:
        if plan.lookup_broken(ref):
            return JSONResponse({"reason": "lookup unavailable"}, status_code=503)
        row = db.execute(
            "SELECT id FROM orders WHERE ref = ? ORDER BY id LIMIT 1", (ref,)
        ).fetchone()
        if row is None:
            return JSONResponse({"reason": "no such order"}, status_code=404)
        return JSONResponse({"order_id": f"o{row[0]}", "ref": ref})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--plan", required=True, help="the plan as JSON (tests.chaos._plan)")
    args = parser.parse_args()
    app = create_app(args.db, plan_from_json(args.plan))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="critical", access_log=False)


if __name__ == "__main__":
    main()
