"""Dev GPU boxes stopped at night and over the weekend, started in the morning, across DST."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from costguard.clock import ManualClock
from tests.fakes.cloud import BUSY, OWNER_TAGS, full_cloud
from tests.fakes.scenario import journal, make_engine, run_for

OFFICE = """\
policies:
  - name: dev-office-hours
    mode: enforce
    filters: {gpu: true, state: running, tags: {values: {env: [dev]}}}
    condition:
      outside_hours: {timezone: America/New_York, hours: "08:00-19:00", days: mon-fri}
    actions:
      - notify: {to: owner}
      - stop: {grace: 15m}
      - start: {at_office_hours: true}
"""


def test_dev_box_stops_friday_night_and_starts_monday_at_eight_local_after_dst_ends(
        tmp_path: Path) -> None:
    # Friday 2026-10-30 18:00 EDT (UTC-4); US daylight saving ends Sunday 2026-11-01
    clock = ManualClock(datetime(2026, 10, 30, 22, 0, tzinfo=UTC))
    cloud, day_old = full_cloud(clock), clock.now() - timedelta(days=1)
    cloud.add("i-dev", BUSY, tags={**OWNER_TAGS, "env": "dev"}, launched=day_old)
    cloud.add("i-prod", BUSY, tags={**OWNER_TAGS, "env": "prod"}, launched=day_old)
    engine = make_engine(f"sqlite:///{tmp_path / 'cg.db'}", OFFICE, cloud)
    run_for(engine, clock, timedelta(hours=1, minutes=30), step=timedelta(minutes=15))
    assert cloud.instances["i-dev"].state == "stopped"  # 19:15 EDT
    stop = next(j for j in journal(engine.db, "i-dev") if j.action == "stop")
    assert stop.intent_at == datetime(2026, 10, 30, 23, 15, tzinfo=UTC)
    # through the weekend: stays stopped (costguard never starts it on Saturday or Sunday)
    clock.set(datetime(2026, 11, 2, 11, 0, tzinfo=UTC))  # Monday 06:00 EST
    run_for(engine, clock, timedelta(hours=1, minutes=45), step=timedelta(minutes=15))
    # 12:00 UTC was 08:00 before the change; now it is 07:00 EST: still closed
    assert cloud.instances["i-dev"].state == "stopped"
    run_for(engine, clock, timedelta(minutes=30), step=timedelta(minutes=15))
    assert cloud.instances["i-dev"].state == "running"
    start = next(j for j in journal(engine.db, "i-dev") if j.action == "start")
    assert (start.status, start.intent_at) == ("done", datetime(2026, 11, 2, 13, 0, tzinfo=UTC))
    # Monday 19:00 EST = Tuesday 00:00 UTC: stopped again, in a new episode
    clock.set(datetime(2026, 11, 2, 23, 45, tzinfo=UTC))
    run_for(engine, clock, timedelta(minutes=45), step=timedelta(minutes=15))
    assert cloud.instances["i-dev"].state == "stopped"
    assert [j.action for j in journal(engine.db, "i-dev") if j.status == "done"].count(
        "stop") == 2
    assert cloud.instances["i-prod"].state == "running"
    assert not journal(engine.db, "i-prod")
