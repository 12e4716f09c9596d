"""The chaos run: own servers, the shop, client workers, reconcilers, the fault driver, the check.

Everything the run touches is its own: a redis-server on a free port (the one it restarts), a
PostgreSQL role and schema named after the run (the only connections it terminates: those of its
role), the shop's SQLite file. The machine's shared Redis and PostgreSQL data are never touched.
Client workers and reconcilers each start with a wall clock skewed by the plan (libfaketime).
With no reconcilers, the guard's own takeover path carries the run; one reconciler starts only
after the workers finish, to settle what callers left (as a later sweep would).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.chaos._checker import LedgerRow, Verdict, check, shop_state
from tests.chaos._plan import DriverFault, Plan, order_refs, plan_to_json
from tests.chaos._skew import skewed, sweep_stale_state
from tests.chaos._stalls import Stalls
from tests.chaos._worker import read_journal
from tests.loopback import free_port
from tests.pgbouncer import pgbouncer
from writesafe.ledger import Ledger, Status

PG_URL = os.environ.get(
    "WRITESAFE_TEST_DATABASE_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
ROOT = Path(__file__).resolve().parents[2]
SETTLE_TIMEOUT = 120.0
MAX_RECONCILER_RESTARTS = 200
MIN_WORKER_LIFETIME = 4.0


@dataclass
class Report:
    plan: Plan
    orders: int
    workers: int
    run_dir: Path
    wall_seconds: float = 0.0
    driver_faults: Counter[str] = field(default_factory=Counter)
    # Writer stalls by who stopped the writer ("driver", "self") and, for "self", where.
    writer_stalls: Counter[str] = field(default_factory=Counter)
    skews: Counter[str] = field(default_factory=Counter)  # process starts by kind and skew
    reconciler_passes: Counter[str] = field(default_factory=Counter)
    reconciler_restarts: Counter[int] = field(default_factory=Counter)  # by exit code
    operations: int = 0
    verdict: Verdict = field(default_factory=Verdict)

    @property
    def ok(self) -> bool:
        return self.verdict.ok


def _dsn(url: str, user: str | None = None) -> str:
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    if user is not None:
        dsn = dsn.replace("postgresql://postgres@", f"postgresql://{user}@")
    return dsn


class Servers:
    """The run's own redis-server and shop process."""

    def __init__(self, run_dir: Path, plan: Plan) -> None:
        self.run_dir = run_dir
        self.plan = plan
        self.redis_port = free_port()
        self.shop_port = free_port()
        self.redis: subprocess.Popen[bytes] | None = None
        self.shop: subprocess.Popen[bytes] | None = None

    def start_redis(self) -> None:
        # No persistence: a restart loses every key, which is the fault being injected.
        self.redis = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--maxclients",
                "2000",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def restart_redis(self) -> None:
        assert self.redis is not None
        self.redis.kill()
        self.redis.wait()
        self.start_redis()

    def start_shop(self, env: dict[str, str]) -> None:
        self.shop = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.chaos.shop",
                "--db",
                str(self.run_dir / "shop.db"),
                "--port",
                str(self.shop_port),
                "--plan",
                plan_to_json(self.plan),
            ],
            env=env,
            cwd=ROOT,
        )

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        async with httpx.AsyncClient() as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    await client.get(f"{self.shop_url}/orders/ready", timeout=1)
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the chaos shop did not start")
                await asyncio.sleep(0.1)

    @property
    def shop_url(self) -> str:
        return f"http://127.0.0.1:{self.shop_port}"

    def stop(self) -> None:
        for process in (self.shop, self.redis):
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)  # a stalled shop cannot die of SIGTERM
                process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(10)
                if process.poll() is None:
                    process.kill()
                    process.wait()


