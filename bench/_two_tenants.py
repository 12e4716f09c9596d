"""`bench.service_load --tenants`: one tenant's status reads alone, then beside another tenant's
flood of 500-row listings, and the factor between the two.

Tenant B (the light one) reads statuses by key from `--light-clients` connections; a probe reads
`/healthz` (no database, no key) every 20 ms. Each runs for `--seconds` alone, then as long again
while tenant A (the heavy one) asks for 500-row pages (about 1 MB each) from `--heavy-clients`
connections of another process, each asking again as soon as it is answered, 429s included (a
client that ignores `Retry-After`: the worst case the bound must hold against). The per-key
rate limit is raised by default (`--per-key-limit`), so that what holds A back is its bound on
work in flight (`--work-units`); `--unbounded` switches every limit off, the bound included.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench._served import POOL, served
from bench._setup import isolated
from writesafe import WriteSafe
from writesafe.ledger import ApiKeys, Role
from writesafe.service import create_api_key

HEAVY, LIGHT = "bench-heavy", "bench-light"
_PAGE = 500
_LIGHT_OPERATIONS = 50
_LINES = 40  # line items in each seeded result: about 2 KB of JSON, as an order's result might be
_MAX_PHASE_SECONDS = 25.0  # two phases and a warm-up: at most 55 s of traffic
_PROBE_EVERY = 0.02
_WARM_UP_SECONDS = 3.0


@dataclass
class Phase:
    """What one phase saw: B's status latencies, /healthz latencies, and every status code."""

    light: list[float] = field(default_factory=list)
    health: list[float] = field(default_factory=list)
    light_statuses: Counter[int] = field(default_factory=Counter)
    heavy_statuses: Counter[int] = field(default_factory=Counter)
    seconds: float = 0.0


def _quantile(seconds: list[float], q: float) -> float:
    ordered = sorted(seconds)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def _ms(value: float) -> float:
    return round(value * 1000, 1)


async def _seed(ws: WriteSafe) -> tuple[str, str]:
    """A page's worth of operations for A, a few for B, and a reader key for each."""

    @ws.tool("bench_order")
    async def order(n: int) -> dict[str, Any]:
        lines = [
            {"sku": f"SKU-{n}-{i:03d}", "qty": i % 7 + 1, "cents": 1999} for i in range(_LINES)
        ]
        return {"order": n, "lines": lines}

    for scope, count in ((HEAVY, _PAGE), (LIGHT, _LIGHT_OPERATIONS)):
        for start in range(0, count, 20):  # waves the pool can hold
            await asyncio.gather(
                *(
                    order.key(f"op-{n}", scope=scope)(n)
                    for n in range(start, min(start + 20, count))
                )
            )
    store = ApiKeys(ws.ledger.engine)
    heavy = await create_api_key(store, scope=HEAVY, role=Role.READER, name="heavy")
    light = await create_api_key(store, scope=LIGHT, role=Role.READER, name="light")
    return heavy[1], light[1]


async def _phase(
    base_url: str, light: str, heavy: str | None, args: argparse.Namespace, seconds: float
) -> Phase:
    """B's reads and the probe for `seconds`; beside A's listings when `heavy` is given."""
    seen = Phase()
    flood = None if heavy is None else await _flooding(base_url, heavy, args.heavy_clients, seconds)
    deadline = time.monotonic() + seconds

    async def light_reads(client: httpx.AsyncClient, first: int) -> None:
        n = first
        while time.monotonic() < deadline:
            began = time.perf_counter()
            response = await client.get(f"/v1/operations/op-{n % _LIGHT_OPERATIONS}")
            seen.light_statuses[response.status_code] += 1
            if response.status_code == 200:
                seen.light.append(time.perf_counter() - began)
            n += 1

    async def probe(client: httpx.AsyncClient) -> None:
        while time.monotonic() < deadline:
            began = time.perf_counter()
            response = await client.get("/healthz")
            if response.status_code == 200:
                seen.health.append(time.perf_counter() - began)
            await asyncio.sleep(_PROBE_EVERY)

    began = time.perf_counter()
    async with _client(base_url, light, args.light_clients) as b, _client(base_url, None, 1) as h:
        await asyncio.gather(*(light_reads(b, n) for n in range(args.light_clients)), probe(h))
    if flood is not None:
        seen.heavy_statuses = await asyncio.to_thread(_flooded, *flood)
    seen.seconds = time.perf_counter() - began
    return seen


def _client(base_url: str, token: str | None, width: int) -> httpx.AsyncClient:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=width, max_keepalive_connections=width)
    return httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=60)


_Flood = tuple[BaseProcess, "Queue[dict[int, int]]"]


