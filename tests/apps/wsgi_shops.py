"""The same small shop as a Flask app and as a Django app, guarded by `Idempotency-Key`.

`POST /orders` commits an order (a line in `WORK/effects`, naming the operation's key) and
answers 201 with JSON; one without a `sku` the view refuses with its framework's own 400.
`POST /slow` does the same once the file `WORK/release` exists, leaving
`WORK/slow-started` behind first, so a test can send a duplicate while it runs. Both servers read
`WRITESAFE_SHOP_WORK` (the work folder; the ledger is a SQLite file in it) when started as

    gunicorn 'tests.apps.wsgi_shops:flask_app()'
    gunicorn 'tests.apps.wsgi_shops:django_app()'
    gunicorn 'tests.apps.wsgi_shops:django_middleware_app()'

The last guards the same views with `IdempotencyMiddleware` instead of the decorator (`orders` by
its URL name, `/slow` by its path).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from writesafe import WriteSafe

RELEASE_SECONDS = 20.0
PYTHON_WAIT_TIMEOUT = 60.0
"""How long the shop's Python callers would wait for a running duplicate: its HTTP doors ask for
no wait, so a duplicate of a running /slow is 409 at once (it would wait past the release)."""


class Shop:
    """The shop's writes, framework-neutral."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.ws = WriteSafe(
            f"sqlite+aiosqlite:///{work / 'ledger.db'}", wait_timeout=PYTHON_WAIT_TIMEOUT
        )

    def commit(self, order: dict[str, Any]) -> dict[str, Any]:
        operation = WriteSafe.current_operation()
        assert operation is not None, "the view runs as the guarded write"
        with (self.work / "effects").open("a") as effects:
            effects.write(f"{operation.key}\n")
        return {"order_id": f"o-{operation.key}", **order}

    def commit_slowly(self, order: dict[str, Any]) -> dict[str, Any]:
        (self.work / "slow-started").touch()
        deadline = time.monotonic() + RELEASE_SECONDS
        while not (self.work / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.commit(order)


def _work_from_env() -> Path:
    return Path(os.environ["WRITESAFE_SHOP_WORK"])


# -- Flask ----------------------------------------------------------------------------------------


def flask_app(work: Path | None = None) -> Any:
    from flask import Flask, abort, request

    from writesafe.contrib.flask import idempotent_flask_view

    shop = Shop(work or _work_from_env())
    app = Flask(__name__)
    app.config["SHOP"] = shop

    @app.post("/orders")
    @idempotent_flask_view(shop.ws, "flask_orders")
    def orders() -> tuple[dict[str, Any], int]:
        order = request.get_json()
        if not order.get("sku"):
            abort(400, "sku is required")
        return shop.commit(order), 201

    @app.post("/slow")
    @idempotent_flask_view(shop.ws, "flask_slow")
    def slow() -> tuple[dict[str, Any], int]:
        return shop.commit_slowly(request.get_json()), 201

    return app


# -- Django ---------------------------------------------------------------------------------------

current: Shop | None = None  # the shop the URL patterns below serve
_views: dict[str, Callable[..., Any]] = {}


def _route(name: str) -> Callable[..., Any]:
    def view(request: Any) -> Any:
        return _views[name](request)

    return view


def configure_django(work: Path, *, middleware: bool = False) -> None:
    """Point this module's URL patterns at a new shop in `work` (settings once per process),
    its views guarded by the decorator, or with `middleware` by `IdempotencyMiddleware`."""
    global current
    import django
    from django.conf import settings
    from django.core.exceptions import BadRequest
    from django.http import HttpRequest, JsonResponse

    from writesafe.contrib.django import idempotent_django_view

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="writesafe-tests",
            ROOT_URLCONF=__name__,
            ALLOWED_HOSTS=["*"],
            MIDDLEWARE=[],
            INSTALLED_APPS=[],
            DATABASES={},
        )
        django.setup()
    shop = current = Shop(work)

    def orders(request: HttpRequest) -> JsonResponse:
        order = json.loads(request.body)
        if not order.get("sku"):
            raise BadRequest("sku is required")
        return JsonResponse(shop.commit(order), status=201)

    def slow(request: HttpRequest) -> JsonResponse:
        return JsonResponse(shop.commit_slowly(json.loads(request.body)), status=201)

    if middleware:
        settings.MIDDLEWARE = ["writesafe.contrib.django.IdempotencyMiddleware"]
        settings.WRITESAFE_IDEMPOTENCY = {
            "writesafe": shop.ws,
            "views": {
                "orders": {"name": "django.orders", "scope": f"{__name__}.tenant_of"},
                "/slow": {"name": "django_slow"},
            },
        }
        _views.update(orders=orders, slow=slow)
        return
    settings.MIDDLEWARE = []
    _views.update(
        orders=idempotent_django_view(shop.ws, "django_orders")(orders),
        slow=idempotent_django_view(shop.ws, "django_slow")(slow),
    )


def tenant_of(request: Any) -> str:
    """The middleware's `scope` for `orders`, named in settings by its dotted path."""
    return "shop-tenant"


def django_app() -> Any:
    from django.core.wsgi import get_wsgi_application

    configure_django(_work_from_env())
    return get_wsgi_application()


def django_middleware_app() -> Any:
    from django.core.wsgi import get_wsgi_application

    configure_django(_work_from_env(), middleware=True)
    return get_wsgi_application()


def _urlpatterns() -> list[Any]:
    from django.urls import path

    return [path("orders", _route("orders"), name="orders"), path("slow", _route("slow"))]


def __getattr__(name: str) -> Any:
    # Django reads `urlpatterns` only once it is configured; Flask's tests never import Django.
    if name == "urlpatterns":
        return _urlpatterns()
    raise AttributeError(name)
