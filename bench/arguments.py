"""Micro-benchmark: what validating a call's arguments against the tool's annotations costs.

`python -m bench.arguments`: `bind` (binding, validation, canonical JSON) for tools of three
shapes, against the same `bind` with no validators (the baseline, measured in the same run), in
interleaved rounds. Prints µs per call and the ratio. No server is needed.
"""

from __future__ import annotations

import inspect
import statistics
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from writesafe.idempotency._arguments import Parameters, bind, declared_parameters


class Order(BaseModel):
    sku: str
    quantity: int = 1


async def scalars(sku: str, quantity: int) -> None: ...


async def model(order: Order) -> None: ...


async def open_dict(order: dict[str, Any]) -> None: ...


SHAPES: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
    "scalars (sku: str, quantity: int)": (scalars, ("A1", 2)),
    "model (order: Order) given a dict": (model, ({"sku": "A1", "quantity": 2},)),
    "open (order: dict[str, Any]), 8 keys": (open_dict, ({f"k{i}": i for i in range(8)},)),
}
CALLS, ROUNDS = 20_000, 7


def _unvalidated(parameters: Parameters) -> Parameters:
    return Parameters(parameters.signature, parameters.plain, {}, frozenset())


def _per_call_us(parameters: Parameters, args: tuple[Any, ...]) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        bind(parameters, args, {})
    return (time.perf_counter() - started) / CALLS * 1e6


def main() -> None:
    for shape, (function, args) in SHAPES.items():
        validated = declared_parameters(function, inspect.signature(function))
        baseline = _unvalidated(validated)
        with_, without = [], []
        for _ in range(ROUNDS):
            without.append(_per_call_us(baseline, args))
            with_.append(_per_call_us(validated, args))
        base, checked = statistics.median(without), statistics.median(with_)
        print(
            f"{shape:40} bind {base:6.2f} µs, validated {checked:6.2f} µs "
            f"(+{checked - base:5.2f} µs, ×{checked / base:4.2f})"
        )


if __name__ == "__main__":
    main()
