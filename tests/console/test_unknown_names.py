"""A name nothing was recorded for says so: `/console/teams/nosuch` is a 404 naming the
teams there are (it was a 200 with an empty chart), and `report --filter team=nosuch`
says no spend was ever recorded for it (it said "run costguard run first")."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from typer.testing import CliRunner

from costguard.cli import app
from costguard.store.db import Database
from tests.console.harness import console_settings, serve
from tests.costs.fleet import add_interval

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    db = Database(url)
    with db.session() as s:
        add_interval(s, "i-1", NOW - timedelta(hours=5), 2, 3.0, team="research")
        add_interval(s, "i-2", NOW - timedelta(days=30), 2, 3.0, team="vision")
    db.dispose()
    return url


def test_an_unknown_team_page_is_a_404_and_a_quiet_team_is_not(tmp_path: Path) -> None:
    url = _store(tmp_path)
    with serve(console_settings(url)) as base:
        missing = httpx.get(f"{base}/console/teams/nosuch")
        assert missing.status_code == 404
        assert "no spend was ever recorded for team" in missing.text
        assert "research, vision" in missing.text
        # vision spent a month ago: a known team, an empty window, a page
        assert httpx.get(f"{base}/console/teams/vision").status_code == 200
        assert httpx.get(f"{base}/console/teams/research").status_code == 200


def test_report_names_a_filter_value_nothing_was_recorded_for(tmp_path: Path) -> None:
    url = _store(tmp_path)
    runner = CliRunner()
    period = ["--since", "2026-03-03", "--until", "2026-03-11"]
    out = runner.invoke(app, ["--database", url, "report", "--by", "team", "--filter",
                              "team=nosuch", *period]).output
    flat = " ".join(out.split())
    assert ("No spend was ever recorded for team=nosuch; the team values recorded: research, "
            "vision.") in flat
    assert "costguard run" not in flat
    quiet = runner.invoke(app, ["--database", url, "report", "--by", "team", "--filter",
                                "team=vision", *period]).output
    assert "No spend for team=vision in this period" in " ".join(quiet.split())


def test_an_instance_is_found_by_any_part_of_its_id_name_type_or_team(tmp_path: Path) -> None:
    from costguard.model import Instance, InstanceState
    from costguard.store.inventory import record_inventory

    url = _store(tmp_path)
    db = Database(url)
    with db.session() as s:
        record_inventory(s, "sim", [Instance(
            provider="sim", account="1", region="us-east-1", instance_id=iid, name=name,
            instance_type=itype, state=InstanceState.RUNNING, gpu_count=1,
            launch_time=NOW, observed_at=NOW, tags={"team": team})
            for iid, name, itype, team in [("i-0aaa", "trainer-7", "p4d.24xlarge", "research"),
                                           ("i-0bbb", "notebook", "g5.xlarge", "vision")]],
            NOW, complete=True)
        s.commit()
    db.dispose()
    with serve(console_settings(url)) as base:
        for q, want, not_want in [("TRAINER", "i-0aaa", "i-0bbb"), ("g5.x", "i-0bbb", "i-0aaa"),
                                  ("vision", "i-0bbb", "i-0aaa"), ("0aa", "i-0aaa", "i-0bbb")]:
            page = httpx.get(f"{base}/console/instances", params={"q": q}).text
            assert f">{want}</a>" in page and f">{not_want}</a>" not in page, q
        assert "No instance matches" in httpx.get(f"{base}/console/instances",
                                                  params={"q": "zzz"}).text
        assert 'id="search"' in httpx.get(f"{base}/console/").text  # on every page


def test_the_audit_page_narrows_to_a_policy_an_instance_or_a_kind(tmp_path: Path) -> None:
    from costguard.store.tables import ActionJournalRow

    url = _store(tmp_path)
    db = Database(url)
    with db.session() as s:
        for i, (policy, iid, action) in enumerate([("idle", "i-1", "stop"),
                                                   ("idle", "i-2", "notify"),
                                                   ("tags", "i-1", "tag")]):
            s.add(ActionJournalRow(key=f"k{i}", policy=policy, provider="sim",
                                   instance_id=iid, action=action, dry_run=False,
                                   status="done", detail=f"{action} {iid}", usd_per_hour=1.0,
                                   intent_at=NOW - timedelta(hours=1), result_at=NOW))
        s.commit()
    db.dispose()
    with serve(console_settings(url)) as base:
        def rows(**params: str) -> list[str]:
            page = httpx.get(f"{base}/console/audit", params={"window": "7d", **params}).text
            return sorted(set(re.findall(r"<td class=\"wrap\">(\w+ i-\d)</td>", page)))

        assert rows() == ["notify i-2", "stop i-1", "tag i-1"]
        assert rows(policy="idle") == ["notify i-2", "stop i-1"]
        assert rows(instance="i-1") == ["stop i-1", "tag i-1"]
        assert rows(kind="tag") == ["tag i-1"]
        assert rows(kind="nonsense") == ["notify i-2", "stop i-1", "tag i-1"]  # ignored
