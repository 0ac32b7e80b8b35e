"""A URL is input: NUL (`%00`) in a path or a query is a 400 that says so, on SQLite and on
PostgreSQL (which refuses NUL in any text it compares: these were 500s), and a page or an
API call that fails inside is a 503 to retry, never a 500."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from costguard.console.pages import Pages
from costguard.store.db import Database
from tests.console.harness import console_settings, serve
from tests.console.test_unknown_names import NOW
from tests.costs.fleet import add_interval

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


def test_a_form_field_holding_nul_is_no_value() -> None:
    from costguard.console.pages import _text

    assert _text(" idle-gpu ") == "idle-gpu"
    assert _text("idle-\x00gpu") is None
    assert _text(None) is None
