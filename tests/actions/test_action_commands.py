"""`costguard snooze`, `costguard audit` and `costguard simulate` through Typer's CliRunner."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from costguard.actions.commands import audit_command, simulate_command, snooze_command
from costguard.clock import ManualClock
from costguard.store.db import Database
from costguard.store.tables import PolicyStateRow
from tests.fakes.cloud import BUSY, full_cloud
from tests.fakes.scenario import idle_stop_policy, journal, make_engine, run_for

POLICY = idle_stop_policy(max_snooze="1d")

app = typer.Typer()
app.command("snooze")(snooze_command)
app.command("audit")(audit_command)
app.command("simulate")(simulate_command)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """A store written by a few real cycles, and a config pointing the commands at it."""
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "idle.yml").write_text(POLICY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", url)
    monkeypatch.setenv("COSTGUARD_POLICY_PATHS", json.dumps([str(policies)]))
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    cloud, day_old = full_cloud(ManualClock(start)), start - timedelta(days=1)
    cloud.add("i-idle", launched=day_old)
    cloud.add("i-busy", BUSY, launched=day_old)
    cloud.add("i-spot", BUSY, lifecycle="spot", launched=day_old)  # type: ignore[arg-type]
    cloud.set("i-spot", state="stopped", state_reason="Server.SpotInstanceTermination")
    engine = make_engine(url, POLICY, cloud)
    run_for(engine, cloud.clock, timedelta(minutes=30))
    engine.db.dispose()
    return url, policies / "idle.yml"


def test_snooze_writes_every_policy_state_and_journals_who_and_why(
        store: tuple[str, Path]) -> None:
    url, _ = store
    result = CliRunner().invoke(app, ["snooze", "i-busy", "--for", "3d", "--reason",
                                      "eval this week", "--by", "ana", "--no-tag"])
    assert result.exit_code == 0, result.output
    assert "cut to the policy's max_snooze" in result.output  # 3d asked, 1d allowed
    db = Database(url)
    with db.session() as s:
        st = s.get(PolicyStateRow, ("idle", "sim", "i-busy"))
    assert st is not None and st.snooze_until is not None
    assert timedelta(hours=23) < st.snooze_until - datetime.now(UTC) <= timedelta(days=1)
    (entry,) = [j for j in journal(db, "i-busy") if j.action == "snooze"]
    assert "by ana: eval this week" in entry.detail and entry.status == "done"


def test_snooze_of_an_unknown_instance_or_without_reason_is_a_clear_error(
        store: tuple[str, Path]) -> None:
    unknown = CliRunner().invoke(app, ["snooze", "i-nope", "--reason", "x", "--no-tag"])
    said = " ".join(unknown.output.split())
    assert unknown.exit_code == 2
    assert "no instance, volume, snapshot, address or reservation 'i-nope'" in said
    assert "Traceback" not in unknown.output
    bad = CliRunner().invoke(app, ["snooze", "i-busy", "--for", "4 hours", "--reason", "x"])
    assert bad.exit_code == 2 and "invalid duration" in bad.output
    silent = CliRunner().invoke(app, ["snooze", "i-busy"])
    assert silent.exit_code == 2 and "--reason" in silent.output


def test_audit_lists_findings_warnings_and_stops_for_one_instance_as_json(
        store: tuple[str, Path]) -> None:
    result = CliRunner().invoke(app, ["audit", "--since", "1d", "--instance", "i-idle",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    events = json.loads(result.output)
    kinds = [(e["kind"], e["status"]) for e in events]
    assert kinds[:2] == [("finding", "found"), ("notify", "done")]
    assert ("stop", "done") in kinds
    assert all(e["instance_id"] == "i-idle" for e in events)
    assert "SM activity" in events[0]["evidence"]
    table = CliRunner().invoke(app, ["audit", "--since", "1d", "--kind", "stop"])
    assert table.exit_code == 0 and "i-idle" in table.output and "i-busy" not in table.output


def test_audit_interruptions_counts_spot_reclaims_per_type_and_zone(
        store: tuple[str, Path]) -> None:
    result = CliRunner().invoke(app, ["audit", "--since", "1d", "--interruptions",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {"instance_type": "g5.xlarge", "zone": "us-east-1a", "count": 1}]


def test_simulate_reports_what_the_policy_would_have_done(store: tuple[str, Path]) -> None:
    _, policy = store
    result = CliRunner().invoke(app, ["simulate", "--policy", str(policy), "--since", "3h",
                                      "--step", "5m", "--format", "json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.output)
    stopped = {a["instance_id"] for a in report["actions"] if a["action"] == "stop"}
    assert "i-busy" not in stopped
    assert report["warnings"] >= 1  # i-idle was idle from the start of history
    missing = CliRunner().invoke(app, ["simulate", "--policy", str(policy), "--name", "nope"])
    assert missing.exit_code == 2 and "no policy named 'nope'" in missing.output


def test_the_snooze_tag_holds_the_capped_end_the_policies_keep(tmp_path: Path) -> None:
    """`--for 3d` under a 1-day max_snooze: the tag says one day, as the policy state does
    (it used to say three, which every later re-read of the tag then cut again)."""
    from costguard.actions.safety import SNOOZE_TAG
    from costguard.actions.snooze import snooze
    from costguard.policy.load import parse_policy_text

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    cloud = full_cloud(ManualClock(now - timedelta(hours=1)))
    cloud.add("i-busy", BUSY, launched=now - timedelta(days=1))
    engine = make_engine(f"sqlite:///{tmp_path / 'cg.db'}", POLICY, cloud)
    run_for(engine, cloud.clock, timedelta(minutes=30))
    policies = parse_policy_text(POLICY).policies
    report = snooze(engine.db, {"sim": cloud}, policies, "i-busy", timedelta(days=3), "eval",
                    "ana", now)
    assert report.results and report.results[0].cut
    assert cloud.instances["i-busy"].tags[SNOOZE_TAG] == \
        (now + timedelta(days=1)).isoformat(timespec="seconds")
