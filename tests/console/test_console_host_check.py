"""DNS rebinding: with `console.auth: none` (served on loopback, no login) a page on another
site could name its own host, resolve it to 127.0.0.1 and read the spend API, the console
and /metrics through a local user's browser. Every route now refuses a Host header that
names anything but loopback and `http.allowed_hosts` (421), as Django's ALLOWED_HOSTS does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from costguard.store.db import Database
from tests.console.harness import console_settings, serve

ROUTES = ["/api/v1/spend", "/console/", "/metrics", "/healthz", "/v1/telemetry"]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    Database(url).dispose()
    yield url


@pytest.mark.parametrize("host", ["attacker.example:8787", "attacker.example", "127.0.0.1.nip.io",
                                  "localhost.attacker.example", "[::ffff:7f00:1]x", ""])
def test_a_foreign_host_gets_nothing_from_any_route(store: str, host: str) -> None:
    with serve(console_settings(store)) as base:
        for route in ROUTES:
            answer = httpx.get(base + route, headers={"Host": host})
            assert answer.status_code == 421, (route, host, answer.status_code)
            assert "http.allowed_hosts" in answer.json()["error"]
            assert "spend" not in answer.text.lower().replace("spend api", "")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8787", "localhost:8787", "[::1]:8787",
                                  "127.9.9.9", "LOCALHOST"])
def test_loopback_names_are_served(store: str, host: str) -> None:
    with serve(console_settings(store)) as base:
        assert httpx.get(base + "/healthz", headers={"Host": host}).status_code == 200
        assert httpx.get(base + "/api/v1/spend", headers={"Host": host}).status_code == 200


def test_allowed_hosts_adds_names_and_a_console_with_login_is_not_checked(store: str) -> None:
    settings = console_settings(store)
    settings.http.allowed_hosts = ["costguard.lan"]
    with serve(settings) as base:
        assert httpx.get(base + "/healthz", headers={"Host": "costguard.lan:8787"}
                         ).status_code == 200
        assert httpx.get(base + "/healthz", headers={"Host": "other.lan"}).status_code == 421
    proxied = console_settings(store, {"auth": "proxy", "proxy": {"trusted": ["127.0.0.1"]}})
    with serve(proxied) as base:  # a login guards the pages: the proxy's names are its own
        assert httpx.get(base + "/healthz", headers={"Host": "costguard.corp"}
                         ).status_code == 200
