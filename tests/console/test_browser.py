"""The console in a real browser: Debian's headless Chromium, driven by Selenium, logs in
through a real OpenID Connect provider on loopback (oidc-provider-mock), opens every page
over the demo's store, reads the same figures as the CLI's JSON, snoozes an instance as an
admin (journaled with the admin's name) and is refused as a reader (#21).

Screenshots of every page land in test-artifacts/console/ ($COSTGUARD_ARTIFACTS overrides).
Chromium comes from scripts/ensure-chromium.sh (`make test` runs it); where it is missing
these tests skip as 'Chromium unavailable', except under CI=true, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.clock import ManualClock
from tests.conftest import in_ci
from tests.console.harness import REPO, console_settings, serve
from tests.console.test_pages import warn_one

with warnings.catch_warnings():  # Authlib's own deprecation notes, not ours to fix
    warnings.simplefilter("ignore")
    from oidc_provider_mock import User, run_server_in_thread

runner = CliRunner()
ARTIFACTS = Path(os.environ.get("COSTGUARD_ARTIFACTS", REPO / "test-artifacts")) / "console"
USERS = [User(sub="ann@example.com", claims={"email": "ann@example.com",
                                             "groups": ["ml", "finops"]}),
         User(sub="bob@example.com", claims={"email": "bob@example.com", "groups": ["ml"]})]


def _chromium() -> tuple[str, str]:
    browser = os.environ.get("COSTGUARD_CHROMIUM") or shutil.which("chromium")
    driver = os.environ.get("COSTGUARD_CHROMEDRIVER") or shutil.which("chromedriver")
    if not browser or not driver:
        reason = ("Chromium unavailable: chromium and chromedriver not found "
                  "(scripts/ensure-chromium.sh installs them)")
        if in_ci():
            pytest.fail(f"{reason} (CI=true: browser tests must run)", pytrace=False)
        pytest.skip(reason)
    return browser, driver


@contextmanager
def chromium(*, console_log: bool = False) -> Iterator[Any]:
    """Headless Chromium under chromedriver; `console_log` keeps the page's console
    messages (CSP violations among them) for `driver.get_log("browser")`."""
    from selenium import webdriver

    binary, driver_path = _chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--disable-gpu", "--window-size=1280,1400"):
        opts.add_argument(arg)
    if console_log:
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts,
                              service=webdriver.ChromeService(executable_path=driver_path))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def idp() -> Iterator[str]:
    with run_server_in_thread(user_claims=USERS) as server:
        yield f"http://localhost:{server.server_port}"


def shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def login(driver: Any, base: str, path: str, user: str) -> None:
    """Open `path`, be sent to the provider, pick `user`, and be sent back to `path`."""
    from selenium.webdriver.common.by import By

    driver.get(base + path)
    assert "/oauth2/authorize" in driver.current_url, driver.current_url
    follow(driver, driver.find_element(By.CSS_SELECTOR, f'button[name="sub"][value="{user}"]'))
    assert driver.current_url == base + path, driver.current_url
    who = driver.find_element(By.CSS_SELECTOR, "nav .who").text
    assert user in who, who


def _replaced(page: Any) -> Any:
    """`ec.staleness_of(page)`, and also true when Chrome answers that the old page's node
    "does not belong to the document": mid-navigation chromedriver can say so instead of
    "stale element" (an inspector error Selenium raises as a plain WebDriverException)."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def gone(_driver: Any) -> bool:
        try:
            page.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    return gone


