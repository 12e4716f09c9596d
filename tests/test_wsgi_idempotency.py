"""Flask and Django views guarded by `Idempotency-Key`: each framework's test client, and gunicorn
serving the app on loopback, answer alike (the FastAPI integration's semantics)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.apps import wsgi_shops
from writesafe import WriteSafe
from writesafe.contrib.flask import REPLAYED_HEADER

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names
    content: bytes

    def problem(self) -> dict[str, Any]:
        assert self.headers["content-type"] == "application/problem+json"
        body: dict[str, Any] = json.loads(self.content)
        return body


Post = Callable[[str, dict[str, Any] | bytes, str | None], Answer]
"""Posts a body as JSON: a dict encoded, bytes as they are (Content-Type: application/json)."""


@dataclass
class Shop:
    post: Post
    work: Path

    def effects(self, key: str | None = None) -> int:
        """The orders committed under `key` (default: under any key)."""
        path = self.work / "effects"
        lines = path.read_text().split() if path.exists() else []
        return len(lines) if key is None else lines.count(key)


def _headers(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Idempotency-Key": key}


def _json(body: dict[str, Any] | bytes) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def flask_client(work: Path) -> tuple[Post, WriteSafe]:
    app = wsgi_shops.flask_app(work)
    client = app.test_client()

    def post(path: str, body: dict[str, Any] | bytes, key: str | None) -> Answer:
        response = client.post(
            path, data=_json(body), content_type="application/json", headers=_headers(key)
        )
        headers = {name.lower(): value for name, value in response.headers.items()}
        return Answer(response.status_code, headers, response.get_data())

    shop: wsgi_shops.Shop = app.config["SHOP"]
    return post, shop.ws


def django_client(work: Path, *, middleware: bool = False) -> tuple[Post, WriteSafe]:
    wsgi_shops.configure_django(work, middleware=middleware)
    from django.test import Client

    client = Client()

    def post(path: str, body: dict[str, Any] | bytes, key: str | None) -> Answer:
        response = client.post(
            f"/{path.lstrip('/')}", _json(body), "application/json", headers=_headers(key)
        )
        headers = {name.lower(): value for name, value in response.headers.items()}
        return Answer(response.status_code, headers, response.content)

    assert wsgi_shops.current is not None
    return post, wsgi_shops.current.ws


def gunicorn(framework: str, work: Path) -> Iterator[Post]:
    """The app in a gunicorn process on a free loopback port (one worker, four threads)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            f"tests.apps.wsgi_shops:{framework}_app()",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--threads",
            "4",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "WRITESAFE_SHOP_WORK": str(work)},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                assert server.poll() is None, "gunicorn exited"
                try:
                    client.get("/")
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, "gunicorn did not start"
                    time.sleep(0.1)

            def post(path: str, body: dict[str, Any] | bytes, key: str | None) -> Answer:
                headers = {**_headers(key), "Content-Type": "application/json"}
                response = client.post(path, content=_json(body), headers=headers)
                return Answer(response.status_code, dict(response.headers), response.content)

            yield post
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module", params=["flask", "django", "django_middleware"])
def framework(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(
    scope="module", params=["test client", pytest.param("gunicorn", marks=pytest.mark.slow)]
)
def shop(
    request: pytest.FixtureRequest, framework: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shop]:
    work = tmp_path_factory.mktemp(f"{framework}-shop")
    if request.param == "gunicorn":
        yield from (Shop(post, work) for post in gunicorn(framework, work))
        return
    if framework == "flask":
        post, ws = flask_client(work)
    else:
        post, ws = django_client(work, middleware=framework == "django_middleware")
    try:
        yield Shop(post, work)
    finally:
        ws.sync.close()


def test_a_retry_replays_the_stored_status_and_body_byte_for_byte(shop: Shop) -> None:
    first = shop.post("/orders", {"sku": "A1", "qty": 2}, "replay-1")
    again = shop.post("/orders", {"qty": 2, "sku": "A1"}, "replay-1")  # key order is no change

    assert first.status == again.status == 201
    assert REPLAYED_HEADER.lower() not in first.headers
    assert again.headers[REPLAYED_HEADER.lower()] == "true"
    assert again.content == first.content
    assert json.loads(first.content) == {"order_id": "o-replay-1", "sku": "A1", "qty": 2}
    assert shop.effects("replay-1") == 1


def test_the_same_key_with_another_payload_is_422_key_reused(shop: Shop) -> None:
    assert shop.post("/orders", {"sku": "A1"}, "reused-1").status == 201
    reused = shop.post("/orders", {"sku": "B2"}, "reused-1")

    assert reused.status == 422
    problem = reused.problem()
    assert (problem["code"], problem["field"]) == ("KEY_REUSED", "idempotency_key")
    assert shop.effects("reused-1") == 1


def test_a_key_still_in_flight_is_409_in_progress_with_retry_after(shop: Shop) -> None:
    answers: list[Answer] = []
    first = threading.Thread(
        target=lambda: answers.append(shop.post("/slow", {"sku": "S"}, "slow-1"))
    )
    first.start()
    try:
        deadline = time.monotonic() + 30
        while not (shop.work / "slow-started").exists():
            assert time.monotonic() < deadline, "the first request never started"
            time.sleep(0.01)
        duplicate = shop.post("/slow", {"sku": "S"}, "slow-1")
    finally:
        (shop.work / "release").touch()
        first.join(timeout=30)

    assert duplicate.status == 409
    assert int(duplicate.headers["retry-after"]) >= 1
    assert duplicate.problem()["code"] == "IN_PROGRESS"
    assert [answer.status for answer in answers] == [201]
    assert shop.effects("slow-1") == 1


def test_malformed_json_is_400_before_any_operation_exists(shop: Shop) -> None:
    bad = shop.post("/orders", b'{"sku": "A1",', "malformed-1")

    assert bad.status == 400
    problem = bad.problem()
    assert (problem["code"], problem["field"], problem["status"]) == ("INPUT_INVALID", "body", 400)
    assert problem.get("operation") is None
    # Nothing was recorded under the key: the corrected request is its first.
    fixed = shop.post("/orders", {"sku": "A1"}, "malformed-1")
    assert (fixed.status, REPLAYED_HEADER.lower() in fixed.headers) == (201, False)
    assert shop.effects("malformed-1") == 1


def test_a_views_own_400_keeps_its_status_and_replays_so(shop: Shop) -> None:
    refused = shop.post("/orders", {"qty": 1}, "refused-1")
    again = shop.post("/orders", {"qty": 1}, "refused-1")

    assert refused.status == again.status == 400
    problem = refused.problem()
    assert (problem["code"], problem["status"], problem["cause"]) == (
        "INPUT_INVALID",
        400,
        "http_400",
    )
    assert problem["message"] == "sku is required"
    assert again.content == refused.content
    assert shop.effects("refused-1") == 0


@pytest.mark.parametrize("key", [None, '"unterminated', "two words", '"bad \\x escape"'])
def test_a_missing_or_malformed_key_is_400_and_nothing_runs(shop: Shop, key: str | None) -> None:
    before = shop.effects()
    bad = shop.post("/orders", {"sku": "A1"}, key)

    assert bad.status == 400
    problem = bad.problem()
    assert (problem["code"], problem["field"], problem["status"]) == (
        "INPUT_INVALID",
        "idempotency_key",
        400,
    )
    assert shop.effects() == before


def test_an_async_view_is_refused_when_it_is_decorated(tmp_path: Path) -> None:
    from writesafe.contrib.django import idempotent_django_view
    from writesafe.contrib.flask import idempotent_flask_view

    ws = WriteSafe(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")

    async def orders(*args: Any) -> dict[str, Any]:
        return {}

    for decorate in (idempotent_flask_view(ws, "a"), idempotent_django_view(ws, "b")):
        with pytest.raises(TypeError, match="an async view cannot be guarded here"):
            decorate(orders)
    assert ws.tools == {}  # nothing was registered
