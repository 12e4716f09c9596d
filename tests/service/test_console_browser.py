"""The console in headless Chromium against a real `writesafe serve` on PostgreSQL + Redis.

An operator of tenant A signs in, finds an outcome_unknown operation, reads its timeline, resolves
it with a reason and sees the change; a reader of the same tenant gets no resolve form; tenant B's
operations never appear. Driven by selenium through Debian's chromium and chromedriver (never a
downloaded browser). Set WRITESAFE_CONSOLE_SCREENSHOTS=docs to refresh the screenshots in docs/.
"""

from __future__ import annotations

import base64
import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from tests.apps.console_app import register
from tests.conftest import PG_URL, REDIS_URL, run_sync
from tests.loopback import serving
from tests.service.support import issue_keys
from writesafe import WriteSafe
from writesafe.ledger import Role, Status
from writesafe.ledger._migrations import in_ledger_schema

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[2]

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
        "chromium-driver; .ci/run installs them)",
    ),
]
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)


@dataclass
class Deployment:
    base: str
    tokens: dict[tuple[str, Role], str]


async def _seed(options: dict[str, Any]) -> dict[tuple[str, Role], str]:
    """Each tenant gets one operation per state; tenant B's keys all start with `b-`."""
    ws = WriteSafe(**options)
    try:
        await ws.start()
        submit_order = register(ws)
        for scope, prefix in (("tenant-a", "a-"), ("tenant-b", "b-")):
            await submit_order({"n": 1, "sku": "A1"}, idempotency_key=f"{prefix}ok", scope=scope)
            for key, order in (("refused", {"refuse": True}), ("lost", {"lose": True})):
                with contextlib.suppress(Exception):
                    await submit_order(order, idempotency_key=prefix + key, scope=scope)
            with contextlib.suppress(Exception):
                await submit_order({"lose": True}, idempotency_key=f"{prefix}stuck", scope=scope)
            stuck = await ws.ledger.get(scope, f"{prefix}stuck")
            assert stuck is not None
            assert await ws.ledger.transition(stuck, Status.NEEDS_ATTENTION) is not None
        await _history(ws, submit_order)
        return await issue_keys(ws)
    finally:
        await ws.close()


async def _history(ws: WriteSafe, submit_order: Any) -> None:
    """A day of tenant A's past traffic (keys `a-hist-<n>`), moved back in time for the chart."""
    for n in range(40):
        order = {"n": n, "refuse": n % 5 == 0}
        with contextlib.suppress(Exception):
            await submit_order(order, idempotency_key=f"a-hist-{n}", scope="tenant-a")
    async with ws.ledger.engine.begin() as conn:
        await in_ledger_schema(conn)
        await conn.execute(
            text(
                "UPDATE writesafe_operations SET created_at = created_at - make_interval("
                "hours => (split_part(key, '-', 3)::int * 7) % 23 + 1), updated_at = updated_at"
                " - make_interval(hours => (split_part(key, '-', 3)::int * 7) % 23 + 1)"
                " WHERE key LIKE 'a-hist-%'"
            )
        )


@pytest.fixture
def deployment(pg_schema: str, redis_prefix: str) -> Iterator[Deployment]:
    """Seeded stores and `writesafe serve tests.apps.console_app:ws` in its own process."""
    options = {"database_url": PG_URL, "schema": pg_schema, "redis_url": REDIS_URL}
    options |= {"redis_prefix": redis_prefix, "auto_migrate": True}
    tokens = run_sync(_seed(options))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "WRITESAFE_DATABASE_URL": PG_URL,
        "WRITESAFE_DB_SCHEMA": pg_schema,
        "WRITESAFE_REDIS_URL": REDIS_URL,
        "WRITESAFE_REDIS_PREFIX": redis_prefix,
    }
    command = [sys.executable, "-c", "from writesafe.cli import main; main()", "serve"]
    app = [*command, "tests.apps.console_app:ws", "--log-level", "warning"]
    with serving(app, cwd=ROOT, env=env) as base:
        yield Deployment(base, tokens)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(str(CHROMEDRIVER)))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()


def _submit(browser: WebDriver, button: WebElement) -> None:
    """Click a form's button and wait for the page it leads to (a click does not wait)."""
    page = browser.find_element(By.TAG_NAME, "html")
    button.click()
    # Mid-navigation chromedriver may answer "node does not belong to the document" rather
    # than "stale element": that is the old page going too, so ask again.
    waiting = WebDriverWait(browser, 10, ignored_exceptions=(WebDriverException,))
    waiting.until(expected_conditions.staleness_of(page))


def _sign_in(browser: WebDriver, base: str, token: str) -> None:
    browser.get(f"{base}/console/")
    assert browser.current_url == f"{base}/console/login"  # no session: the login form
    browser.find_element(By.ID, "api_key").send_keys(token)
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
    assert browser.current_url == f"{base}/console/"


def _sign_out(browser: WebDriver) -> None:
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "form[action='/console/logout'] button"))


def _keys_listed(browser: WebDriver) -> set[str]:
    return {cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "table.ops td.key")}


def _screenshot(browser: WebDriver, name: str, tmp_path: Path) -> None:
    """The whole page as a PNG: into WRITESAFE_CONSOLE_SCREENSHOTS if set, else tmp_path."""
    folder = Path(os.environ.get("WRITESAFE_CONSOLE_SCREENSHOTS") or tmp_path)
    target = (folder if folder.is_absolute() else ROOT / folder) / f"console-{name}.png"
    shot = browser.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
    )
    target.write_bytes(base64.b64decode(shot["data"]))