class Clocks:
    """Each process start's wall-clock skew: -S, 0 or +S seconds, seeded."""

    def __init__(self, plan: Plan, report: Report) -> None:
        self._rng = random.Random(f"{plan.seed}/skew")
        self._seconds = plan.skew_seconds
        self._report = report

    def env(self, kind: str, env: dict[str, str]) -> dict[str, str]:
        seconds = self._rng.choice((-self._seconds, 0.0, self._seconds)) if self._seconds else 0.0
        self._report.skews[f"{kind} {seconds:+g} s"] += 1
        return skewed(env, seconds)


class Workers:
    """Client worker processes; a killed one is restarted and resumes from its journal, a stopped
    one is continued after its stall."""

    def __init__(
        self,
        run_dir: Path,
        env: dict[str, str],
        report: Report,
        clocks: Clocks,
        concurrency: int,
    ) -> None:
        self.run_dir = run_dir
        self.env = env
        self.report = report
        self.clocks = clocks
        self.seed = report.plan.seed
        self.concurrency = concurrency
        timings = report.plan.timings
        self.stalls = Stalls(
            random.Random(f"{self.seed}/stalls"), timings.writer_stall_min, timings.writer_stall_max
        )
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.started: dict[int, float] = {}
        self.journaled: dict[int, int] = {}  # the journal's size at the worker's last start
        self.done: set[int] = set()

    def _journal(self, index: int) -> Path:
        return self.run_dir / f"journal-{index}.jsonl"

    def start(self, index: int) -> None:
        self.started[index] = time.monotonic()
        journal = self._journal(index)
        self.journaled[index] = journal.stat().st_size if journal.exists() else 0
        log = (self.run_dir / f"worker-{index}.log").open("ab")
        self.processes[index] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.chaos._worker",
                "--run-dir",
                str(self.run_dir),
                "--index",
                str(index),
                "--workers",
                str(self.report.workers),
                "--orders",
                str(self.report.orders),
                "--seed",
                str(self.seed),
                "--concurrency",
                str(self.concurrency),
            ],
            env=self.clocks.env("worker", self.env),
            cwd=ROOT,
            stdout=log,
            stderr=log,
        )

    def poll(self) -> None:
        self.stalls.tick([p.pid for p in self.processes.values() if p.poll() is None])
        for index, process in self.processes.items():
            code = process.poll()
            if code is None or index in self.done:
                continue
            if code == 0:
                self.done.add(index)
            elif code == -signal.SIGKILL:  # killed by the driver: a supervisor restarts it
                self.start(index)
            else:
                log = self.run_dir / f"worker-{index}.log"
                raise RuntimeError(f"client worker {index} crashed ({code}); see {log}")

    def killable(self) -> list[int]:
        """Running workers that have made progress since their last start (journaled an answer,
        and lived a while): killing a freshly restarted worker again and again would starve its
        last orders, and on a loaded machine a start alone can take longer than the driver's
        pace."""
        now = time.monotonic()
        return [
            i
            for i, p in self.processes.items()
            if p.poll() is None
            and now - self.started[i] >= MIN_WORKER_LIFETIME
            and self._journal(i).exists()
            and self._journal(i).stat().st_size > self.journaled[i]
        ]

    def stallable(self) -> list[int]:
        """Running workers that are not stopped already."""
        return [
            i
            for i, p in self.processes.items()
            if p.poll() is None and not self.stalls.holds(p.pid)
        ]

    @property
    def finished(self) -> bool:
        return len(self.done) == self.report.workers


