"""The console's rules without a browser: sessions, CSRF, roles, tenants, and the hourly chart.

One started service per backend and transport serves the whole module (conftest.py: a ledger
migrated once, one uvicorn); each test meets it in two tenants of its own, with keys of its own,
so no test sees another's operations, sessions or revocations.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.service.support import Service, expire, on_the_module_loop, seed
from writesafe.ledger import ApiKeys, Role, Status
from writesafe.service._console_chart import HEIGHT, hourly_chart


@contextlib.asynccontextmanager
async def signed_in(service: Service, scope: str, role: Role) -> AsyncIterator[httpx.AsyncClient]:
    """A client whose console session was opened with `scope`'s `role` key."""
    async with service.client() as client:
        login = await client.post(
            "/console/login",
            data={"api_key": service.tokens[scope, role]},
            headers={"Origin": service.base_url},
        )
        assert login.status_code == 303, login.text
        assert login.headers["location"] == "/console/"
        yield client


def _csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', page.text)
    assert found is not None, page.text
    return found.group(1)


@on_the_module_loop
async def test_no_session_leads_to_the_login_form(service: Service) -> None:
    tenant_a = service.scopes[0]
    async with service.client() as client:
        for path in ("/console/", "/console/operations", "/console/operations/ok"):
            response = await client.get(path)
            assert (response.status_code, response.headers["location"]) == (303, "/console/login")
        # A Bearer header is the API's way in, not the console's: keys stay out of pages' reach.
        bearer = {"Authorization": f"Bearer {service.tokens[tenant_a, Role.OPERATOR]}"}
        assert (await client.get("/console/", headers=bearer)).status_code == 303
        form = await client.get("/console/login")
    assert form.status_code == 200
    assert 'name="api_key" type="password"' in form.text
    assert form.headers["content-security-policy"].startswith("default-src 'none'")
    assert form.headers["cache-control"] == "no-store"


@on_the_module_loop
async def test_the_session_cookie_is_http_only_strict_and_ends_with_the_key(
    service: Service,
) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with signed_in(service, tenant_a, Role.OPERATOR) as client:
        cookie = next(c for c in client.cookies.jar if c.name == "writesafe_console")
        assert cookie.path == "/console"
        assert cookie.has_nonstandard_attr("HttpOnly")
        assert cookie.get_nonstandard_attr("SameSite") == "strict"
        assert (await client.get("/console/")).status_code == 200

        key_id = service.tokens[tenant_a, Role.OPERATOR].split("_")[1]
        assert await ApiKeys(service.ws.ledger.engine).revoke(key_id) is not None
        revoked = await client.get("/console/")
    assert (revoked.status_code, revoked.headers["location"]) == (303, "/console/login")


@on_the_module_loop
async def test_a_wrong_key_is_refused_and_no_session_opens(service: Service) -> None:
    async with service.client() as client:
        response = await client.post(
            "/console/login",
            data={"api_key": "wsk_000000000000_nope"},
            headers={"Origin": service.base_url},
        )
    assert response.status_code == 401
    assert "not valid or was revoked" in response.text
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
@on_the_module_loop
async def test_forms_sent_from_another_origin_are_refused(
    service: Service, headers: dict[str, str]
) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    async with signed_in(service, tenant_a, Role.OPERATOR) as client:
        csrf = _csrf(await client.get("/console/operations/lost"))
        form = {"csrf": csrf, "outcome": "failed", "reason": "r"}
        resolved = await client.post("/console/operations/lost", data=form, headers=headers)
        login = await client.post(
            "/console/login", data={"api_key": service.tokens[tenant_b, Role.OPERATOR]},
            headers=headers,
        )  # fmt: skip
    assert resolved.status_code == 403
    assert login.status_code == 403
    status = await service.ws.status("lost", scope=tenant_a)
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN


