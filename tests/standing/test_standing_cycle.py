"""The standing stage inside the engine's cycle, on the simulated cloud's volumes, snapshots
and address and the shipped `policies/storage.yml`: dry run records and deletes nothing;
enforced, the old volume is warned of, snapshotted (the delete waits for the snapshot) and
deleted with the snapshot named; limits refuse a batch whole; a crash between a delete's
intent and its answer is settled; a volume policy never selects an instance; the report's
"paid for, not running" section."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo.sim import SimProvider
from costguard.demo.sim_settings import SimSettings
from costguard.engine import Engine
from costguard.policy.load import load_policy_set, parse_policy_text
from costguard.report.run import render_report
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow, PolicyStateRow, StandingRow
from tests.standing.sim_engine import STEP, T0, enforced, run_for, sim_engine

ROOT = Path(__file__).resolve().parents[2]






def _journal(engine: Engine, action: str) -> list[ActionJournalRow]:
    with engine.db.session() as s:
        return list(s.exec(select(ActionJournalRow).where(
            ActionJournalRow.action == action).order_by(col(ActionJournalRow.id))))




SHIPPED = load_policy_set([ROOT / "policies" / "storage.yml"])


def test_dry_run_records_and_deletes_nothing(tmp_path: Path) -> None:
    engine, sim, clock = sim_engine(tmp_path, SHIPPED)
    run_for(engine, clock, 30)
    assert sim.standing.calls["delete"] == 2  # the dry runs' checks: volume and address, once
    assert sim.standing.calls["snapshot"] == 1
    (dry,) = [j for j in _journal(engine, "delete") if j.instance_id == "vol-sim-scratch-01"]
    assert (dry.status, dry.dry_run) == ("dry-run", True)
    assert "vol-sim-scratch-01" in {i.resource_id for i in sim.standing.listing(
        sim.standing_kinds()).items}
    with engine.db.session() as s:  # a dry run's warnings are journaled, never sent
        assert not list(s.exec(select(AlertRow).where(AlertRow.kind == "delete-warning")))


def test_enforced_the_volume_is_snapshotted_then_deleted(tmp_path: Path) -> None:
    engine, sim, clock = sim_engine(tmp_path, enforced(SHIPPED))
    run_for(engine, clock, 26)
    listed = {i.resource_id: i for i in sim.standing.listing(sim.standing_kinds()).items}
    assert "vol-sim-scratch-01" not in listed and "eipalloc-sim-01" not in listed
    assert "vol-sim-ckpt-02" in listed  # unused 12 days: younger than the policy's 30
    (snap,) = [i for i in listed.values() if i.tags.get("costguard:snapshot-of")]
    assert snap.state == "completed" and snap.tags["team"] == "research"
    snaps = [j for j in _journal(engine, "snapshot") if j.instance_id == "vol-sim-scratch-01"]
    assert [j.detail for j in snaps] == [f"snapshot {snap.resource_id} pending",
                                         f"snapshot {snap.resource_id} completed"]
    (delete,) = [j for j in _journal(engine, "delete") if j.instance_id == "vol-sim-scratch-01"]
    assert delete.status == "done" and f"snapshot {snap.resource_id} kept" in delete.detail
    assert delete.id is not None and all(j.id is not None and j.id < delete.id for j in snaps)
    with engine.db.session() as s:
        warned = s.exec(select(AlertRow).where(AlertRow.kind == "delete-warning",
                                               AlertRow.instance_id == "vol-sim-scratch-01"))
        (warning,) = list(warned)
        assert warning.recipients == ["email:ana@example.com", "team:research"]
        (done,) = list(s.exec(select(AlertRow).where(AlertRow.kind == "deleted",
                                                     AlertRow.instance_id == delete.instance_id)))
        assert snap.resource_id in done.body
        row = s.get(StandingRow, ("sim", "vol-sim-scratch-01"))
        assert row is not None and row.gone
    # the delete came a day (the grace) after the warning, never before
    assert delete.intent_at - warning.created_at >= timedelta(days=1)


def test_limits_refuse_the_batch_whole(tmp_path: Path) -> None:
    policies = parse_policy_text("""\
policies:
  - name: all-volumes
    resource: volume
    mode: enforce
    condition: {unused: {for: 1d}}
    actions: [notify, {delete: {grace: 1h}}]
    limits: {max_actions_per_cycle: 5, max_usd_per_month: 100}