class FaultDriver:
    """Injects process and server faults at seeded random intervals, every kind in turn."""

    def __init__(
        self, plan: Plan, servers: Servers, workers: Workers, role: str, report: Report, pg_url: str
    ) -> None:
        self.rng = random.Random(f"{plan.seed}/driver")
        self.plan = plan
        self.servers = servers
        self.workers = workers
        self.role = role
        self.report = report
        self.pg_url = pg_url
        self.admin: asyncpg.Connection | None = None

    async def run(self, stop: asyncio.Event) -> None:
        self.admin = await asyncpg.connect(_dsn(self.pg_url))
        try:
            await self._drive(stop)
        finally:
            await self.admin.close()

    async def _drive(self, stop: asyncio.Event) -> None:
        kinds: list[DriverFault] = []
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.uniform(0.5, 2.0))
                return
            if not kinds:
                kinds = list(self.plan.driver_faults)
                if not kinds:
                    return
                self.rng.shuffle(kinds)
            kind = kinds.pop()
            if not await self.inject(kind):
                kinds.insert(0, kind)  # not possible yet (no worker old enough): try it later

    async def inject(self, kind: DriverFault) -> bool:
        """Inject one fault; False when it cannot be injected right now."""
        if kind is DriverFault.KILL_WORKER:
            killable = self.workers.killable()
            if not killable:
                return False
            victim = self.workers.processes[self.rng.choice(killable)]
            victim.kill()
        elif kind is DriverFault.RESTART_REDIS:
            await asyncio.to_thread(self.servers.restart_redis)
        elif kind is DriverFault.TERMINATE_PG:
            # One admin connection for the whole run: when the server is at max_connections
            # a new one would be refused exactly when the fault matters.
            if self.admin is None or self.admin.is_closed():
                self.admin = await asyncpg.connect(_dsn(self.pg_url))
            await self.admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1",
                self.role,
            )
        elif kind is DriverFault.STALL_SHOP:
            assert self.servers.shop is not None
            os.kill(self.servers.shop.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(self.rng.uniform(0.1, self.plan.timings.max_stall))
            finally:
                os.kill(self.servers.shop.pid, signal.SIGCONT)
        elif kind is DriverFault.STALL_WORKER:
            stallable = self.workers.stallable()
            if not stallable:
                return False
            self.workers.stalls.stop(self.workers.processes[self.rng.choice(stallable)].pid)
        self.report.driver_faults[kind.value] += 1
        return True


async def _create_role(pg_url: str, role: str) -> None:
    connection = await asyncpg.connect(_dsn(pg_url))
    try:
        await connection.execute(f'CREATE ROLE "{role}" LOGIN')
        await connection.execute(f'CREATE SCHEMA "{role}" AUTHORIZATION "{role}"')
    finally:
        await connection.close()


async def _drop_role(pg_url: str, role: str) -> None:
    connection = await asyncpg.connect(_dsn(pg_url))
    try:
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
        )
        await connection.execute(f'DROP SCHEMA IF EXISTS "{role}" CASCADE')
        await connection.execute(f'DROP ROLE IF EXISTS "{role}"')
    finally:
        await connection.close()


async def _ledger_rows(pg_url: str, role: str) -> dict[str, LedgerRow]:
    connection = await asyncpg.connect(_dsn(pg_url), server_settings={"search_path": role})
    try:
        rows = await connection.fetch(
            "SELECT o.key, o.status, o.result, EXISTS (SELECT 1 FROM writesafe_attempts a "
            "WHERE a.operation_id = o.id AND a.kind = 'lookup') AS looked_up "
            "FROM writesafe_operations o"
        )
    finally:
        await connection.close()
    return {
        r["key"]: LedgerRow(r["key"], Status(r["status"]), r["result"], r["looked_up"])
        for r in rows
    }


async def _keep_evidence(pg_url: str, role: str, refs: list[str], path: Path) -> None:
    """The ledger's operation and attempt rows of the orders a check flagged, kept beside the
    run's journals and shop before the schema is dropped: a violation must be explainable."""
    connection = await asyncpg.connect(_dsn(pg_url), server_settings={"search_path": role})
    try:
        operations = await connection.fetch(
            "SELECT * FROM writesafe_operations WHERE key = ANY($1::text[]) ORDER BY key", refs
        )
        attempts = await connection.fetch(
            "SELECT o.key, a.* FROM writesafe_attempts a JOIN writesafe_operations o "
            "ON o.id = a.operation_id WHERE o.key = ANY($1::text[]) ORDER BY o.key, a.id",
            refs,
        )
    finally:
        await connection.close()
    rows = {"operations": [dict(r) for r in operations], "attempts": [dict(r) for r in attempts]}
    await asyncio.to_thread(path.write_text, json.dumps(rows, indent=1, default=str))


