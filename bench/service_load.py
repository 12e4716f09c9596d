"""A bounded load run of the service's status-by-key with rate limits on: errors, 429s and memory.

    python -m bench.service_load [--seconds 30] [--max-requests 20000] [--concurrency 8]
                                 [--keys 2] [--per-key-limit 10/second] [--backend pg+redis|pg]
    python -m bench.service_load --tenants [--seconds 15] [--heavy-clients 16]
                                 [--light-clients 4] [--work-units 16] [--unbounded]

`--tenants` measures two tenants side by side instead (`bench._two_tenants`).

`writesafe serve`'s application runs in a child process on 127.0.0.1 (an ephemeral port) over a
seeded, isolated ledger, with rate limits on: `--per-key-limit` per API key (low by default, so
that a loaded shared machine still reaches it) and the default 20/s per client without a valid
key. After a warm-up (at most 2,000 requests or 5 s), the parent sends `GET /v1/operations/{key}`
with `--keys` API keys, one request in ten with an unknown key, from `--concurrency` connections,
until `--seconds` (at most 40) or `--max-requests`; then 5 s of `/healthz`: at most 50 s of
traffic in all (setup and teardown come on top).
It reports every status seen (anything but 200, 429 and the unknown keys' 401 is an error), the
server's RSS after a warm-up and after the run, and, as the baseline of the same run, the rate of
`GET /healthz` (no database, no limit) against the rate of status-by-key.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from collections import Counter
from typing import Any

import httpx
import psutil
from rich.console import Console
from rich.table import Table

from bench import _two_tenants
from bench._cli import run_and_report
from bench._served import served
from bench._setup import isolated
from writesafe import WriteSafe
from writesafe.ledger import ApiKeys, Role
from writesafe.service import create_api_key

_SCOPE = "bench-tenant"
_OPERATIONS = 50
_MAX_LOAD_SECONDS = 40.0  # with the warm-up and /healthz: at most 50 s of traffic
_WARM_UP = 2_000


async def _seed(ws: WriteSafe, keys: int) -> list[str]:
    @ws.tool("bench_order")
    async def order(n: int) -> dict[str, int]:
        return {"order": n}

    for n in range(_OPERATIONS):
        await order.key(f"op-{n}", scope=_SCOPE)(n)
    store = ApiKeys(ws.ledger.engine)
    return [
        (await create_api_key(store, scope=_SCOPE, role=Role.READER, name=f"bench-{n}"))[1]
        for n in range(keys)
    ]


async def _load(
    base_url: str, tokens: list[str], *, path: str | None, seconds: float, limit: int, width: int
) -> tuple[Counter[int], float]:
    """Statuses seen and requests per second; `path` None: status-by-key with the API keys."""
    statuses: Counter[int] = Counter()
    sent = 0
    deadline = time.monotonic() + seconds
    began = time.perf_counter()

    async def connection(client: httpx.AsyncClient) -> None:
        nonlocal sent
        while sent < limit and time.monotonic() < deadline:
            n = sent
            sent += 1
            if path is not None:
                response = await client.get(path)
            else:
                token = (
                    tokens[n % len(tokens)] if n % 10 else f"wsk_{secrets.token_hex(6)}_{'x' * 43}"
                )
                response = await client.get(
                    f"/v1/operations/op-{n % _OPERATIONS}",
                    headers={"Authorization": f"Bearer {token}"},
                )
            statuses[response.status_code] += 1

    limits = httpx.Limits(max_connections=width, max_keepalive_connections=width)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        await asyncio.gather(*(connection(client) for _ in range(width)))
    return statuses, sum(statuses.values()) / (time.perf_counter() - began)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    redis_url = args.redis_url if args.backend == "pg+redis" else None
    async with isolated("service_load", args.database_url, args.redis_url) as iso:
        options: dict[str, Any] = {"schema": iso.schema, "redis_prefix": iso.redis_prefix}
        async with WriteSafe(args.database_url, redis_url, auto_migrate=True, **options) as ws:
            tokens = await _seed(ws, args.keys)
        service = {"rate_limits": True, "rate_limit_per_key": args.per_key_limit}
        async with served(args.database_url, redis_url, iso, service) as child:
            base_url = child.base_url
            server = psutil.Process(child.pid)
            width = args.concurrency
            await _load(base_url, tokens, path=None, seconds=5.0, limit=_WARM_UP, width=width)
            rss_before = server.memory_info().rss
            seconds = min(args.seconds, _MAX_LOAD_SECONDS)
            statuses, rate = await _load(
                base_url, tokens, path=None, seconds=seconds, limit=args.max_requests, width=width
            )
            rss_after = server.memory_info().rss
            health, health_rate = await _load(
                base_url, tokens, path="/healthz", seconds=5.0, limit=args.max_requests, width=width
            )
    expected = {200, 401, 429}
    return {
        "backend": args.backend,
        "per_key_limit": args.per_key_limit,
        "load_seconds": round(seconds, 1),
        "requests": sum(statuses.values()),
        "statuses": {str(status): count for status, count in sorted(statuses.items())},
        "errors": sum(count for status, count in statuses.items() if status not in expected),
        "healthz_errors": sum(count for status, count in health.items() if status != 200),
        "status_by_key_per_second": round(rate),
        "healthz_per_second": round(health_rate),
        "rate_ratio": round(rate / health_rate, 2),
        "server_rss_mib_before": round(rss_before / 2**20, 1),
        "server_rss_mib_after": round(rss_after / 2**20, 1),
        "rss_ratio": round(rss_after / rss_before, 3),
    }


def _print(report: dict[str, Any]) -> None:
    table = Table(title=f"status-by-key under load, rate limits on, {report['backend']}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in report.items():
        if name != "backend":
            table.add_row(name, str(value))
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, help="default 30; with --tenants, per phase: 15")
    parser.add_argument("--max-requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--keys", type=int, default=2)
    parser.add_argument(
        "--per-key-limit", help="default 10/second; with --tenants 100000/second (out of the way)"
    )
    parser.add_argument("--backend", choices=["pg+redis", "pg"], default="pg+redis")
    tenants = parser.add_argument_group("two tenants side by side (--tenants)")
    tenants.add_argument("--tenants", action="store_true")
    tenants.add_argument("--heavy-clients", type=int, default=16)
    tenants.add_argument("--light-clients", type=int, default=4)
    tenants.add_argument("--work-units", type=int, default=16, help="tenant_work_units")
    tenants.add_argument("--unbounded", action="store_true", help="every limit off, the bound too")
    run_and_report(parser, _dispatch, _show)


async def _dispatch(args: argparse.Namespace) -> dict[str, Any]:
    if args.tenants:
        args.seconds = 15.0 if args.seconds is None else args.seconds
        args.per_key_limit = args.per_key_limit or "100000/second"
        return await _two_tenants.run(args)
    args.seconds = 30.0 if args.seconds is None else args.seconds
    args.per_key_limit = args.per_key_limit or "10/second"
    return await run(args)


def _show(report: dict[str, Any]) -> None:
    (_two_tenants.show if "factor_p50" in report else _print)(report)


if __name__ == "__main__":
    main()
