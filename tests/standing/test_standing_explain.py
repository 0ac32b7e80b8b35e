"""`costguard explain` of a volume, snapshot, address or reservation: what the last listing
saw, each policy of its kind (selected or not, why its condition holds or not, the episode),
and the journal; through the CLI, in text and JSON, and the error for an id nothing has."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costguard.cli import app
from costguard.policy.load import load_policy_set
from costguard.standing.explain import explain
from tests.standing.sim_engine import enforced, run_for, sim_engine

ROOT = Path(__file__).resolve().parents[2]
POLICIES = enforced(load_policy_set([ROOT / "policies" / "storage.yml",
                                     ROOT / "policies" / "reservations.yml"]))


def test_each_kind_is_explained_from_the_store(tmp_path: Path) -> None:
    engine, _, clock = sim_engine(tmp_path, POLICIES)
    run_for(engine, clock, 26)
    now = clock.now()
    with engine.db.session() as s:
        deleted = explain(s, "vol-sim-scratch-01", POLICIES, now)
        young = explain(s, "ckpt-archive", POLICIES, now)  # by name
        imaged = explain(s, "snap-sim-ami-02", POLICIES, now)
        reserved = explain(s, "cr-sim-p4d-01", POLICIES, now)
        assert explain(s, "vol-nothing", POLICIES, now) is None
    assert deleted is not None and deleted.gone
    text = "\n".join(deleted.lines())
    assert "Gone since" in text and "unattached-volumes (enforce): its condition holds " \
        "(attached to nothing for 36d): this episode ended (acted)" in text
    assert "stopped-instance-disks (enforce): its filters do not select it" in text
    assert [j["action"] for j in deleted.journal][:2] == ["delete", "snapshot"]
    assert "snapshot snap-sim-cg-01 kept" in deleted.journal[0]["detail"]
    assert young is not None and young.item.resource_id == "vol-sim-ckpt-02"
    (unattached,) = [p for p in young.policies if p.policy == "unattached-volumes"]
    assert unattached.selected and not unattached.holds
    assert unattached.outcome == ("its condition does not hold: unused for 13d, fewer "
                                  "than 30d")
    assert imaged is not None and imaged.policies[0].outcome == \
        "its condition does not hold: in use"
    assert "Use: in use by image ami-sim-base." in imaged.lines()
    assert reserved is not None and [p.policy for p in reserved.policies] == [
        "unused-reservations"]
    assert reserved.policies[0].outcome == ("its condition does not hold: unused for 1d, "
                                            "fewer than 2d")
    assert "Use: 2 of 4 p4d.24xlarge running in it; unused since" in "\n".join(
        reserved.lines())


def test_the_cli_explains_a_volume_and_names_what_it_takes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, _, clock = sim_engine(tmp_path, POLICIES)
    run_for(engine, clock, 2)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COSTGUARD_DATABASE_URL", engine.settings.database_url)
    monkeypatch.setenv("COSTGUARD_NOW", (clock.now() + timedelta(minutes=1)).isoformat())
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("storage.yml", "reservations.yml"):
        (policies / name).write_text((ROOT / "policies" / name).read_text())
    runner = CliRunner()
    out = runner.invoke(app, ["explain", "vol-sim-scratch-01", "--format", "json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["resource"]["kind"] == "volume" and doc["resource"]["team"] == "research"
    assert doc["usd_per_month"] == 40.0 and doc["unused_since"]
    (policy,) = [p for p in doc["policies"] if p["policy"] == "unattached-volumes"]
    assert policy["mode"] == "dry-run" and policy["condition_holds"]
    missing = runner.invoke(app, ["explain", "vol-nothing"])
    assert missing.exit_code != 0
    assert "or a volume, snapshot, address or reservation id" in missing.output


def test_snooze_takes_a_resource_by_its_name_when_one_has_it(tmp_path: Path) -> None:
    from costguard.actions.snooze import UnknownInstance, snooze
    from costguard.store.tables import StandingRow

    engine, sim, clock = sim_engine(tmp_path, POLICIES)
    run_for(engine, clock, 1)
    report = snooze(engine.db, {"sim": sim}, engine.policies.policies, "llm-scratch",
                    timedelta(days=1), "still reading it", "ana", clock.now())
    assert [r.policy for r in report.results] == ["unattached-volumes"]
    assert report.results[0].until is not None
    with engine.db.session() as s:  # another resource under the same name: ambiguous
        twin = s.get(StandingRow, ("sim", "vol-sim-ckpt-02"))
        assert twin is not None
        twin.name = "llm-scratch"
        s.add(twin)
    with pytest.raises(UnknownInstance, match="2 resources are named 'llm-scratch'"):
        snooze(engine.db, {"sim": sim}, engine.policies.policies, "llm-scratch",
               timedelta(days=1), "?", "ana", clock.now())
