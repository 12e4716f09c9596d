"""Canonical JSON is pinned byte for byte: a fingerprint that changed across versions would
turn every retry of an earlier call into KEY_REUSED."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import uuid

import pytest
from pydantic import BaseModel

from writesafe.ledger import canonical_json


class Color(enum.Enum):
    RED = "red"


class Order(BaseModel):
    qty: int
    tags: list[str]


@dataclasses.dataclass
class Window:
    hours: float
    starts: datetime.datetime


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {"b": 1, "a": [1, 2.5, "é", None, True, False]},
            '{"a":[1,2.5,"é",null,true,false],"b":1}',
        ),
        (
            {"s": {3, 1, 2}, "fs": frozenset({"b", "a"}), "t": (1, (2, 3)), "n": [{"z": {2, 1}}]},
            '{"fs":["a","b"],"n":[{"z":[1,2]}],"s":[1,2,3],"t":[1,[2,3]]}',
        ),
        (
            {
                "order": Order(qty=1, tags=["x"]),
                "window": Window(1.5, datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)),
                "id": uuid.UUID(int=7),
                "price": decimal.Decimal("1.10"),
                "color": Color.RED,
                "raw": b"bytes",
            },
            '{"color":"red","id":"00000000-0000-0000-0000-000000000007","order":{"qty":1,'
            '"tags":["x"]},"price":"1.10","raw":"bytes","window":{"hours":1.5,'
            '"starts":"2026-01-02T03:04:05Z"}}',
        ),
        ({"k": ["\u2028", "\x00"]}, '{"k":["\u2028","\\u0000"]}'),
        ("plain", '"plain"'),
        (0.0, "0.0"),
        (None, "null"),
    ],
)
def test_canonical_json_is_stable(value: object, expected: str) -> None:
    assert canonical_json(value) == expected