async def _settled(pg_url: str, role: str, deadline: float) -> None:
    """Wait until the reconcilers have resolved everything they can."""
    pending = (Status.IN_FLIGHT.value, Status.OUTCOME_UNKNOWN.value)
    connection = await asyncpg.connect(_dsn(pg_url), server_settings={"search_path": role})
    try:
        while time.monotonic() < deadline:
            left = await connection.fetchval(
                "SELECT count(*) FROM writesafe_operations WHERE status = ANY($1::text[])",
                list(pending),
            )
            if left == 0:
                return
            await asyncio.sleep(0.5)
    finally:
        await connection.close()


def _environment(role: str, pg_url: str, servers: Servers, plan: Plan) -> dict[str, str]:
    timings = plan.timings
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "WRITESAFE_DATABASE_URL": pg_url.replace("://postgres@", f"://{role}@"),
        "WRITESAFE_DB_SCHEMA": role,
        "WRITESAFE_REDIS_URL": f"redis://127.0.0.1:{servers.redis_port}/0",
        "WRITESAFE_REDIS_PREFIX": "chaos",
        "WRITESAFE_LEASE_SECONDS": str(timings.lease_seconds),
        "WRITESAFE_WAIT_TIMEOUT": "2",
        "WRITESAFE_RECONCILE_BACKOFF": "0.25",
        "WRITESAFE_RECONCILE_BACKOFF_MAX": "1.0",
        "WRITESAFE_RECONCILE_MAX_CHECKS": "15",
        "WRITESAFE_RECONCILE_LEASE": "5",
        "CHAOS_SHOP_URL": servers.shop_url,
        "CHAOS_PLAN": plan_to_json(plan),
        "CHAOS_RUN_DIR": str(servers.run_dir),
    }


