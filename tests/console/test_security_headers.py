"""The console is held by the browser to what it is: no script, forms that post to itself,
never inside another site's frame (an admin lured into clicking a framed "stop now" is
clickjacking, which the CSRF token does not stop). Every answer carries the headers; in
Debian's headless Chromium the pages keep their styles with no policy violation, a frame on
another site is refused, and a name holding markup is shown as text."""

from __future__ import annotations

import http.server
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import select

from costguard.daemon.headers import HEADERS
from costguard.store.db import Database
from costguard.store.tables import InstanceRow
from tests.console.harness import console_settings, serve
from tests.console.test_browser import chromium

PATHS = ["/console/", "/console/instances", "/console/pending", "/console/audit",
         "/api/v1/spend?by=team", "/healthz", "/metrics", "/console/no-such-page",
         "/console/instances?q=%00"]
MARKUP = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


def test_every_answer_carries_the_headers(store: str) -> None:
    with serve(console_settings(store)) as base:
        for path in PATHS:
            answer = httpx.get(base + path)
            assert answer.status_code in (200, 400, 404), (path, answer.status_code)
            for name, value in HEADERS.items():
                assert answer.headers.get(name) == value, (path, name)
    assert "frame-ancestors 'none'" in HEADERS["Content-Security-Policy"]
    assert "script-src" not in HEADERS["Content-Security-Policy"]  # default-src 'none' holds


@contextmanager
def _framing_site(target: str) -> Iterator[str]:
    """Another site (another origin: its own port, named localhost) whose page frames
    `target`."""
    page = f'<html><body><iframe id="f" src="{target}" width="900" height="600"></iframe>'

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = socketserver.TCPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def logged_browser() -> Iterator[Any]:
    with chromium(console_log=True) as driver:
        yield driver


def _security(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("source") == "security"]


def test_in_a_browser_pages_keep_their_styles_frames_are_refused_and_markup_is_text(
        logged_browser: Any, store: str) -> None:
    from selenium.webdriver.common.by import By

    db = Database(store, create=False)
    with db.session() as s:
        victim = s.exec(select(InstanceRow).limit(1)).one()
        s.execute(update(InstanceRow).where(InstanceRow.instance_id == victim.instance_id)
                  .values(name=MARKUP))
        s.commit()
    db.dispose()
    driver = logged_browser
    with serve(console_settings(store)) as base:
        for path in ("/console/", "/console/instances",
                     f"/console/instances/{victim.provider}/{victim.instance_id}"):
            driver.get(base + path)
            assert driver.title.startswith("costguard"), (path, driver.title)
            # the inline stylesheet applies (the policy allows it)
            body = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
            assert body == "rgb(246, 247, 251)", (path, body)
            assert _security(driver) == [], path
        assert MARKUP in driver.find_element(By.TAG_NAME, "body").text  # text, not markup
        assert not driver.find_elements(By.CSS_SELECTOR, "img[src=x]")

        with _framing_site(base + "/console/") as other:
            driver.get(other)
            refused = _security(driver)
            assert any("frame-ancestors 'none'" in m for m in refused), refused
            driver.switch_to.frame(driver.find_element(By.ID, "f"))
            assert not driver.execute_script("return location.href").startswith(base)
            driver.switch_to.default_content()


def test_the_html_report_file_keeps_its_styles_under_its_own_policy(
        logged_browser: Any, store: str, tmp_path: Any) -> None:
    """The HTML report is a file people mail around: its own policy (a meta tag) lets its
    inline styles and SVG charts through and nothing else."""
    from typer.testing import CliRunner

    from costguard.cli import app

    out = tmp_path / "report.html"
    done = CliRunner().invoke(app, ["--database", store, "report", "--by", "team", "--since",
                                    "2026-03-01", "--until", "2026-03-11", "--format", "html",
                                    "-o", str(out)])
    assert done.exit_code == 0, done.output
    logged_browser.get(out.as_uri())
    body = logged_browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert body == "rgb(246, 247, 251)"
    assert logged_browser.execute_script("return document.querySelectorAll('svg').length") >= 1
    assert _security(logged_browser) == []
