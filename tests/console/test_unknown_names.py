"""A name nothing was recorded for says so: `/console/teams/nosuch` is a 404 naming the
teams there are (it was a 200 with an empty chart), and `report --filter team=nosuch`
says no spend was ever recorded for it (it said "run costguard run first")."""

from __future__ import annotations

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
