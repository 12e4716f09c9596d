"""Guard overhead: what a guarded call costs compared with the round trips it must make.

    python -m bench.guard [--rounds 10 --per-round 50] [--json]

Measures, interleaved in one run: the bare write; the embedded default (SQLite, no Redis);
PostgreSQL alone; Redis + PostgreSQL — each as a first execution, a replay of a finished key and
a concurrent duplicate arriving from another worker while the first is in flight; and the floor
with raw clients (Redis PING and GET, PostgreSQL SELECT 1 and a committed INSERT, a committed
SQLite INSERT with the ledger's PRAGMAs). It prints p50/p99 and the ratios the targets are set on.
Each backend's sync tool (a plain `def`, called blocking from this thread) is measured beside its
async tool: first execution and replay, as a ratio to the async path's. PostgreSQL's paths are
measured again on two more `WriteSafe`s made alike but for their clock: the server's (the
default) and the client's (`clock=SystemClock()`, the statements as they were before the one
clock), used by nothing else, so the one clock's cost is a ratio of two series of the same run.

The Redis floor is sent the way the guard sends its claim: packed by hand on a redis-py
connection, past redis-py's command layer. A GET through redis-py's client is measured too, for
comparison only: it is slower, so a floor taken with it would flatter the guard.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import aiosqlite
import asyncpg
from redis.asyncio import ConnectionPool, Redis
from rich.console import Console
from rich.table import Table

from bench._cli import add_sampling_options, run_and_report
from bench._setup import asyncpg_dsn, isolated
from bench._stats import Series, measure, us
from writesafe import SyncTool, Tool, WriteSafe
from writesafe.idempotency._redis_connections import RedisConnections, pack
from writesafe.ledger import Intent, Outcome, Status, SystemClock, dumps_json

ORDER = {"sku": "A1", "qty": 1, "postcode": "560001"}
DUPLICATE_WRITE_SECONDS = 0.01

# First execution: lease + intent commit + outcome commit + cache write.
FIRST_TARGET = 1.5
# Replay of a finished key: one Redis round trip.
REPLAY_TARGET = 2.0
# The sync path against the async path, first execution and replay alike.
SYNC_TARGET = 1.25
# The calls that the same-run ratios (sync, one clock) compare.
CALLS = ("first execution", "replay")
# The server's clock against the client's, same call, same run (issue 13's budget).
ONE_CLOCK_TARGET = 1.05
ONE_CLOCK_BACKENDS = ("pg", "pg+redis")
CLOCKS = {"server clock": None, "client clock": SystemClock()}

SEQUENCE = "floor: PING, INSERT, INSERT, PING in sequence"
CLIENT_GET = "(redis GET through redis-py's client)"
LEDGER_WRITES = "(the ledger's claim and finish, without the guard)"
FIRST = "pg+redis: first execution"
FIRST_AGAINST_SEQUENCE = "pg+redis: first execution (vs. in sequence)"
FIRST_AGAINST_LEDGER = "pg+redis: first execution (vs. its own writes)"
REPLAY = "pg+redis: replay"
REPLAY_AGAINST_CLIENT = "pg+redis: replay (vs. redis-py's GET)"


async def bare_write(order: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": f"o-{order['sku']}", "accepted": True}


def bare_sync_write(order: dict[str, Any]) -> dict[str, Any]:
    return {"order_id": f"o-{order['sku']}", "accepted": True}


def guarded(ws: WriteSafe) -> Tool[dict[str, Any]]:
    # Two steps: returned at once, the decorator's overloads both fit `Tool[...]`'s context.
    tool = ws.tool("bench_submit")(bare_write)
    return tool


def guarded_sync(ws: WriteSafe) -> SyncTool[dict[str, Any]]:
    return ws.tool("bench_submit_sync")(bare_sync_write)


class Duplicates:
    """A first call on one worker and the same key from another worker while it is in flight.

    The sample is the lag between the first call's return and the duplicate's: how long a
    duplicate waits beyond the write it is waiting for.
    """

    def __init__(self, first: WriteSafe, second: WriteSafe, label: str) -> None:
        self.label = label
        self.executions = 0
        self._started = asyncio.Event()

        async def slow_write(order: dict[str, Any]) -> dict[str, Any]:
            self.executions += 1
            self._started.set()
            await asyncio.sleep(DUPLICATE_WRITE_SECONDS)
            return await bare_write(order)

        self._first = first.tool("bench_slow")(slow_write)
        self._second = second.tool("bench_slow")(slow_write)

    async def sample(self, n: int) -> float:
        key = f"{self.label}-dup-{n}"
        self._started.clear()
        leader = asyncio.create_task(_timed(self._first.key(key)(ORDER)))
        await self._started.wait()
        follower = asyncio.create_task(_timed(self._second.key(key)(ORDER)))
        (first_result, first_done), (second_result, second_done) = await asyncio.gather(
            leader, follower
        )
        assert first_result == second_result, "a duplicate must get the first call's result"
        return second_done - first_done


async def _timed(call: Any) -> tuple[Any, float]:
    result = await call
    return result, time.perf_counter()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with isolated("guard", args.database_url, args.redis_url) as iso:
        workdir = iso.workdir
        pg = await asyncpg.connect(
            asyncpg_dsn(args.database_url), server_settings={"search_path": iso.schema}
        )
        await pg.execute("CREATE TABLE bench_floor (id bigserial PRIMARY KEY, k text, v text)")
        # The floor's Redis connections are configured as the key store's are.
        redis_pool = ConnectionPool.from_url(args.redis_url, socket_timeout=None)
        redis, hot = Redis.from_pool(redis_pool), RedisConnections(redis_pool)
        cached_key = f"{iso.redis_prefix}:floor"
        await redis.set(cached_key, "f" * 64 + "\n" + json.dumps(await bare_write(ORDER)))
        ping_command, get_command = pack(b"PING"), pack(b"GET", cached_key.encode())
        lite = await aiosqlite.connect(workdir / "floor.db", isolation_level=None)
        await lite.execute("PRAGMA journal_mode=WAL")
        await lite.execute("PRAGMA synchronous=FULL")
        await lite.execute("CREATE TABLE bench_floor (id INTEGER PRIMARY KEY, k TEXT, v TEXT)")

        def workers(*stores: str | None, **options: Any) -> tuple[WriteSafe, WriteSafe]:
            # Two WriteSafes on the same stores stand in for two worker processes.
            return WriteSafe(*stores, **options), WriteSafe(*stores, **options)

        embedded, embedded_b = workers(f"sqlite+aiosqlite:///{workdir / 'ledger.db'}")
        pg_only, pg_only_b = workers(args.database_url, schema=iso.schema, auto_migrate=True)
        full, full_b = workers(
            args.database_url,
            args.redis_url,
            schema=iso.schema,
            redis_prefix=iso.redis_prefix,
            auto_migrate=True,
        )
        # The same stores judged by the server's clock and by this process's: alike otherwise.
        clocked = {
            f"{label} ({name})": WriteSafe(*stores, schema=iso.schema, auto_migrate=True, **options)
            for name, clock in CLOCKS.items()
            for label, stores, options in (
                ("pg", (args.database_url,), {"clock": clock}),
                (
                    "pg+redis",
                    (args.database_url, args.redis_url),
                    {"clock": clock, "redis_prefix": iso.redis_prefix},
                ),
            )
        }
        all_ws = [embedded, embedded_b, pg_only, pg_only_b, full, full_b, *clocked.values()]
        try:
            for ws in all_ws:
                await ws.start()
            tools = {"embedded": embedded, "pg": pg_only, "pg+redis": full}
            guarded_tools = {label: guarded(ws) for label, ws in tools.items()}
            sync_tools = {label: guarded_sync(ws) for label, ws in tools.items()}
            clocked_tools = {label: guarded(ws) for label, ws in clocked.items()}
            for label, tool in (guarded_tools | clocked_tools).items():
                await tool(ORDER, idempotency_key=f"{label}-replay")
            for label, sync_tool in sync_tools.items():
                sync_tool(ORDER, idempotency_key=f"{label}-sync-replay")
            duplicates = {
                "embedded": Duplicates(embedded, embedded_b, "embedded"),
                "pg": Duplicates(pg_only, pg_only_b, "pg"),
                "pg+redis": Duplicates(full, full_b, "pg+redis"),
            }

            async def bare(n: int) -> None:
                await bare_write(ORDER)

            async def ping(n: int) -> None:
                await hot.execute(ping_command)

            async def get(n: int) -> None:
                await hot.execute(get_command)

            async def client_get(n: int) -> None:
                await redis.get(cached_key)

            async def select_1(n: int) -> None:
                await pg.fetchval("SELECT 1")

            async def pg_insert(n: int) -> None:
                await pg.execute("INSERT INTO bench_floor (k, v) VALUES ($1, $2)", str(n), "v")

            async def first_execution_round_trips(n: int) -> None:
                # The floor as the guard meets it: each server is idle while the other works.
                await ping(n)
                await pg_insert(n)
                await pg_insert(n)
                await ping(n)

            async def ledger_writes(n: int) -> None:
                # The two statements a first execution commits, with their real rows and
                # indexes, through the ledger's API: what is left above them is the guard's.
                intent = Intent(
                    scope="default",
                    key=f"ledger-{n}",
                    tool="bench_submit",
                    fingerprint="f" * 64,
                    arguments=dumps_json(ORDER),
                    owner=f"owner-{n}",
                    lease_seconds=15.0,
                    max_executions=3,
                )
                claim = await full.ledger.claim(intent)
                result = dumps_json(await bare_write(ORDER))
                await full.ledger.finish(
                    claim.operation, intent.owner, Outcome(Status.SUCCEEDED, result)
                )

            async def lite_insert(n: int) -> None:
                await lite.execute("INSERT INTO bench_floor (k, v) VALUES (?, ?)", (str(n), "v"))

            series = [
                Series("bare call", bare),
                Series("floor: redis PING", ping),
                Series("floor: redis GET", get),
                Series(CLIENT_GET, client_get),
                Series("floor: pg SELECT 1", select_1),
                Series("floor: pg committed INSERT", pg_insert),
                Series(SEQUENCE, first_execution_round_trips),
                Series(LEDGER_WRITES, ledger_writes),
                Series("floor: sqlite committed INSERT", lite_insert),
            ]
            for label, tool in guarded_tools.items():
                series.append(Series(f"{label}: first execution", _first(tool, label)))
                series.append(Series(f"{label}: replay", _replay(tool, label)))
                series.append(Series(f"{label}: in-flight duplicate lag", duplicates[label].sample))
                sync_tool = sync_tools[label]
                series.append(
                    Series(f"{label}: sync first execution", _first_sync(sync_tool, label))
                )
                series.append(Series(f"{label}: sync replay", _replay_sync(sync_tool, label)))
                if label in ONE_CLOCK_BACKENDS:
                    # The two clocks side by side, so both meet the same load.
                    for call, sample in (("first execution", _first), ("replay", _replay)):
                        for clock_label in (f"{label} ({name})" for name in CLOCKS):
                            clocked_sample = sample(clocked_tools[clock_label], clock_label)
                            series.append(Series(f"{clock_label}: {call}", clocked_sample))
            await measure(series, rounds=args.rounds, per_round=args.per_round)
            for label, dup in duplicates.items():
                expected = len(_by_name(series, f"{label}: in-flight duplicate lag").seconds) + 20
                assert dup.executions == expected, f"{label}: duplicates executed the write"
        finally:
            for ws in all_ws:
                await ws.close()
            await pg.close()
            await hot.close()
            await redis.aclose()
            await lite.close()
    return _report(series, args)


def _first(tool: Tool[dict[str, Any]], label: str) -> Any:
    async def sample(n: int) -> None:
        await tool(ORDER, idempotency_key=f"{label}-first-{n}")

    return sample


def _replay(tool: Tool[dict[str, Any]], label: str) -> Any:
    async def sample(n: int) -> None:
        await tool(ORDER, idempotency_key=f"{label}-replay")

    return sample


def _first_sync(tool: SyncTool[dict[str, Any]], label: str) -> Any:
    async def sample(n: int) -> None:
        # Blocking, from this thread, as a sync caller would: the guard runs on the sync face's
        # own loop thread and stores.
        tool(ORDER, idempotency_key=f"{label}-sync-first-{n}")

    return sample


def _replay_sync(tool: SyncTool[dict[str, Any]], label: str) -> Any:
    async def sample(n: int) -> None:
        tool(ORDER, idempotency_key=f"{label}-sync-replay")

    return sample


def _by_name(series: list[Series], name: str) -> Series:
    return next(s for s in series if s.name == name)


def _report(series: list[Series], args: argparse.Namespace) -> dict[str, Any]:
    p50 = {s.name: s.p50 for s in series}
    p99 = {s.name: s.p99 for s in series}
    ping, get = p50["floor: redis PING"], p50["floor: redis GET"]
    pg_insert, lite_insert = (
        p50["floor: pg committed INSERT"],
        p50["floor: sqlite committed INSERT"],
    )
    floors = {
        FIRST: 2 * ping + 2 * pg_insert,
        FIRST_AGAINST_SEQUENCE: p50[SEQUENCE],
        FIRST_AGAINST_LEDGER: 2 * ping + p50[LEDGER_WRITES],
        "pg: first execution": 2 * pg_insert,
        "embedded: first execution": 2 * lite_insert,
        REPLAY: get,
        REPLAY_AGAINST_CLIENT: p50[CLIENT_GET],
        "pg: replay": p50["floor: pg SELECT 1"],
    }
    # The context rows compare the same call against another floor.
    same_call = {
        FIRST_AGAINST_SEQUENCE: FIRST,
        FIRST_AGAINST_LEDGER: FIRST,
        REPLAY_AGAINST_CLIENT: REPLAY,
    }
    calls = {name: same_call.get(name, name) for name in floors}
    ratios = {name: p50[calls[name]] / floor for name, floor in floors.items()}
    sync_ratios = {
        f"{label}: sync {call}": p50[f"{label}: sync {call}"] / p50[f"{label}: {call}"]
        for label in ("embedded", "pg", "pg+redis")
        for call in CALLS
    }
    one_clock_ratios = {
        f"{label}: {call}": p50[f"{label} (server clock): {call}"]
        / p50[f"{label} (client clock): {call}"]
        for label in ONE_CLOCK_BACKENDS
        for call in CALLS
    }
    return {
        "rounds": args.rounds,
        "per_round": args.per_round,
        "samples": {s.name: len(s.seconds) for s in series},
        "p50_us": {k: round(v * 1e6, 1) for k, v in p50.items()},
        "p99_us": {k: round(v * 1e6, 1) for k, v in p99.items()},
        "floor_us": {k: round(v * 1e6, 1) for k, v in floors.items()},
        "ratio_p50": {k: round(v, 2) for k, v in ratios.items()},
        "sync_ratio_p50": {k: round(v, 2) for k, v in sync_ratios.items()},
        "one_clock_ratio_p50": {k: round(v, 2) for k, v in one_clock_ratios.items()},
        "targets": {
            f"{name} <= {SYNC_TARGET}x (the async path's)": ratio <= SYNC_TARGET
            for name, ratio in sync_ratios.items()
        }
        | {
            f"{name} <= {ONE_CLOCK_TARGET}x (on the client clock)": ratio <= ONE_CLOCK_TARGET
            for name, ratio in one_clock_ratios.items()
        }
        | {
            "pg+redis first execution <= 1.5x (2 PING + 2 committed INSERT)": ratios[FIRST]
            <= FIRST_TARGET,
            "pg+redis replay <= 2x (redis GET)": ratios[REPLAY] <= REPLAY_TARGET,
        },
    }


def _print(report: dict[str, Any]) -> None:
    console = Console()
    table = Table(title="guard overhead (µs per call)")
    for column in ("operation", "samples", "p50", "p99"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for name, p50 in report["p50_us"].items():
        table.add_row(
            name, str(report["samples"][name]), us(p50 / 1e6), us(report["p99_us"][name] / 1e6)
        )
    console.print(table)
    ratios = Table(title="p50 against the floor of the round trips each call must make")
    for column in ("call", "floor", "floor µs", "ratio"):
        ratios.add_column(column, justify="left" if column in ("call", "floor") else "right")
    floors_explained = {
        FIRST: "2 redis PING + 2 pg committed INSERT",
        FIRST_AGAINST_SEQUENCE: "the same four, measured in sequence",
        FIRST_AGAINST_LEDGER: "2 redis PING + the ledger's claim and finish",
        "pg: first execution": "2 pg committed INSERT",
        "embedded: first execution": "2 sqlite committed INSERT",
        REPLAY: "1 redis GET",
        REPLAY_AGAINST_CLIENT: "1 redis GET through redis-py's client",
        "pg: replay": "1 pg SELECT 1",
    }
    for name, ratio in report["ratio_p50"].items():
        ratios.add_row(
            name, floors_explained[name], us(report["floor_us"][name] / 1e6), f"{ratio:.2f}x"
        )
    console.print(ratios)
    console.print(
        _ratio_table(
            "p50 of the sync path against the async path's, in the same run",
            report["sync_ratio_p50"],
        )
    )
    console.print(
        _ratio_table(
            "p50 on the server's clock against the client's, same run",
            report["one_clock_ratio_p50"],
        )
    )
    for target, met in report["targets"].items():
        console.print(f"{'MET ' if met else 'MISSED'}  {target}")


def _ratio_table(title: str, ratios: dict[str, float]) -> Table:
    """A two-column table of same-run ratios, one call a row."""
    table = Table(title=title)
    for column in ("call", "ratio"):
        table.add_column(column, justify="left" if column == "call" else "right")
    for name, ratio in ratios.items():
        table.add_row(name, f"{ratio:.2f}x")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_sampling_options(parser)
    run_and_report(parser, run, _print)


if __name__ == "__main__":
    main()