@on_the_module_loop
async def test_a_form_without_the_sessions_token_changes_nothing(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    async with (
        signed_in(service, tenant_a, Role.OPERATOR) as operator,
        signed_in(service, tenant_b, Role.OPERATOR) as other,
    ):
        foreign = _csrf(await other.get("/console/"))  # a real token, of another session
        for csrf in ("", "0" * 64, foreign):
            form = {"csrf": csrf, "outcome": "failed", "reason": "r"}
            response = await operator.post("/console/operations/lost", data=form)
            assert response.status_code == 403, csrf
        logout = await operator.post("/console/logout", data={"csrf": foreign})
        assert logout.status_code == 403
    status = await service.ws.status("lost", scope=tenant_a)
    assert status is not None
    assert status.status is Status.OUTCOME_UNKNOWN


@on_the_module_loop
async def test_a_reader_sees_the_timeline_but_cannot_resolve(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with signed_in(service, tenant_a, Role.READER) as reader:
        page = await reader.get("/console/operations/stuck")
        assert page.status_code == 200
        assert 'class="resolve"' not in page.text
        assert "needs an API key with the operator role" in page.text
        form = {"csrf": _csrf(page), "outcome": "failed", "reason": "r"}
        response = await reader.post("/console/operations/stuck", data=form)
    assert response.status_code == 403
    status = await service.ws.status("stuck", scope=tenant_a)
    assert status is not None
    assert status.status is Status.NEEDS_ATTENTION


@on_the_module_loop
async def test_an_operator_resolves_only_in_its_own_tenant(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    await seed(service.ws, tenant_b, prefix="b-")
    async with signed_in(service, tenant_a, Role.OPERATOR) as operator:
        csrf = _csrf(await operator.get("/console/"))
        listing = await operator.get("/console/operations")
        foreign_page = await operator.get("/console/operations/b-lost")
        form = {
            "csrf": csrf,
            "outcome": "failed",
            "reason": "not in the shop",
            "evidence": '{"checked": "shop admin"}',
        }
        foreign = await operator.post("/console/operations/b-lost", data=form)
        own = await operator.post("/console/operations/lost", data=form)
        timeline = await operator.get("/console/operations/lost")
    # Tool names are the deployment's (the filter offers them all); operations are the tenant's.
    assert set(re.findall(r'href="/console/operations/([^"]+)"', listing.text)) == {
        "ok",
        "denied",
        "lost",
        "stuck",
    }
    assert foreign_page.status_code == foreign.status_code == 404
    assert (own.status_code, own.headers["location"]) == (303, "/console/operations/lost")
    assert "resolved as failed by api-key:" in timeline.text
    assert "not in the shop" in timeline.text
    untouched = await service.ws.status("b-lost", scope=tenant_b)
    assert untouched is not None
    assert untouched.status is Status.OUTCOME_UNKNOWN


@on_the_module_loop
async def test_a_pruned_key_s_page_says_it_expired_in_its_tenant_only(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    await expire(service.ws, tenant_a, "ok")
    async with signed_in(service, tenant_a, Role.OPERATOR) as operator:
        page = await operator.get("/console/operations/ok")
        form = {"csrf": _csrf(await operator.get("/console/")), "outcome": "failed", "reason": "r"}
        resolved = await operator.post("/console/operations/ok", data=form)
    async with signed_in(service, tenant_b, Role.OPERATOR) as foreign:
        elsewhere = await foreign.get("/console/operations/ok")
    for answer in (page, resolved):
        assert answer.status_code == 410
        assert "the operation under this key expired: retention pruned it at" in answer.text
    assert elsewhere.status_code == 404
    assert "expired" not in elsewhere.text


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"outcome": "succeeded", "reason": "r", "result": "{oops"}, "result is not JSON"),
        ({"outcome": "failed", "reason": "r", "evidence": "[1]"}, "evidence"),
        ({"outcome": "failed", "reason": "   "}, "reason"),
        ({"outcome": "maybe", "reason": "r"}, "outcome"),
    ],
)
@on_the_module_loop
async def test_a_bad_verdict_is_shown_back_and_changes_nothing(
    service: Service, form: dict[str, str], message: str
) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with signed_in(service, tenant_a, Role.OPERATOR) as operator:
        csrf = _csrf(await operator.get("/console/operations/stuck"))
        response = await operator.post("/console/operations/stuck", data={"csrf": csrf, **form})
    assert response.status_code == 422
    assert message in response.text
    assert 'class="resolve"' in response.text  # the form again, with what was typed
    status = await service.ws.status("stuck", scope=tenant_a)
    assert status is not None
    assert status.status is Status.NEEDS_ATTENTION