""", "p.yml")
    engine, sim, clock = sim_engine(tmp_path, policies)
    run_for(engine, clock, 3)
    assert sim.standing.calls["delete"] == 0 and sim.standing.calls["snapshot"] == 0
    with engine.db.session() as s:
        (cap,) = list(s.exec(select(AlertRow).where(AlertRow.kind == "cap")))
    assert cap.severity == "critical" and "$120.00/month due, cap is $100.00" in cap.subject


def test_a_crash_between_intent_and_answer_is_settled(tmp_path: Path) -> None:
    engine, sim, clock = sim_engine(tmp_path, enforced(SHIPPED))
    real = sim.delete_standing

    def crash(item: object, *, dry_run: bool) -> object:
        real(item, dry_run=dry_run)  # type: ignore[arg-type]
        raise KeyboardInterrupt  # the process dies once the cloud has answered

    sim.delete_standing = crash  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        run_for(engine, clock, 30)
    (open_intent,) = [j for j in _journal(engine, "delete") if j.status == "intent"]
    sim.delete_standing = real  # type: ignore[method-assign]
    clock.advance(STEP)
    engine.run_cycle()
    settled = [j for j in _journal(engine, "delete") if j.id == open_intent.id]
    assert settled[0].status == "done" and "gone" in settled[0].detail
    again = [j for j in _journal(engine, "delete") if j.instance_id == open_intent.instance_id]
    assert len(again) == 1  # not deleted (nor tried) twice
    with engine.db.session() as s:  # the alert the crash kept from going out goes now
        (told,) = list(s.exec(select(AlertRow).where(
            AlertRow.kind == "deleted", AlertRow.instance_id == open_intent.instance_id)))
        state = s.get(PolicyStateRow, (open_intent.policy, "sim", open_intent.instance_id))
    assert "confirmed after a restart" in told.body and state is not None
    assert state.state == "acted"


def test_a_volume_policy_selects_no_instance(tmp_path: Path) -> None:
    engine, _, clock = sim_engine(tmp_path, enforced(SHIPPED))
    run_for(engine, clock, 1)
    with engine.db.session() as s:
        states = list(s.exec(select(PolicyStateRow)))
    assert states and all(not st.instance_id.startswith("i-") for st in states)


def test_the_report_shows_what_is_paid_for_and_not_running(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    engine, _, clock = sim_engine(tmp_path, SHIPPED)
    run_for(engine, clock, 1)
    out = tmp_path / "r.txt"
    render_report(engine.settings, ["team"], "1d", None, [], "table", out, now=clock.now())
    text = out.read_text(encoding="utf-8")
    assert "Paid for, not running" in text
    for cells in (["vision", "volume", "1,000", "$80.00"], ["research", "volume", "$40.00"],
                  ["vision", "address", "$3.65"], ["research", "snapshot", "$40.00"]):
        assert any(all(c in line for c in cells) for line in text.splitlines()), cells
    assert "platform" not in text  # the snapshot an image needs is in use
    page = tmp_path / "r.html"
    render_report(engine.settings, ["team"], "1d", None, [], "html", page, now=clock.now())
    html = page.read_text(encoding="utf-8")
    section = html[html.index('id="paid-not-running"'):]
    assert "$163.65 a month" in section
    assert ('<td class="key">vision</td><td class="key">volume</td><td>1</td><td>1,000</td>'
            '<td>$80.00</td>') in section
    render_report(engine.settings, ["team"], "1d", None, ["team=vision"], "json", None,
                  now=clock.now())
    doc = json.loads(capsys.readouterr().out)
    assert {(line["team"], line["kind"]) for line in doc["paid_not_running"]} == {
        ("vision", "volume"), ("vision", "address")}


def test_tag_steps_and_words_of_an_address(tmp_path: Path) -> None:
    """A storage policy's tag step sets its placeholders' values on the resource and is
    journaled; a dry run journals its notice as such; an address is 'released'."""
    text = """\
policies:
  - name: addresses
    resource: address
    mode: {mode}
    condition: {{unused: {{for: 7d}}}}
    actions:
      - notify: {{to: owner}}
      - tag: {{set: {{"costguard:found": "{{policy}} {{now}}"}}}}
      - delete: {{grace: 1h}}