def follow(driver: Any, element: Any) -> None:
    """Click `element` and wait until the next page has replaced this one: a click returns
    before the navigation it starts, and the old page may hold the same ids."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 20).until(_replaced(page))
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def usd(driver: Any, css: str) -> float:
    from selenium.webdriver.common.by import By

    return float(driver.find_element(By.CSS_SELECTOR, css).get_attribute("data-usd"))


def cli_json(url: str, *args: str) -> Any:
    result = runner.invoke(app, ["--database", url, *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_a_finops_lead_logs_in_reads_every_page_and_snoozes(
        browser: Any, idp: str, store: str, cli_clock: ManualClock) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    instance, policy = warn_one(store)
    settings = console_settings(store, {
        "auth": "oidc", "admin_group": "finops", "session_secret": "s" * 32,
        "oidc": {"issuer": idp, "client_id": "costguard", "client_secret": "not-a-secret"}})
    with serve(settings) as base:
        login(browser, base, "/console/", "ann@example.com")
        report = cli_json(store, "report", "--by", "team", "--since", "7d")
        assert usd(browser, "#card-spend") == report["total"]["cost_usd"] > 0
        assert usd(browser, "#card-idle") == report["total"]["idle_cost_usd"]
        assert usd(browser, "#total-cost") == report["total"]["cost_usd"]
        assert browser.find_elements(By.CSS_SELECTOR, "svg"), "the spend chart"
        service = browser.find_element(By.CSS_SELECTOR, "#service")
        assert service.is_displayed() and service.text.startswith("Governing "), service.text
        shot(browser, "overview")

        # a team: follow its link from the overview
        team = report["rows"][0]["team"]
        follow(browser, browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{team}"] a'))
        team_cli = cli_json(store, "report", "--by", "instance", "--by", "instance-type",
                            "--since", "7d", "--filter", f"team={team}")
        assert usd(browser, "#total-cost") == team_cli["total"]["cost_usd"]
        shot(browser, "team")

        # pending actions: the warned instance, and from there its page
        follow(browser, browser.find_element(By.LINK_TEXT, "Pending actions"))
        shot(browser, "pending")
        follow(browser, browser.find_element(By.LINK_TEXT, instance))
        explained = cli_json(store, "explain", instance)
        assert usd(browser, "#card-price") == explained["usd_per_hour"]
        assert browser.find_elements(By.CSS_SELECTOR, "section svg"), "24 h of activity"
        shot(browser, "instance")

        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-policy="{policy}"]')
        Select(row.find_element(By.CSS_SELECTOR, 'select[name="for"]')).select_by_value("4h")
        follow(browser, row.find_element(By.CSS_SELECTOR, 'button[name="snooze"]'))
        flash = browser.find_element(By.CSS_SELECTOR, ".flash").text
        assert f"{instance} snoozed until 2026-03-10 16:00" in flash
        shot(browser, "instance-snoozed")

        for link, name in (("Anomalies & budgets", "anomalies"), ("Audit log", "audit")):
            follow(browser, browser.find_element(By.LINK_TEXT, link))
            assert "That did not work" not in browser.page_source
            shot(browser, name)
        assert "ann@example.com snoozed until" in browser.page_source  # the audit log

        # a reader: no buttons, and a hand-made form is refused
        browser.get(base + "/console/logout")
        assert "Logged out" in browser.page_source
        login(browser, base, f"/console/instances/sim/{instance}", "bob@example.com")
        assert not browser.find_elements(By.CSS_SELECTOR, 'button[name="snooze"]')
        browser.execute_script("""
            const f = document.createElement('form'); f.method = 'post';
            f.action = arguments[0];
            for (const [k, v] of [['policy', arguments[1]], ['for', '1h'], ['csrf', 'x']]) {
              const i = document.createElement('input'); i.name = k; i.value = v;
              f.appendChild(i); }
            document.body.appendChild(f); f.submit();""",
            f"/console/instances/sim/{instance}/snooze", policy)
        error = WebDriverWait(browser, 20).until(
            ec.presence_of_element_located((By.ID, "error"))).text
        assert "Only members of the admin group (finops)" in error
        shot(browser, "refused")
    journal = [j for j in cli_json(store, "explain", instance)["journal"]
               if j["action"] == "snooze"]
    assert len(journal) == 1
    assert journal[0]["detail"].startswith("console user ann@example.com snoozed")
