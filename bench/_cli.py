"""The command line the benchmarks share: store options, one run, the report as a table or JSON.

Kept in one place so every benchmark takes the same `--database-url`, `--redis-url` and `--json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

from bench._setup import PG_URL, REDIS_URL

Report = dict[str, Any]


def add_sampling_options(
    parser: argparse.ArgumentParser, *, rounds: int = 10, per_round: int = 50
) -> None:
    """`--rounds` × `--per-round` samples per series, interleaved (`bench._stats.measure`)."""
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--per-round", type=int, default=per_round)


def run_and_report(
    parser: argparse.ArgumentParser,
    run: Callable[[argparse.Namespace], Coroutine[Any, Any, Report]],
    show: Callable[[Report], None],
) -> None:
    """Add the shared options after the benchmark's own, run it once and print what it reports."""
    parser.add_argument("--database-url", default=PG_URL)
    parser.add_argument("--redis-url", default=REDIS_URL)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        show(report)