"""
    for mode in ("dry-run", "enforce"):
        (tmp_path / mode).mkdir()
        engine, sim, clock = sim_engine(tmp_path / mode, parse_policy_text(
            text.format(mode=mode), "p.yml"))
        start = clock.now()
        run_for(engine, clock, 0.5)  # one cycle: warned and tagged, not yet due
        (item,) = [i for i in sim.standing.listing(sim.standing_kinds()).items
                   if i.resource_id == "eipalloc-sim-01"]
        assert item.tags.get("costguard:found") == (
            None if mode == "dry-run" else f"addresses {start.isoformat(timespec='seconds')}")
        run_for(engine, clock, 2)
        notes = [j for j in _journal(engine, "notify") if j.instance_id == "eipalloc-sim-01"]
        tags = [j for j in _journal(engine, "tag") if j.instance_id == "eipalloc-sim-01"]
        assert [j.status for j in notes] == ["dry-run" if mode == "dry-run" else "done"]
        assert [(j.policy, j.key.split("|")[3], j.status) for j in tags] == [
            ("addresses", "tag", "dry-run" if mode == "dry-run" else "done")]
        if mode == "dry-run":
            continue
        with engine.db.session() as s:
            (done,) = list(s.exec(select(AlertRow).where(AlertRow.kind == "deleted")))
        assert done.subject == ("address 203.0.113.10 (eipalloc-sim-01) was released by "
                                "costguard (addresses)")
        assert sim.standing.calls["tag"] == 1
        tagged = _journal(engine, "tag")[0]
        assert tagged.detail == "tagged" and tagged.intent_at == start


def test_snoozing_a_volume_holds_its_delete(tmp_path: Path) -> None:
    """`costguard snooze VOLUME`: the policies that select it wait (capped by max_snooze),
    the snooze is journaled and tagged on the volume, and the delete comes after it ends."""
    from costguard.actions.snooze import snooze

    engine, sim, clock = sim_engine(tmp_path, enforced(SHIPPED))
    run_for(engine, clock, 1)  # listed and warned of
    report = snooze(engine.db, {"sim": sim}, engine.policies.policies, "vol-sim-scratch-01",
                    timedelta(days=2), "restoring from it tomorrow", "ana", clock.now())
    assert [r.policy for r in report.results] == ["unattached-volumes"]
    assert report.tag.startswith("costguard:snooze-until=") and report.tag.endswith("(done)")
    until = report.results[0].until
    run_for(engine, clock, 40)  # past the day's grace, inside the snooze
    listed = {i.resource_id for i in sim.standing.listing(sim.standing_kinds()).items}
    assert "vol-sim-scratch-01" in listed
    (journaled,) = [j for j in _journal(engine, "snooze")
                    if j.instance_id == "vol-sim-scratch-01"]
    assert "by ana: restoring from it tomorrow" in journaled.detail
    run_for(engine, clock, 12)  # the snooze over: deleted (behind its snapshot)
    assert clock.now() > until
    listed = {i.resource_id for i in sim.standing.listing(sim.standing_kinds()).items}
    assert "vol-sim-scratch-01" not in listed


def test_deletes_take_from_the_fleet_wide_per_cycle_caps(tmp_path: Path) -> None:
    """safety.max_actions_per_cycle counts deletes as it counts stops: with one action a
    cycle, the volume and the address due together are deleted in turn, never at once."""
    clock = ManualClock(T0)
    sim = SimProvider(SimSettings(instances=2, launches_per_day=0, standing=True), clock)
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}",
                        safety={"max_actions_per_cycle": 1})
    engine = Engine(settings, Database(settings.database_url), {"sim": sim},
                    enforced(SHIPPED), clock)
    per_cycle: list[int] = []
    end = clock.now() + timedelta(hours=27)
    while clock.now() < end:
        before = len([j for j in _journal(engine, "delete") if j.status == "done"])
        engine.run_cycle()
        per_cycle.append(len([j for j in _journal(engine, "delete") if j.status == "done"])
                         - before)
        clock.advance(STEP)
    assert sum(per_cycle) == 2 and max(per_cycle) == 1
    with engine.db.session() as s:
        caps = list(s.exec(select(AlertRow).where(AlertRow.kind == "cap")))
    assert caps and "resources due, 0 left of the fleet-wide per-cycle cap" in caps[0].subject