async def _flooding(base_url: str, token: str, clients: int, seconds: float) -> _Flood:
    """A's listings, from a process of their own (once they start): reading A's megabyte pages
    would otherwise slow the loop that times B's answers, and B's figures would be the client's."""
    context = multiprocessing.get_context("spawn")
    statuses: Queue[dict[int, int]] = context.Queue()
    ready = context.Event()
    process = context.Process(
        target=_flood, args=(base_url, token, clients, seconds, ready, statuses)
    )
    process.start()
    await asyncio.to_thread(ready.wait, 60)
    return process, statuses


def _flooded(process: BaseProcess, statuses: Queue[dict[int, int]]) -> Counter[int]:
    seen = Counter(statuses.get(timeout=120))
    process.join(timeout=30)
    return seen


def _flood(
    base_url: str,
    token: str,
    clients: int,
    seconds: float,
    ready: EventType,
    out: Queue[dict[int, int]],
) -> None:
    """The flood's process: `clients` connections asking for 500-row pages for `seconds`."""
    seen: Counter[int] = Counter()

    async def listings(client: httpx.AsyncClient, deadline: float) -> None:
        while time.monotonic() < deadline:
            response = await client.get("/v1/operations", params={"limit": _PAGE})
            seen[response.status_code] += 1

    async def flood() -> None:
        ready.set()
        deadline = time.monotonic() + seconds
        async with _client(base_url, token, clients) as a:
            await asyncio.gather(*(listings(a, deadline) for _ in range(clients)))

    asyncio.run(flood())
    out.put(dict(seen))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    redis_url = args.redis_url if args.backend == "pg+redis" else None
    seconds = min(args.seconds, _MAX_PHASE_SECONDS)
    service = {
        "rate_limits": not args.unbounded,
        "rate_limit_per_key": args.per_key_limit,
        "tenant_work_units": args.work_units,
    }
    async with isolated("service_tenants", args.database_url, args.redis_url) as iso:
        options: dict[str, Any] = {"schema": iso.schema, "redis_prefix": iso.redis_prefix}
        async with WriteSafe(args.database_url, redis_url, auto_migrate=True, **options) as ws:
            heavy, light = await _seed(ws)
        async with served(args.database_url, redis_url, iso, service) as server:
            await _phase(server.base_url, light, heavy, args, _WARM_UP_SECONDS)
            alone = await _phase(server.base_url, light, None, args, seconds)
            beside = await _phase(server.base_url, light, heavy, args, seconds)
    return _report(args, service, seconds, alone, beside)


def _report(
    args: argparse.Namespace, service: dict[str, Any], seconds: float, alone: Phase, beside: Phase
) -> dict[str, Any]:
    b50, b95 = statistics.median(alone.light), _quantile(alone.light, 0.95)
    n50, n95 = statistics.median(beside.light), _quantile(beside.light, 0.95)
    h50, hn50 = statistics.median(alone.health), statistics.median(beside.health)
    listed = beside.heavy_statuses.get(200, 0)
    return {
        "settings": {
            "backend": args.backend,
            "rate_limits": service["rate_limits"],
            "per_key_limit": service["rate_limit_per_key"],
            "tenant_work_units": service["tenant_work_units"] if service["rate_limits"] else None,
            "guard_pool": POOL,
            "heavy_clients": args.heavy_clients,
            "light_clients": args.light_clients,
            "page_rows": _PAGE,
            "phase_seconds": seconds,
        },
        "light_status_p50_ms": {"alone": _ms(b50), "beside": _ms(n50)},
        "light_status_p95_ms": {"alone": _ms(b95), "beside": _ms(n95)},
        "healthz_p50_ms": {"alone": _ms(h50), "beside": _ms(hn50)},
        "factor_p50": round(n50 / b50, 1),
        "factor_p95": round(n95 / b95, 1),
        "factor_healthz_p50": round(hn50 / h50, 1),
        "light_reads_per_second": {
            "alone": round(len(alone.light) / alone.seconds),
            "beside": round(len(beside.light) / beside.seconds),
        },
        "light_statuses": _codes(alone.light_statuses + beside.light_statuses),
        "heavy_statuses": _codes(beside.heavy_statuses),
        "heavy_pages_per_second": round(listed / beside.seconds, 1),
    }


def _codes(statuses: Counter[int]) -> dict[str, int]:
    return {str(status): count for status, count in sorted(statuses.items())}


def show(report: dict[str, Any]) -> None:
    table = Table(title="tenant B's status reads alone and beside tenant A's 500-row listings")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in report.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        table.add_row(name, str(value))
    Console().print(table)
