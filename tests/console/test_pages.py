"""The console's pages over HTTP: the CLI's figures, no page without a login, never served
open on an address others reach, and snooze / stop now for admins only, CSRF-checked and
journaled with the person's name (#21). The same in a real browser: test_browser.py."""

from __future__ import annotations

import html
import json
import logging
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlmodel import select
from typer.testing import CliRunner

from costguard.cli import app
from costguard.clock import ManualClock
from costguard.console.app import console_routes
from costguard.daemon.logs import REFUSALS
from costguard.store.db import Database
from costguard.store.tables import PolicyStateRow
from tests.console.conftest import ADMIN, PROXY, READER
from tests.console.harness import NOW, console_settings, serve
from tests.daemon_log import daemon_log

runner = CliRunner()


def report_json(url: str, *args: str) -> Any:
    result = runner.invoke(app, ["--database", url, "report", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def usd_of(page: str, element_id: str) -> float:
    found = re.search(rf'id="{element_id}"[^>]*data-usd="([-\d.e]+)"', page)
    assert found, element_id
    return float(found.group(1))


@pytest.fixture
def site(store: str, cli_clock: ManualClock) -> Any:
    with serve(console_settings(store, PROXY)) as base:
        yield base


def test_pages_show_the_report_s_figures(site: str, store: str) -> None:
    page = httpx.get(f"{site}/console/", headers=READER).text
    cli = report_json(store, "--by", "team", "--since", "7d")
    assert usd_of(page, "card-spend") == cli["total"]["cost_usd"] > 0
    assert usd_of(page, "card-idle") == cli["total"]["idle_cost_usd"]
    unattributed = sum(r["cost_usd"] for r in cli["rows"] if r["team"] == "unattributed")
    assert usd_of(page, "card-unattributed") == round(unattributed, 2)
    for row in cli["rows"]:  # every team's row, linked to its page
        assert f'data-key="{html.escape(row["team"])}"' in page
    team = cli["rows"][0]["team"]
    team_page = httpx.get(f"{site}/console/teams/{team}?window=1d", headers=READER).text
    team_cli = report_json(store, "--by", "instance", "--by", "instance-type", "--since", "1d",
                           "--filter", f"team={team}")
    assert usd_of(team_page, "total-cost") == team_cli["total"]["cost_usd"]
    for path in ("pending", "anomalies", "audit"):
        r = httpx.get(f"{site}/console/{path}", headers=READER)
        assert r.status_code == 200 and "<nav>" in r.text, path
    bad = httpx.get(f"{site}/console/?window=soon", headers=READER)
    assert bad.status_code == 400 and "window" in bad.text and "Traceback" not in bad.text
    missing = httpx.get(f"{site}/console/instances/sim/i-nobody", headers=READER)
    assert missing.status_code == 404 and "i-nobody" in missing.text


def test_an_instance_page_speaks_of_its_own_accelerators(site: str, store: str) -> None:
    """The demo's TPU node and Trainium instance: chips and devices, not GPUs."""
    found = report_json(store, "--by", "instance", "--by", "accelerator", "--since", "7d")
    kinds = {r["instance"]: r["accelerator"] for r in found["rows"]}
    tpu = next(i for i, k in kinds.items() if k == "TPU")
    trn = next(i for i, k in kinds.items() if k == "Trainium")
    gpu = next(i for i, k in kinds.items() if k == "GPU")
    page = httpx.get(f"{site}/console/instances/sim/{tpu}", headers=READER).text
    assert "8 TPU chips" in page and "TPU activity, last 24 h" in page and "TPU-h" in page
    page = httpx.get(f"{site}/console/instances/sim/{trn}", headers=READER).text
    assert "1 Trainium device<" in page and "Trainium activity" in page
    page = httpx.get(f"{site}/console/instances/sim/{gpu}", headers=READER).text
    assert "GPU activity, last 24 h" in page and re.search(r"· \d+ GPUs?</p>", page)


def test_no_page_without_a_login(site: str) -> None:
    for path in ("/console/", "/console/pending", "/console/audit",
                 "/console/instances/sim/i-sim07000011"):
        r = httpx.get(site + path)
        assert r.status_code == 401 and "did not say who you are" in r.text, path
    assert httpx.get(site + "/", follow_redirects=False).headers["location"] == "/console/"


def test_oidc_mode_sends_a_stranger_to_the_login(store: str, cli_clock: ManualClock) -> None:
    settings = console_settings(store, {"auth": "oidc", "oidc": {
        "issuer": "http://127.0.0.1:9/idp", "client_id": "costguard", "client_secret": "s"}})
    with serve(settings) as base:
        r = httpx.get(f"{base}/console/audit?window=1d", follow_redirects=False)
        assert r.status_code == 303
        assert r.headers["location"] == "/console/login?next=/console/audit%3Fwindow%3D1d"
        api = httpx.get(f"{base}/api/v1/spend")
        assert api.status_code == 401
        # the provider is down: a plain 503 that says so, not a traceback
        down = httpx.get(f"{base}/console/login?next=//evil.example/")
        assert down.status_code == 503 and "identity provider" in down.text


def test_failed_logins_at_a_stranger_s_will_log_one_line_a_minute(
        store: str, cli_clock: ManualClock) -> None:
    """Anyone who reaches the console can send a login callback with an error of their own
    words, or start a login while the identity provider is down: a line each was a log
    at their will. The first of each is logged, then the count of those left out."""
    settings = console_settings(store, {"auth": "oidc", "oidc": {
        "issuer": "http://127.0.0.1:9/idp", "client_id": "costguard", "client_secret": "s"}})
    with daemon_log(REFUSALS) as out, serve(settings) as base, \
            httpx.Client(base_url=base) as client:
        for i in range(40):
            r = client.get(f"/console/auth/callback?error=made-up-{i}&state=x")
            assert r.status_code == 401 and f"made-up-{i}" in r.text
            assert client.get("/console/login").status_code == 503
    text = out.getvalue()
    assert text.count("OIDC login refused: made-up-0") == 1, text
    assert text.count("OIDC login refused") == 1, text
    assert text.count("OIDC login failed") == 1, text


def test_never_served_open_on_an_address_others_reach(
        store: str, caplog: pytest.LogCaptureFixture) -> None:
    from costguard.clock import ManualClock as Clock
    from costguard.policy.schema import PolicySet

    db = Database(store, create=False)
    try:
        def routes(auth: str, host: str) -> int:
            cfg = console_settings(store, {"auth": auth} | (
                {"oidc": {"issuer": "http://idp", "client_id": "c", "client_secret": "s"}}
                if auth == "oidc" else {}), host=host)
            return len(console_routes(cfg, db, Clock(NOW), PolicySet, host))

        with caplog.at_level(logging.ERROR, "costguard.console"):
            assert routes("none", "0.0.0.0") == 2  # only the refusals
            assert routes("none", "10.1.2.3") == 2
        assert "console.auth is none" in caplog.text and "docs/console.md" in caplog.text
        assert routes("none", "127.0.0.1") > 2 and routes("none", "::1") > 2
        assert routes("proxy", "0.0.0.0") > 2 and routes("oidc", "0.0.0.0") > 2
    finally:
        db.dispose()
    # who opens the URL anyway reads why, and no figure
    with serve(console_settings(store, host="0.0.0.0")) as site:
        for path in ("/console/", "/console/teams/research", "/api/v1/spend"):
            r = httpx.get(site + path)
            assert r.status_code == 403 and "console.auth is none" in r.json()["error"]
            assert "cost_usd" not in r.text


def _form(page: str, action: str) -> dict[str, str]:
    form = re.search(rf'<form[^>]*action="[^"]*/{action}">(.*?)</form>', page, re.S)
    assert form, f"no {action} form"
    return {name: html.unescape(value) for name, value in re.findall(
        r'<input type="hidden" name="(\w+)" value="([^"]*)">', form.group(1))}


def warn_one(url: str) -> tuple[str, str]:
    """Warn an instance as the cycle does (a deadline 15 minutes on): the demo's last cycle
    left none warned. Returns the instance and the policy."""
    db = Database(url, create=False)
    try:
        with db.session() as s:
            row = s.exec(select(PolicyStateRow).where(
                PolicyStateRow.policy == "idle-gpu-shutdown",
                PolicyStateRow.state == "cleared")).first()
            assert row is not None, "the demo left no cleared idle state to warn"
            row.state, row.since, row.deadline = "warned", NOW, NOW + timedelta(minutes=15)
            row.evidence = "SM activity 0.4% for 45m (test)"
            s.add(row)
            s.commit()
            return row.instance_id, row.policy
    finally:
        db.dispose()


def test_pending_shows_who_stops_when_and_why(store: str, cli_clock: ManualClock) -> None:
    instance, policy = warn_one(store)
    with serve(console_settings(store, PROXY)) as site:
        items = httpx.get(f"{site}/api/v1/pending", headers=READER).json()["items"]
        assert [(p["instance_id"], p["policy"], p["state"]) for p in items] == [
            (instance, policy, "warned")]
        assert items[0]["deadline"].startswith("2026-03-10T12:15")
        page = httpx.get(f"{site}/console/pending", headers=READER).text
        assert instance in page and "acts at 2026-03-10 12:15 UTC" in page
        assert "SM activity 0.4% for 45m (test)" in page
        assert items[0]["mode"] == "enforce" and "would act" not in page


def test_pending_in_dry_run_says_what_would_happen_not_what_will(store: str) -> None:
    # the second-hour report: a dry-run policy's warned rows read "warned · acts at 19:37"
    # and /api/v1/pending had no mode, though nothing would be done
    from costguard.console import views
    from costguard.demo.run import demo_policy_paths
    from costguard.policy.load import load_policy_set

    instance, policy = warn_one(store)
    settings = console_settings(store)
    dry = load_policy_set(demo_policy_paths(settings))  # as shipped: every policy dry-run
    assert not any(p.is_enforced for p in dry.policies)
    db = Database(store, create=False)
    try:
        with db.session() as s:
            items = views.pending(s, dry)
    finally:
        db.dispose()
    assert [(p["instance_id"], p["policy"], p["mode"]) for p in items] == [
        (instance, policy, "dry-run")]
    assert items[0]["team"] not in (None, "unattributed")
    from costguard.console.app import console_server

    db = Database(store, create=False)
    server = console_server(settings, db, ManualClock(NOW), lambda: dry, bind="127.0.0.1",
                            port=0)
    try:
        base = f"http://127.0.0.1:{server.port}"
        page = httpx.get(f"{base}/console/pending").text
        api = httpx.get(f"{base}/api/v1/pending").json()["items"]
    finally:
        server.stop()
        db.dispose()
    assert "would act at 2026-03-10 12:15 UTC (dry-run: nothing is done)" in page
    assert "would warn" in page and ">acts at" not in page
    assert api[0]["mode"] == "dry-run"


def test_snooze_is_for_admins_with_the_page_s_token_and_journaled(
        store: str, cli_clock: ManualClock) -> None:
    instance, policy = warn_one(store)
    with serve(console_settings(store, PROXY)) as site:
        snooze_from_the_page(site, instance, policy)


def snooze_from_the_page(site: str, instance: str, policy: str) -> None:
    path = f"/console/instances/sim/{instance}"
    reader_page = httpx.get(site + path, headers=READER).text
    assert "Snooze</button>" not in reader_page and "Stop now" not in reader_page

    with httpx.Client(base_url=site, headers=ADMIN) as admin:
        page = admin.get(path).text
        assert "Snooze</button>" in page and "Stop now</button>" in page
        fields = _form(page, "snooze")
        assert fields["policy"] and len(fields["csrf"]) >= 32
        # a forged form (no token, or another session's) is refused
        for token in ("", "x" * 43):
            r = admin.post(f"{path}/snooze", data={**fields, "csrf": token, "for": "4h"})
            assert r.status_code == 403 and "expired" in r.text
        # a reader cannot act, whatever the form carries
        with httpx.Client(base_url=site, headers=READER, cookies=admin.cookies) as reader:
            r = reader.post(f"{path}/snooze", data={**fields, "for": "4h"})
            assert r.status_code == 403 and "admin group (finops)" in r.text
        doc = admin.get(f"/api/v1/instances/{instance}").json()
        assert not [j for j in doc["journal"] if j["action"] == "snooze"]

        assert fields["policy"] == policy
        r = admin.post(f"{path}/snooze", data={**fields, "for": "4h"},
                       follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == path
        shown = admin.get(path).text
        assert f"{instance} snoozed until" in shown  # the flash, once
        assert f"{instance} snoozed until" not in admin.get(path).text

    doc = httpx.get(f"{site}/api/v1/instances/{instance}", headers=READER).json()
    state = next(p["state"] for p in doc["policies"] if p["policy"] == policy)
    assert state["snooze_until"].startswith("2026-03-10 16:00")  # now + 4h
    journal = [j for j in doc["journal"] if j["action"] == "snooze"]
    assert journal and "ann@example.com" in journal[-1]["detail"]
    assert "console" in journal[-1]["detail"]
    audit = httpx.get(f"{site}/console/audit?window=1d", headers=READER).text
    assert "ann@example.com" in audit


def test_stop_now_makes_the_instance_due_at_the_next_cycle_and_is_journaled(
        store: str, cli_clock: ManualClock) -> None:
    instance, policy = warn_one(store)
    path = f"/console/instances/sim/{instance}"
    with serve(console_settings(store, PROXY)) as site, \
            httpx.Client(base_url=site, headers=ADMIN) as admin:
        fields = _form(admin.get(path).text, "stop")
        assert fields["policy"] == policy
        r = admin.post(f"{path}/stop", data=fields, follow_redirects=True)
        assert f"asked to stop {instance} now: it stops at the next cycle if still idle" \
            in r.text
        doc = admin.get(f"/api/v1/instances/{instance}").json()
    state = next(p["state"] for p in doc["policies"] if p["policy"] == policy)
    assert state["deadline"].startswith("2026-03-10 12:00")  # due now, not 12:15
    journal = [j for j in doc["journal"] if j["action"] == "stop-now"]
    assert journal and "ann@example.com" in journal[-1]["detail"]


def test_a_window_of_dates_is_the_report_s_since_until(site: str, store: str) -> None:
    page = httpx.get(f"{site}/console/", headers=READER,
                     params={"window": "7d", "since": "2026-03-10", "until": ""}).text
    cli = report_json(store, "--by", "team", "--since", "2026-03-10")
    assert usd_of(page, "card-spend") == cli["total"]["cost_usd"] > 0
    assert 'name="since" id="since" aria-label="from (UTC)" value="2026-03-10"' in page
    assert "2026-03-10 00:00 → 2026-03-10 12:00" in page
    # the nav carries the window to the other pages
    assert 'href="/console/pending?window=7d&amp;since=2026-03-10&amp;until="' in page


def test_waste_beyond_idle_is_shown_per_team_when_verdicts_hold_some(
        store: str, cli_clock: ManualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # the 12-hour demo is too short for a verdict (24 h of readings): the stored verdicts'
    # per-team sums stand in, as the underused metrics read them
    from costguard.recommend import stored

    teams = {"research": (812.5, 1900.0, 2), "nlp": (40.25, 120.0, 1)}
    monkeypatch.setattr(stored, "underused_by_team", lambda s, cfg, now: teams)
    with serve(console_settings(store, PROXY)) as site:
        page = httpx.get(f"{site}/console/", headers=READER).text
    assert usd_of(page, "card-waste") == 852.75
    waste = page[page.index('id="waste"'):]
    assert 'data-key="research"' in waste and 'data-usd="812.5"' in waste
    assert "$1,900.00" in waste and "$120.00" in waste


def test_a_sidecar_proxy_s_forwarded_for_does_not_hide_that_it_is_the_proxy(
        store: str, cli_clock: ManualClock) -> None:
    """oauth2-proxy (Go's reverse proxy) adds X-Forwarded-For with the user's address. The
    trust check is on the peer that connected, the proxy: the header must neither lock
    everyone out (uvicorn rewriting the client to the user's address) nor let a request
    that says it came through a trusted address in."""
    with serve(console_settings(store, PROXY)) as site:
        through_proxy = {**READER, "X-Forwarded-For": "203.0.113.9"}
        assert httpx.get(f"{site}/console/", headers=through_proxy).status_code == 200
        assert httpx.get(f"{site}/api/v1/spend", headers=through_proxy).status_code == 200
    only_10 = console_settings(store, {**PROXY, "proxy": {"trusted": ["10.0.0.0/8"]}})
    with serve(only_10) as site:  # loopback is not trusted here: no header makes it so
        claimed = {**READER, "X-Forwarded-For": "10.1.2.3", "X-Real-IP": "10.1.2.3"}
        assert httpx.get(f"{site}/console/", headers=claimed).status_code == 401


def test_the_session_cookie_is_secure_when_the_console_is_reached_over_https(
        store: str, cli_clock: ManualClock) -> None:
    oidc = {"issuer": "http://127.0.0.1:9/idp", "client_id": "c", "client_secret": "s"}
    for public_url, secure in (("https://costguard.example.com", True), (None, False)):
        settings = console_settings(store, {"auth": "oidc", "oidc": {
            **oidc, "public_url": public_url}})
        with serve(settings) as site:
            # the login keeps where to come back to in the session (the provider is down)
            r = httpx.get(f"{site}/console/login?next=/console/audit", follow_redirects=False)
        cookie = r.headers["set-cookie"].lower()
        assert "costguard_session=" in cookie and "samesite=lax" in cookie
        assert ("secure" in cookie) is secure, cookie


def _service(page: str) -> str:
    """The overview's service strip: from its first element to the cards."""
    return page[page.index('id="service"') - 40:page.index('<div class="cards">')]


def test_the_overview_says_what_costguard_status_says(site: str, store: str) -> None:
    status = runner.invoke(app, ["--database", store, "status", "--format", "json"])
    info = json.loads(status.output)
    page = httpx.get(f"{site}/console/", headers=READER).text
    strip = _service(page)
    assert info["healthy"] and 'data-healthy="true"' in strip
    assert f'data-governed="{info["governed_instances"]}"' in strip
    assert f"Governing {info['governed_instances']:,} instances" in strip
    assert f"last cycle #{info['last_cycle']['id']} ok" in strip
    for quiet in ("service-paused", "service-degraded", "service-dropped"):
        assert quiet not in page


def _not_a_demo(store: str) -> None:
    """The demo's store as a daemon's would be: without the demo's mark."""
    from costguard.store.tables import ControlRow

    db = Database(store, create=False)
    with db.session() as s:
        mark = s.get(ControlRow, "demo")
        assert mark is not None
        s.delete(mark)
        s.commit()
    db.dispose()


def test_the_overview_says_when_no_cycle_has_finished_for_a_while(store: str) -> None:
    _not_a_demo(store)
    later = ManualClock(NOW + timedelta(hours=2))
    with serve(console_settings(store, PROXY), clock=later) as site:
        page = httpx.get(f"{site}/console/", headers=READER).text
    strip = _service(page)
    assert 'class="error"' in strip and 'data-healthy="false"' in strip
    assert "No cycle has finished for 120 minutes" in strip
    assert "one finishes every 5 minutes while <code>costguard run</code> is up" in strip


def test_the_overview_names_a_pause_unreadable_scopes_and_dropped_readings(
        store: str) -> None:
    from costguard.store import control
    from costguard.store.tables import CycleRow, GapRow

    db = Database(store, create=False)
    with db.session() as s:
        control.put(s, control.PAUSED, "true", NOW)
        s.add(GapRow(provider="aws", scope="111122223333/us-east-1 metrics", error="denied",
                     first_seen=NOW - timedelta(hours=1), last_seen=NOW))
        s.add(CycleRow(started_at=NOW, finished_at=NOW, status="ok",
                       summary={"instances": {"sim": 61}, "readings_dropped": {"aws": 3}}))
        s.commit()
    db.dispose()
    with serve(console_settings(store, PROXY)) as site:
        page = httpx.get(f"{site}/console/", headers=READER).text
    strip = _service(page)
    assert 'data-healthy="false"' in strip  # cycling, but degraded
    assert "Acting is paused" in strip
    degraded = strip[strip.index('id="service-degraded"'):]
    assert "111122223333/us-east-1 metrics (since 2026-03-10 11:00 UTC)" in degraded
    dropped = strip[strip.index('id="service-dropped"'):]
    assert "aws 3." in dropped and "never idle" in dropped


def test_a_demo_s_store_is_said_to_be_one_when_its_cycles_are_over(store: str) -> None:
    # `costguard demo` then `costguard console`: no daemon cycles a demo's store, and the
    # console says so plainly, not as an outage
    later = ManualClock(NOW + timedelta(hours=2))
    with serve(console_settings(store, PROXY), clock=later) as site:
        page = httpx.get(f"{site}/console/", headers=READER).text
    strip = _service(page)
    assert 'class="error"' not in strip and 'data-demo="true"' in strip
    assert "A demo's store (<code>costguard demo</code> wrote it)" in strip
    assert "no daemon cycles it" in strip
    status = runner.invoke(app, ["--database", store, "status"], env={"COLUMNS": "200"})
    assert "not cycling: a demo's store" in status.output


def test_the_overview_shows_what_is_paid_for_and_not_running(site: str, store: str) -> None:
    """The report's "paid for, not running" lines (JSON), row for row, on the overview."""
    report = runner.invoke(app, ["--database", store, "report", "--format", "json"])
    lines = json.loads(report.output)["paid_not_running"]
    page = httpx.get(f"{site}/console/", headers=READER).text
    table = page[page.index('id="paid-not-running"'):]
    table = table[:table.index("</table>")]
    assert lines and table.count("<tr data-key=") == len(lines)
    for line in lines:
        row = table[table.index(f'data-key="{line["team"]}|{line["kind"]}"'):]
        assert f'data-usd="{line["usd_per_month"]}"' in row[:row.index("</tr>")]
