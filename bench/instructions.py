"""Instructions per first execution on PostgreSQL, against the committed-INSERT floor.

    python -m bench.instructions [--calls 1000] [--in-flight 8]

CPU time on a shared two-core machine moves by ±10 % from run to run, which hides a change of a
few per cent; valgrind's callgrind counts the instructions a process executes, which moves far
less (runs of one workload here: 0.05 % apart once, 2.7 % another time, as the calls batch
differently in the event loop under valgrind's pace). Each system
runs in a child under callgrind twice, 200 calls and 200 + `--calls`; the difference divided by
`--calls` is its instructions per call, start-up and shutdown cancelled out. Systems:
writesafe on PostgreSQL and the floor (`bench/_floors.py`: the two committed INSERTs a first
execution needs, on raw asyncpg), with the pools of `bench.throughput --peers` (8
connections each), and writesafe on PostgreSQL with Redis, whose first executions should cost what
PostgreSQL's alone do (issue 30, item 5: a tool of first executions asks the ledger first and
leaves Redis alone). Printed: each one's instructions per call, writesafe's ratios to the floor,
and pg+redis ÷ pg. Only user space is counted: the kernel's share (sends, epoll) is in none. A
change of our own to the hot path is judged by running it at both commits. Needs valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import shutil
import subprocess
import sys

from bench._setup import PG_URL, REDIS_URL, isolated
from bench.throughput_peers import FLOORS, Job, open_system, prepare_stores

SYSTEMS = (FLOORS["pg"], "writesafe pg", "writesafe pg+redis")
START_CALLS = 200  # the shorter run: what both runs share besides the calls measured


async def _child(system: str, calls: int, in_flight: int) -> None:
    """`calls` first executions of `system`, `in_flight` at a time: the run callgrind counts.
    Each run makes stores of its own: a key an earlier run made would be a replay here."""
    async with isolated("instructions") as stores:
        await prepare_stores(PG_URL, stores.schema, stores.workdir, [system])
        job = Job(
            system,
            PG_URL,
            REDIS_URL,
            stores.schema,
            stores.redis_prefix,
            str(stores.workdir),
            "instructions",
            in_flight,
            0.0,
        )
        call, close = await open_system(system)(job)
        keys = itertools.count()

        async def caller(count: int) -> None:
            for _ in range(count):
                await call(f"k-{next(keys)}")

        await asyncio.gather(*(caller(calls // in_flight) for _ in range(in_flight)))
        await close()


def _counted(system: str, calls: int, in_flight: int) -> int:
    """The instructions callgrind counts in one child run."""
    child = [sys.executable, "-m", "bench.instructions", "--child", system]
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *child]
    command += ["--calls", str(calls), "--in-flight", str(in_flight)]
    ran = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Collected\s*:\s*(\d+)", ran.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count: {ran.stderr[-500:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        asyncio.run(_child(args.child, args.calls, args.in_flight))
        return
    if shutil.which("valgrind") is None:
        sys.exit("bench.instructions needs valgrind (Debian: apt-get install valgrind)")
    per_call: dict[str, float] = {}
    for system in SYSTEMS:
        short = _counted(system, START_CALLS, args.in_flight)
        long = _counted(system, START_CALLS + args.calls, args.in_flight)
        per_call[system] = (long - short) / args.calls
        print(f"{system}: {per_call[system] / 1000:,.0f}k instructions per call")
    floor, pg, with_redis = (per_call[system] for system in SYSTEMS)
    print(f"writesafe pg ÷ floor: {pg / floor:.2f}")
    print(f"writesafe pg+redis ÷ floor: {with_redis / floor:.2f}")
    print(f"writesafe pg+redis ÷ writesafe pg: {with_redis / pg:.3f}")


if __name__ == "__main__":
    main()
