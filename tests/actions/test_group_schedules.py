"""scale_to_zero: whole Auto Scaling groups parked outside office hours and restored to their
previous sizes when office hours begin, across daemon restarts and crashes, with the sizes
kept in the journal. Runs the real Engine over the simulated cloud, whose Auto Scaling
group launches and terminates members to match its desired capacity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlmodel import col, select

from costguard.clock import ManualClock
from costguard.config import Settings
from costguard.demo.sim import SimProvider
from costguard.demo.sim_settings import SimSettings
from costguard.engine import Engine
from costguard.model import InstanceState
from costguard.policy.load import parse_policy_text
from costguard.store.db import Database
from costguard.store.tables import ActionJournalRow, AlertRow

MONDAY_EVENING = datetime(2026, 11, 23, 19, 30, tzinfo=UTC)
POLICY = """\
policies:
  - name: park-at-night
    mode: {mode}
    filters: {{gpu: true, state: running, managed: true}}
    condition:
      outside_hours: {{timezone: UTC, hours: "08:00-19:00"}}
    actions:
      - notify: {{to: owner}}
      - scale_to_zero: {{restore_at_office_hours: true}}
"""


class Crash(BaseException):
    """The process dying: nothing catches it."""


def _engine(db_url: str, cloud: SimProvider, clock: ManualClock, mode: str = "enforce",
            fault: object = None) -> Engine:
    return Engine(Settings(), Database(db_url), {"sim": cloud},
                  parse_policy_text(POLICY.format(mode=mode)), clock,
                  alert_printer=lambda kind, subject, body: None, fault=fault)  # type: ignore[arg-type]


def _cloud(clock: ManualClock) -> SimProvider:
    return SimProvider(SimSettings(instances=1, launches_per_day=0, managed_groups=True),
                       clock)


def _asg(cloud: SimProvider) -> tuple[int, int, int, int]:
    group = next(g for g in cloud.groups.values() if g.owner.kind == "asg")
    running = sum(1 for iid in group.members
                  if cloud._hosts[iid].instance.state is InstanceState.RUNNING)
    return group.min_size, group.desired, group.max_size, running


def _journal(engine: Engine, action: str) -> list[ActionJournalRow]:
    with engine.db.session() as s:
        return list(s.exec(select(ActionJournalRow).where(ActionJournalRow.action == action)
                           .order_by(col(ActionJournalRow.id))))


def _cycles(engine: Engine, clock: ManualClock, hours: float) -> None:
    end = clock.now() + timedelta(hours=hours)
    while clock.now() < end:
        engine.run_cycle()
        clock.advance(timedelta(minutes=30))


def test_a_group_is_parked_at_night_and_restored_in_the_morning_after_a_restart(
        tmp_path: Path) -> None:
    clock = ManualClock(MONDAY_EVENING)
    cloud = _cloud(clock)
    url = f"sqlite:///{tmp_path / 'cg.db'}"
    assert _asg(cloud) == (1, 4, 8, 4)
    evening = _engine(url, cloud, clock)
    _cycles(evening, clock, 4)  # 19:30 .. 23:00
    assert _asg(cloud) == (0, 0, 8, 0)
    [park] = _journal(evening, "park")  # parked once, not every cycle
    assert park.status == "done" and '"desired": 4' in park.detail
    group = next(g for g in cloud.groups.values() if g.owner.kind == "asg")
    assert group.owner.tags["costguard:parked-sizes"] == "1/4/8"  # the hint on the group
    evening.db.dispose()

    clock.advance(timedelta(hours=8, minutes=30))  # 08:00 Tuesday; a new daemon process
    morning = _engine(url, cloud, clock)
    _cycles(morning, clock, 1)
    assert _asg(cloud)[:3] == (1, 4, 8)
    morning.run_cycle()
    assert _asg(cloud) == (1, 4, 8, 4)  # the group launched its members again
    [restore] = _journal(morning, "restore")
    assert restore.status == "done" and "costguard:parked-sizes" not in group.owner.tags
    with morning.db.session() as s:
        subjects = [a.subject for a in s.exec(select(AlertRow).where(AlertRow.kind == "action"))]
    assert any("scaled to zero outside office hours" in t for t in subjects)
    assert any("restored for office hours" in t for t in subjects)


def test_kubernetes_nodes_under_the_same_policy_are_only_reported(tmp_path: Path) -> None:
    clock = ManualClock(MONDAY_EVENING)
    cloud = _cloud(clock)
    engine = _engine(f"sqlite:///{tmp_path / 'cg.db'}", cloud, clock)
    _cycles(engine, clock, 2)
    pool = next(g for g in cloud.groups.values() if g.owner.kind == "gke")
    assert pool.desired == 2 and cloud.calls.get("stop", 0) == 0
    skips = [j for j in _journal(engine, "skip") if "|managed|" in j.key]
    assert {j.instance_id for j in skips} == set(pool.members)
    assert all("gke gpu-pool" in j.detail for j in skips)


def test_a_dry_run_policy_parks_nothing(tmp_path: Path) -> None:
    clock = ManualClock(MONDAY_EVENING)
    cloud = _cloud(clock)
    engine = _engine(f"sqlite:///{tmp_path / 'cg.db'}", cloud, clock, mode="dry-run")
    _cycles(engine, clock, 2)
    assert _asg(cloud) == (1, 4, 8, 4)
    assert {j.status for j in _journal(engine, "park")} == {"dry-run"}


@pytest.mark.parametrize("point", ["after-intent", "after-call"])
def test_a_crash_while_parking_neither_parks_twice_nor_forgets_to_restore(
        tmp_path: Path, point: str) -> None:
    clock = ManualClock(MONDAY_EVENING)
    cloud = _cloud(clock)
    url = f"sqlite:///{tmp_path / 'cg.db'}"

    def crash(at: str) -> None:
        if at == point:
            raise Crash(at)

    with pytest.raises(Crash):
        _engine(url, cloud, clock, fault=crash).run_cycle()
    parked_by_the_crashed_call = _asg(cloud)[1] == 0
    assert parked_by_the_crashed_call is (point == "after-call")
    clock.advance(timedelta(minutes=30))
    restarted = _engine(url, cloud, clock)
    _cycles(restarted, clock, 3)
    parks = _journal(restarted, "park")
    assert parks[0].status == "interrupted"
    assert '"desired": 4' in parks[0].detail  # the sizes survived the reconciliation
    # a park that reached the cloud is never sent again; one that did not is sent once more
    assert [p.status for p in parks[1:]] == ([] if point == "after-call" else ["done"])
    assert cloud.calls["resize_group"] == 1 and _asg(cloud) == (0, 0, 8, 0)
    clock.advance(timedelta(hours=10))  # Tuesday morning
    _cycles(restarted, clock, 1)
    assert _asg(cloud)[:3] == (1, 4, 8)
