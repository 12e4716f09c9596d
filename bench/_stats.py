"""Sampling and summarising latencies, shared by the benchmarks.

Measurements are interleaved in rounds so that load from other processes on a shared machine
spreads over every series alike instead of skewing whichever ran during a busy moment; every other
round runs the series in reverse, so that what runs just before a series (a sleep, a burst of
writes) does not favour one series of a pair over the other.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

# A sample may return its own latency (e.g. a lag measured inside it); None: time the call.
Sample = Callable[[int], Awaitable[float | None]]


@dataclass
class Series:
    """One measured operation and its latencies in seconds."""

    name: str
    sample: Sample
    seconds: list[float] = field(default_factory=list)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.seconds)
        index = min(int(q * len(ordered)), len(ordered) - 1)
        return ordered[index]

    @property
    def p50(self) -> float:
        return statistics.median(self.seconds)

    @property
    def p99(self) -> float:
        return self.quantile(0.99)


async def measure(series: list[Series], *, rounds: int, per_round: int, warmup: int = 20) -> None:
    """Run every series `rounds` times, `per_round` samples at a time, interleaved."""
    counter = 0
    for one in series:
        for _ in range(warmup):
            await one.sample(counter)
            counter += 1
    for round_number in range(rounds):
        for one in series if round_number % 2 == 0 else reversed(series):
            for _ in range(per_round):
                started = time.perf_counter()
                own = await one.sample(counter)
                one.seconds.append(time.perf_counter() - started if own is None else own)
                counter += 1


def us(seconds: float) -> str:
    """Seconds as microseconds, for tables."""
    return f"{seconds * 1e6:,.0f}"