async def run_chaos(
    orders: int,
    workers: int,
    seed: int,
    *,
    concurrency: int = 8,
    reconcilers: int = 2,
    plan: Plan | None = None,
    pg_url: str = PG_URL,
    pooler: bool = False,
    run_dir: Path | None = None,
    log: Any = print,
) -> Report:
    """`pooler`: the workers, reconcilers and migration reach the ledger through a PgBouncer in
    transaction mode of the run's own; the driver and the checks still connect directly."""
    plan = plan or Plan(seed=seed)
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-"))
    role = f"chaos_{seed}_{uuid.uuid4().hex[:6]}"
    report = Report(plan=plan, orders=orders, workers=workers, run_dir=run_dir)
    log(
        f"chaos run: {orders} orders, {workers} workers x {concurrency}, {reconcilers} "
        f"reconcilers; plan {plan.describe()}"
    )
    log(f"run directory (journals, shop.db, logs): {run_dir}; ledger schema/role {role}")
    servers = Servers(run_dir, plan)
    reconciler_processes: list[subprocess.Popen[bytes]] = []
    pool: Workers | None = None
    started = time.monotonic()
    await _create_role(pg_url, role)
    pooled = contextlib.ExitStack()
    try:
        ledger_url = pg_url
        if pooler:
            ledger_url = pooled.enter_context(pgbouncer("transaction", users=[role], pool_size=8))
        servers.start_redis()
        env = _environment(role, ledger_url, servers, plan)
        if pooler:
            env["WRITESAFE_DATABASE_URL"] += "?pooler=transaction"
        servers.start_shop(env)
        await servers.wait_ready()
        ledger = Ledger.from_url(env["WRITESAFE_DATABASE_URL"], schema=role)
        try:
            await ledger.migrate()
        finally:
            await ledger.close()
        clocks = Clocks(plan, report)
        for n in range(reconcilers):
            skewed_env = clocks.env("reconciler", env)
            reconciler_processes.append(_start_reconciler(run_dir, n, skewed_env))
        pool = Workers(run_dir, env, report, clocks, concurrency)
        for index in range(workers):
            pool.start(index)
        stop = asyncio.Event()
        driver = asyncio.create_task(
            FaultDriver(plan, servers, pool, role, report, pg_url).run(stop)
        )
        while not pool.finished:
            await asyncio.sleep(0.2)
            pool.poll()
            for n, process in enumerate(reconciler_processes):
                if process.poll() is not None:
                    # `reconcile --watch` exits when the ledger connection breaks (3) or cannot
                    # be reached at start (1); a supervisor restarts it. A crash loop fails.
                    report.reconciler_restarts[process.returncode] += 1
                    if report.reconciler_restarts.total() > MAX_RECONCILER_RESTARTS:
                        raise RuntimeError(
                            f"reconcilers keep exiting: {report.reconciler_restarts}"
                        )
                    reconciler_processes[n] = _start_reconciler(
                        run_dir, n, clocks.env("reconciler", env)
                    )
        stop.set()
        await driver
        log(f"workers done after {time.monotonic() - started:.1f}s; waiting for reconciliation")
        if not reconciler_processes:  # the sweep after a run without reconcilers
            reconciler_processes.append(_start_reconciler(run_dir, 0, env))
        await _settled(pg_url, role, time.monotonic() + SETTLE_TIMEOUT)
        for process in reconciler_processes:
            process.send_signal(signal.SIGTERM)
        for process in reconciler_processes:
            process.wait(30)
        report.reconciler_passes = _reconciler_totals(run_dir, len(reconciler_processes))
        report.writer_stalls = pool.stalls.counts + _stall_points(run_dir, workers)
        report.wall_seconds = time.monotonic() - started
        ledger_rows = await _ledger_rows(pg_url, role)
        report.operations = len(ledger_rows)
        shop_orders, shop_faults = shop_state(str(run_dir / "shop.db"))
        journal = [e for i in range(workers) for e in read_journal(run_dir / f"journal-{i}.jsonl")]
        report.verdict = check(
            plan, order_refs(seed, orders), shop_orders, shop_faults, ledger_rows, journal
        )
        flagged = sorted({ref for refs in report.verdict.violations.values() for ref in refs})
        if flagged:
            await _keep_evidence(pg_url, role, flagged, run_dir / "evidence.json")
            log(f"the flagged orders' ledger rows: {run_dir / 'evidence.json'}")
        return report
    finally:
        workers_left = [] if pool is None else list(pool.processes.values())
        for process in [*reconciler_processes, *workers_left]:
            if process.poll() is None:
                process.kill()
                process.wait()
        servers.stop()
        pooled.close()
        sweep_stale_state()  # what the skewed processes killed in the run left behind
        await _drop_role(pg_url, role)


def _start_reconciler(run_dir: Path, n: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = "from writesafe.cli import main; main()"
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            command,
            "reconcile",
            "tests.chaos.app:ws",
            "--watch",
            "--json",
            "--interval",
            "0.2",
        ],
        env=env,
        cwd=ROOT,
        stdout=(run_dir / f"reconciler-{n}.jsonl").open("ab"),
        stderr=(run_dir / f"reconciler-{n}.log").open("ab"),
    )


def _stall_points(run_dir: Path, workers: int) -> Counter[str]:
    """Where the executions that stopped their own process stopped (the tool logs each)."""
    points: Counter[str] = Counter()
    for index in range(workers):
        for line in (run_dir / f"worker-{index}.log").read_text(errors="replace").splitlines():
            if line.startswith("chaos stall "):
                points[f"self {line.split()[2]}"] += 1
    return points


def _reconciler_totals(run_dir: Path, reconcilers: int) -> Counter[str]:
    totals: Counter[str] = Counter()
    for n in range(reconcilers):
        for line in (run_dir / f"reconciler-{n}.jsonl").read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                data = json.loads(line)
                totals.update({k: v for k, v in data.items() if isinstance(v, int)})
    return totals