def test_operator_resolves_an_unknown_outcome_in_the_browser(
    deployment: Deployment, browser: WebDriver, tmp_path: Path
) -> None:
    base = deployment.base
    _sign_in(browser, base, deployment.tokens["tenant-a", Role.OPERATOR])
    assert "wsk_" not in browser.current_url
    session = browser.get_cookie("writesafe_console")
    assert session is not None
    assert (session["httpOnly"], session["sameSite"], session["path"]) == (
        True,
        "Strict",
        "/console",
    )

    # What needs a person first: the unknown outcome and the escalated one, nothing of tenant B.
    unknown = browser.find_element(By.ID, "outcome_unknown")
    assert {a.text for a in unknown.find_elements(By.CSS_SELECTOR, "td.key a")} == {"a-lost"}
    attention = browser.find_element(By.ID, "needs_attention")
    assert {a.text for a in attention.find_elements(By.CSS_SELECTOR, "td.key a")} == {"a-stuck"}
    chart = browser.find_elements(By.CSS_SELECTOR, "svg.chart rect")
    assert {r.get_attribute("class") for r in chart} >= {"status-succeeded", "status-failed"}
    assert "b-" not in browser.page_source
    _screenshot(browser, "attention", tmp_path)

    # The listing filters by status: every state of tenant A, then only the failed one.
    browser.get(f"{base}/console/operations")
    listed = _keys_listed(browser)
    assert {key for key in listed if not key.startswith("a-hist-")} == {
        "a-ok",
        "a-refused",
        "a-lost",
        "a-stuck",
    }
    assert len(listed) == 4 + 40  # one page: 50 a page
    browser.find_element(By.CSS_SELECTOR, "input[name=status][value=failed]").click()
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    failed = _keys_listed(browser)
    assert {key for key in failed if not key.startswith("a-hist-")} == {"a-refused"}
    assert len(failed) == 1 + 8  # every fifth of the history was refused
    browser.get(f"{base}/console/operations?status=outcome_unknown&status=needs_attention")
    assert _keys_listed(browser) == {"a-lost", "a-stuck"}
    _screenshot(browser, "operations", tmp_path)

    # The timeline: the execution that timed out, its evidence and the envelope it produced.
    _submit(browser, browser.find_element(By.LINK_TEXT, "a-lost"))
    assert browser.current_url == f"{base}/console/operations/a-lost"
    events = browser.find_elements(By.CSS_SELECTOR, "ol.timeline li.event")
    assert [e.find_element(By.CSS_SELECTOR, ".kind").text for e in events] == ["Execution #1"]
    assert "ReadTimeout" in events[0].text
    assert "OUTCOME_UNKNOWN" in events[0].text
    _screenshot(browser, "timeline", tmp_path)

    form = browser.find_element(By.CSS_SELECTOR, "form.resolve")
    form.find_element(By.CSS_SELECTOR, "input[name=outcome][value=succeeded]").click()
    form.find_element(By.ID, "reason").send_keys("order o-77 is in the shop's back office")
    form.find_element(By.ID, "result").send_keys('{"order_id": "o-77", "sku": "A1"}')
    form.find_element(By.ID, "evidence").send_keys('{"ticket": "OPS-7"}')
    _submit(browser, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))

    assert browser.current_url == f"{base}/console/operations/a-lost"
    assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").text == "succeeded"
    operator = browser.find_elements(By.CSS_SELECTOR, "ol.timeline li.kind-operator")
    assert len(operator) == 1
    assert "tenant-a-operator" in operator[0].text
    assert "order o-77 is in the shop's back office" in operator[0].text
    assert "OPS-7" in operator[0].text
    assert not browser.find_elements(By.CSS_SELECTOR, "form.resolve")
    _screenshot(browser, "resolved", tmp_path)
    browser.get(f"{base}/console/")
    unknown = browser.find_element(By.ID, "outcome_unknown")
    assert not unknown.find_elements(By.CSS_SELECTOR, "td.key a")
    # The API tells the same story: the caller with the key now gets the vouched-for result.
    api = httpx.get(
        f"{base}/v1/operations/a-lost",
        headers={"Authorization": f"Bearer {deployment.tokens['tenant-a', Role.OPERATOR]}"},
    )
    assert api.json()["result"] == {"order_id": "o-77", "sku": "A1"}

    # Tenant B's operations are not there, even by their exact URL.
    browser.get(f"{base}/console/operations/b-lost")
    assert "no operation with this key" in browser.find_element(By.CSS_SELECTOR, ".error").text
    _sign_out(browser)
    assert browser.current_url == f"{base}/console/login"
    assert browser.get_cookie("writesafe_console") is None

    # A reader of tenant A sees the escalated operation but gets no form to resolve it.
    _sign_in(browser, base, deployment.tokens["tenant-a", Role.READER])
    browser.get(f"{base}/console/operations/a-stuck")
    assert browser.find_element(By.CSS_SELECTOR, "h1 .badge").text == "needs_attention"
    assert not browser.find_elements(By.CSS_SELECTOR, "form.resolve")
    assert "needs an API key with the operator role" in browser.page_source


def test_the_console_refuses_a_key_it_does_not_know(
    deployment: Deployment, browser: WebDriver
) -> None:
    browser.get(f"{deployment.base}/console/login")
    browser.find_element(By.ID, "api_key").send_keys("wsk_000000000000_not-a-real-secret")
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "form button[type=submit]"))
    assert "not valid or was revoked" in browser.find_element(By.CSS_SELECTOR, ".error").text
    assert browser.get_cookie("writesafe_console") is None
    browser.get(f"{deployment.base}/console/operations")
    assert browser.current_url == f"{deployment.base}/console/login"