@on_the_module_loop
async def test_a_settled_operation_is_refused_with_the_reason(service: Service) -> None:
    tenant_a = service.scopes[0]
    await seed(service.ws, tenant_a)
    async with signed_in(service, tenant_a, Role.OPERATOR) as operator:
        page = await operator.get("/console/operations/ok")
        assert "is not waiting for a verdict" in page.text
        form = {"csrf": _csrf(page), "outcome": "failed", "reason": "r"}
        response = await operator.post("/console/operations/ok", data=form)
    assert response.status_code == 409
    assert "only needs_attention and outcome_unknown operations" in response.text


@on_the_module_loop
async def test_filters_that_do_not_parse_are_a_422_page(service: Service) -> None:
    tenant_a = service.scopes[0]
    async with signed_in(service, tenant_a, Role.OPERATOR) as operator:
        bad_status = await operator.get("/console/operations?status=lost")
        bad_age = await operator.get("/console/operations?older_than=-5")
        bad_cursor = await operator.get("/console/operations?cursor=x")
    for response in (bad_status, bad_age, bad_cursor):
        assert response.status_code == 422
        assert 'role="alert"' in response.text


def test_the_chart_stacks_each_hour_by_status_and_scales_to_the_peak() -> None:
    now = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    hour = datetime(2026, 12, 1, 9, tzinfo=UTC)
    counts = [
        (hour, Status.SUCCEEDED, 6),
        (hour, Status.NEEDS_ATTENTION, 2),
        (hour - timedelta(hours=2), Status.FAILED, 4),
        (hour - timedelta(hours=30), Status.FAILED, 99),  # before the window: not drawn
    ]
    chart = hourly_chart(counts, now)

    assert len(chart.bars) == 24
    assert (chart.peak, chart.total) == (8, 12)
    last, earlier = chart.bars[-1], chart.bars[-3]
    assert last.start == hour
    assert [(s.status, s.count) for s in last.segments] == [
        (Status.SUCCEEDED, 6),
        (Status.NEEDS_ATTENTION, 2),
    ]
    # The tallest bar fills the plot; a bar of half the count is half as tall; stacked in order.
    full = sum(s.height for s in last.segments)
    assert sum(s.height for s in earlier.segments) == pytest.approx(full / 2)
    assert last.segments[0].y + last.segments[0].height == chart.baseline
    assert last.segments[1].y + last.segments[1].height == pytest.approx(last.segments[0].y)
    assert 0 < last.segments[1].y < HEIGHT
    assert all(not bar.segments for bar in chart.bars[:-3])
    assert chart.labels[-1].text == "09:00"
    assert hourly_chart([], now).peak == 0


@on_the_module_loop
async def test_the_chart_counts_only_the_tenants_operations(service: Service) -> None:
    tenant_a, tenant_b = service.scopes
    await seed(service.ws, tenant_a)
    await seed(service.ws, tenant_b, prefix="b-")
    ledger = service.ws.ledger
    counted = await ledger.count_by_hour(
        scope=tenant_a, since=ledger.clock.now() - timedelta(hours=1)
    )
    assert sorted((status, n) for _, status, n in counted) == sorted(
        [
            (Status.SUCCEEDED, 1),
            (Status.FAILED, 1),
            (Status.OUTCOME_UNKNOWN, 1),
            (Status.NEEDS_ATTENTION, 1),
        ]
    )
    now = ledger.clock.now()
    assert all(now - timedelta(hours=1) <= hour <= now for hour, _, _ in counted)
    assert all(hour.minute == hour.second == 0 for hour, _, _ in counted)
