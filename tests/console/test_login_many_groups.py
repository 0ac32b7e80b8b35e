"""A person in hundreds of directory groups (Entra ID and Okta hand out GUIDs) logs in: the
session cookie keeps only the admin group, so it stays under the 4 KB a browser stores. It
held every group, and past 4 KB Chromium dropped it: each page sent the person back to the
login, for ever. In Debian's headless Chromium, through a real OpenID Connect provider."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from costguard.console.app import SESSION_COOKIE
from tests.console.harness import console_settings, serve
from tests.console.test_browser import browser, login  # noqa: F401 (the browser fixture)
from tests.console.test_pages import warn_one

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from oidc_provider_mock import User, run_server_in_thread

GROUPS = [str(uuid.UUID(int=n)) for n in range(400)]  # ~16 KB of group ids


@pytest.fixture
def many_groups_idp() -> Iterator[str]:
    users = [User(sub="ann@example.com", claims={"email": "ann@example.com",
                                                 "groups": [*GROUPS, "finops"]}),
             User(sub="bob@example.com", claims={"email": "bob@example.com",
                                                 "groups": GROUPS})]
    with run_server_in_thread(user_claims=users) as server:
        yield f"http://localhost:{server.server_port}"


def test_a_person_in_hundreds_of_groups_logs_in_and_stays(
        browser: Any, many_groups_idp: str, store: str) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    instance, _ = warn_one(store)
    settings = console_settings(store, {
        "auth": "oidc", "admin_group": "finops", "session_secret": "s" * 32,
        "oidc": {"issuer": many_groups_idp, "client_id": "costguard",
                 "client_secret": "not-a-secret"}})
    with serve(settings) as base:
        page = f"/console/instances/sim/{instance}"
        login(browser, base, page, "ann@example.com")
        cookie = browser.get_cookie(SESSION_COOKIE)
        assert cookie is not None and len(cookie["value"]) < 1024, cookie
        assert browser.find_elements(By.CSS_SELECTOR, 'button[name="snooze"]')  # an admin
        browser.get(base + "/console/audit")  # the next page: still logged in
        assert browser.current_url == base + "/console/audit"
        browser.get(base + "/console/logout")
        login(browser, base, page, "bob@example.com")  # in every group but the admin one
        assert not browser.find_elements(By.CSS_SELECTOR, 'button[name="snooze"]')
