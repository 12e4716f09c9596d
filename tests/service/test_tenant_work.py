"""A request's cost and each tenant's bound on work in flight (`writesafe.service._work`)."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from writesafe import WriteSafeError
from writesafe.service._work import KNOWN_KEYS, TenantWork, request_cost


def _request(query: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/", "query_string": query.encode()})


@pytest.mark.parametrize(
    ("query", "cost"),
    [
        ("", 1),  # a status read, an attempts list, a resolution
        ("limit=1", 1),
        ("limit=49", 1),
        ("limit=50", 2),  # the default page
        ("limit=99", 2),
        ("limit=100", 3),
        ("limit=500", 11),  # the largest page
        ("limit=501", 11),  # refused later with 422; never costs more than the largest page
        ("limit=99999999999999", 1),  # does not parse as a page size: refused later, costs 1
        ("limit=-5", 1),
        ("limit=ten", 1),
        ("status=failed&limit=250", 6),
    ],
)
def test_a_request_costs_one_plus_one_per_fifty_rows(query: str, cost: int) -> None:
    assert request_cost(_request(query)) == cost


def test_a_tenants_work_in_flight_is_bounded_and_others_are_not_touched() -> None:
    work = TenantWork(units=12)
    # One 500-row page and one status read in flight: 12, the bound.
    with work.slot("a", 11), work.slot("a", 1):
        with pytest.raises(WriteSafeError) as refused, work.slot("a", 2):
            pass
        with work.slot("b", 11), work.slot("b", 1):  # another tenant has its own bound
            pass
    envelope = refused.value.envelope
    assert (envelope.code, envelope.retry_after_ms) == ("RATE_LIMITED", 1000)
    with work.slot("a", 11), work.slot("a", 1):  # released: the bound is whole again
        pass


def test_a_request_larger_than_the_bound_runs_alone() -> None:
    work = TenantWork(units=4)
    with work.slot("a", 11), pytest.raises(WriteSafeError), work.slot("a", 1):
        pass
    with work.slot("a", 1), pytest.raises(WriteSafeError), work.slot("a", 11):
        pass


def test_switched_off_nothing_is_refused() -> None:
    work = TenantWork(units=1, enabled=False)
    with work.slot("a", 11), work.slot("a", 11):
        pass


def test_a_key_that_held_a_slot_is_refused_before_its_lookup_while_its_tenant_is_full() -> None:
    work = TenantWork(units=11)
    work.refuse_early("hash-a", 11)  # never seen: nothing to go by until its lookup
    with work.slot("a", 11, "hash-a"):
        with pytest.raises(WriteSafeError) as refused:
            work.refuse_early("hash-a", 1)
        work.refuse_early("hash-b", 1)  # another key, unseen: its lookup decides
        with work.slot("b", 1, "hash-b"):
            work.refuse_early("hash-b", 10)  # b has room
    assert refused.value.envelope.code == "RATE_LIMITED"
    work.refuse_early("hash-a", 11)  # released: room again


def test_the_keys_remembered_are_bounded_oldest_forgotten_first() -> None:
    work = TenantWork(units=1)
    for n in range(KNOWN_KEYS + 1):
        with work.slot(f"scope-{n}", 1, f"hash-{n}"):
            pass
    with work.slot("scope-0", 1), work.slot("scope-1", 1):
        work.refuse_early("hash-0", 1)  # forgotten: left to its lookup and the slot
        with pytest.raises(WriteSafeError):
            work.refuse_early("hash-1", 1)
