"""A URL is input: NUL (`%00`) in a path or a query is a 400 that says so, on SQLite and on
PostgreSQL (which refuses NUL in any text it compares: these were 500s), and a page or an
API call that fails inside is a 503 to retry, never a 500."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from costguard.console.pages import Pages
from costguard.daemon.logs import UNEXPECTED
from costguard.store.db import Database
from tests.console.harness import console_settings, serve
from tests.console.test_unknown_names import NOW
from tests.costs.fleet import add_interval
from tests.daemon_log import daemon_log

NUL_URLS = ["/console/instances/aws/i-%00x", "/console/teams/a%00b",
            "/console/instances?q=a%00b", "/console/audit?instance=a%00",
            "/console/?team=%00", "/api/v1/instances/i-%00x",
            "/api/v1/spend?by=team&filter=team%3Da%00b", "/api/v1/pending?team=a%00",
            "/healthz?x=%00"]


def _store(db_url: str) -> None:
    db = Database(db_url)
    with db.session() as s:
        add_interval(s, "i-1", NOW - timedelta(hours=5), 2, 3.0, team="research")
    db.dispose()


def test_nul_in_a_url_is_a_400_that_says_so(db_url: str) -> None:
    _store(db_url)
    with serve(console_settings(db_url)) as base:
        for path in NUL_URLS:
            answer = httpx.get(base + path)
            assert answer.status_code == 400, (path, answer.status_code, answer.text[:200])
            assert "NUL character" in answer.json()["error"], path
        # the same names without it are served as before; "%2500" is the text "%00"
        assert httpx.get(f"{base}/console/teams/research").status_code == 200
        assert httpx.get(f"{base}/console/instances?q=%2500").status_code == 200
        assert httpx.get(f"{base}/api/v1/instances/i-1").status_code in (200, 404)


def test_a_page_that_fails_inside_is_a_503_not_a_500(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _store(db_url)

    async def broken(self: Pages, request: object) -> object:
        raise RuntimeError("the store went away")

    monkeypatch.setattr(Pages, "overview", broken)
    with serve(console_settings(db_url)) as base:
        answer = httpx.get(f"{base}/console/")
    assert answer.status_code == 503
    assert answer.json() == {"error": "internal error; retry later"}
    assert "the store went away" not in answer.text


def test_a_failure_a_client_repeats_is_one_traceback_a_minute(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request that fails inside was a traceback in the log: a client repeating one,
    each time with another query, wrote as many as it liked. The same failure (the same
    line raising the same kind) is logged once a minute; another failure is its own."""
    _store(db_url)

    async def broken(self: Pages, request: object) -> object:
        raise RuntimeError("the store went away")

    async def other(self: Pages, request: object) -> object:
        raise KeyError("another bug")

    monkeypatch.setattr(Pages, "overview", broken)
    monkeypatch.setattr(Pages, "audit", other)
    with daemon_log(UNEXPECTED) as out, serve(console_settings(db_url)) as base, \
            httpx.Client(base_url=base) as client:
        for i in range(30):
            assert client.get(f"/console/?team=t{i}").status_code == 503
            assert client.get(f"/console/audit?window={i}d").status_code == 503
    text = out.getvalue()
    assert text.count("unexpected error serving") == 2, text[-3000:]
    assert text.count("RuntimeError: the store went away") == 1, text[-3000:]
    assert text.count("KeyError: 'another bug'") == 1, text[-3000:]
    assert text.count("Traceback") == 2


def test_a_form_field_holding_nul_is_no_value() -> None:
    from costguard.console.pages import _text

    assert _text(" idle-gpu ") == "idle-gpu"
    assert _text("idle-\x00gpu") is None
    assert _text(None) is None
