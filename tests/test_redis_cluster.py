"""The key store on a three-master Redis Cluster that the test starts on loopback, and stops.

At most once must not depend on which node holds a key: first executions, replays, and a node
that loses every key it held (FLUSHALL on one master) never cause a second execution.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from redis import Redis

from tests.reconcile_support import Shop, order_tool
from tests.redis_server import available, redis_servers
from writesafe import WriteSafe

pytestmark = pytest.mark.skipif(not available(), reason="needs redis-server")

NODES = 3
_BUS_OFFSET = 10_000  # a cluster node also listens on its port + 10000 (the cluster bus)


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _cluster_ports() -> list[int]:
    """NODES ports that are free, with their cluster-bus ports, from the kernel's choice."""
    ports: list[int] = []
    while len(ports) < NODES:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + _BUS_OFFSET < 65_536 and port not in ports and _free(port + _BUS_OFFSET):
            ports.append(port)
    return ports


def _wait(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the test's Redis Cluster did not come up: {what}")
        time.sleep(0.05)


def _cluster_ok(port: int) -> bool:
    with Redis(port=port) as node:
        return bool(node.cluster("INFO")["cluster_state"] == "ok")


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[list[int]]:
    """The ports of a fresh three-master cluster (no replicas), stopped afterwards."""
    ports = _cluster_ports()
    cluster = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
    with redis_servers(ports, *cluster):
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        for port in ports:
            _wait(functools.partial(_cluster_ok, port), f"node {port} is not in a cluster")
        yield ports


def _degraded() -> float:
    """Key store commands that failed so far in this process (any operation)."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "writesafe_store_degraded"
        for sample in metric.samples
        if sample.name == "writesafe_store_degraded_total"
    )


def _cluster_ws(ports: list[int], folder: Path, prefix: str) -> WriteSafe:
    return WriteSafe(
        database_url=f"sqlite+aiosqlite:///{folder / 'ledger.db'}",
        redis_url=f"redis+cluster://127.0.0.1:{ports[0]}/0",
        redis_prefix=prefix,
    )


def _keys_by_node(ports: list[int], prefix: str) -> dict[int, int]:
    counts = {}
    for port in ports:
        with Redis(port=port) as node:
            # The operations' keys, not the restore mark the guard keeps beside them.
            keys = node.scan_iter(match=f"{prefix}:*")
            counts[port] = sum(1 for key in keys if b":ledger-mark:" not in key)
    return counts


async def test_a_cluster_key_store_never_runs_a_write_twice(
    redis_cluster: list[int], tmp_path: Path
) -> None:
    prefix, degraded = "cluster-async", _degraded()
    ws = _cluster_ws(redis_cluster, tmp_path, prefix)
    shop = Shop()
    submit_order = order_tool(ws, shop)
    keys = [f"ord-{n}" for n in range(30)]
    try:
        # First executions, each raced by a duplicate: one execution per key.
        firsts = [
            answer
            for key in keys
            for answer in await asyncio.gather(
                *(submit_order("A1", idempotency_key=key) for _ in range(2))
            )
        ]
        assert shop.placed == len(keys)
        by_node = _keys_by_node(redis_cluster, prefix)
        assert sum(by_node.values()) == len(keys)
        assert all(by_node.values()), by_node  # every master holds some: the cluster routed them
        assert ws.keystore is not None
        assert ws.keystore.cluster
        assert _degraded() == degraded  # every command reached its node

        replays = [await submit_order("A1", idempotency_key=key) for key in keys]
        assert replays == firsts[::2]

        # One master loses every key it held: its operations are answered by the ledger.
        lost = redis_cluster[1]
        with Redis(port=lost) as node:
            node.flushall()
        assert _keys_by_node(redis_cluster, prefix)[lost] == 0
        again = [await submit_order("A1", idempotency_key=key) for key in keys]
        assert again == firsts[::2]
        assert shop.placed == len(keys)
        assert shop.lookups == 0
    finally:
        await ws.close()


async def test_sync_tools_on_a_cluster_key_store_run_each_key_once(
    redis_cluster: list[int], tmp_path: Path
) -> None:
    prefix, degraded = "cluster-sync", _degraded()
    ws = _cluster_ws(redis_cluster, tmp_path, prefix)
    effects: list[str] = []

    @ws.tool("refund")
    def refund(amount: int, idempotency_key: str) -> dict[str, int]:
        effects.append(idempotency_key)
        return {"amount": amount}

    keys = [f"ref-{n}" for n in range(12)]
    try:
        # A thread without an event loop: its first look is the blocking cluster claim.
        def calls() -> list[dict[str, int]]:
            return [refund(5, idempotency_key=key) for key in keys]

        firsts = await asyncio.to_thread(calls)
        replays = await asyncio.to_thread(calls)
        assert firsts == replays == [{"amount": 5}] * len(keys)
        assert sorted(effects) == sorted(keys)
        assert sum(_keys_by_node(redis_cluster, prefix).values()) == len(keys)
        assert _degraded() == degraded
    finally:
        await ws.close()
