"""The weekly underused-GPU digest (#19): one message per team and week, at the configured
hour and only within the day after it, addressed to the team (or `unattributed`), the
largest savings first; never twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlmodel import select

from costguard.model import Instance, InstanceState, Lifecycle
from costguard.recommend.digest import digest_slot, enqueue_digests
from costguard.recommend.settings import WeeklyDigest
from costguard.recommend.verdict import StoredVerdict
from costguard.store.db import Database
from costguard.store.tables import AlertRow
from costguard.telemetry.efficiency import Bottleneck, Efficiency

MONDAY_9 = datetime(2026, 11, 16, 9, tzinfo=UTC)  # a Monday
CFG = WeeklyDigest()


@pytest.mark.parametrize(("now", "slot"), [
    (MONDAY_9 - timedelta(minutes=1), None),  # last Monday's is more than a day ago
    (MONDAY_9, MONDAY_9),
    (MONDAY_9 + timedelta(hours=23, minutes=59), MONDAY_9),
    (MONDAY_9 + timedelta(days=1), None),
    (MONDAY_9 + timedelta(days=3), None),  # a daemon started on Thursday sends nothing
])
def test_the_digest_is_due_in_the_day_after_its_hour(now: datetime,
                                                       slot: datetime | None) -> None:
    assert digest_slot(CFG, now) == slot


def test_another_weekday_and_hour() -> None:
    friday = WeeklyDigest(weekday="friday", hour_utc=17)
    assert digest_slot(friday, datetime(2026, 11, 20, 17, 30, tzinfo=UTC)) == datetime(
        2026, 11, 20, 17, tzinfo=UTC)
    assert digest_slot(friday, datetime(2026, 11, 21, 16, 59, tzinfo=UTC)) == datetime(
        2026, 11, 20, 17, tzinfo=UTC)
    assert digest_slot(friday, datetime(2026, 11, 20, 16, 59, tzinfo=UTC)) is None


def instance(iid: str, name: str) -> Instance:
    return Instance(provider="aws", account="1", region="us-east-1", instance_id=iid,
                    name=name, instance_type="g5.12xlarge", lifecycle=Lifecycle.ON_DEMAND,
                    state=InstanceState.RUNNING, launch_time=MONDAY_9, observed_at=MONDAY_9,
                    gpu_count=4, gpu_model="A10G")


def verdict(team: str, usd: float, monthly: float, *, underused: bool = True,
            fit: str | None = "g5.xlarge") -> StoredVerdict:
    e = Efficiency(bottleneck=Bottleneck.LATENCY_BOUND if underused else Bottleneck.HEALTHY,
                   underused=underused, evidence=("1 of 4 GPUs used (GPU 0) over 168.0 h",),
                   window_start=MONDAY_9 - timedelta(days=7), window_end=MONDAY_9,
                   hours=168, span_hours=168, coverage=1.0, gpus_paid=4, gpus_used=1)
    return StoredVerdict(e, MONDAY_9, team, usd, fit if monthly > 0 else None, monthly,
                         "" if monthly > 0 else "no cheaper type holds it")


def test_one_digest_per_team_and_week_to_the_team(db: Database) -> None:
    verdicts = {
        ("aws", "i-1"): verdict("research", 800.0, 3406.18),
        ("aws", "i-2"): verdict("research", 1053.97, 15294.70),
        ("aws", "i-3"): verdict("vision", 500.0, 0.0, underused=False),
        ("aws", "i-4"): verdict("unattributed", 71.24, 0.0),
        ("aws", "i-5"): verdict("nlp", 9.5, 0.0),
    }
    names = [instance("i-1", "recsys-small"), instance("i-2", "p4d-one-of-eight")]
    cfg = WeeklyDigest(min_usd=10)
    with db.session() as s:
        assert enqueue_digests(s, verdicts, names, cfg, MONDAY_9 + timedelta(minutes=5)) == 2
    with db.session() as s:  # the next cycle, a restart, another replica: nothing new
        assert enqueue_digests(s, verdicts, names, cfg, MONDAY_9 + timedelta(hours=2)) == 0
        rows = {r.team: r for r in s.exec(select(AlertRow))}
    assert set(rows) == {"research", None}  # vision not underused, nlp under min_usd
    research = rows["research"]
    assert research.recipients == ["team:research"] and research.kind == "underused"
    assert research.subject == ("Underused GPUs, team research: $1,854 in 7 days on 2 "
                                "instances; cheaper fits save $18,701/month")
    lines = research.body.splitlines()
    assert lines[1].startswith("- p4d-one-of-eight: latency-bound: 1 of 4 GPUs used")
    assert lines[1].endswith("g5.xlarge fits, saving $15,295/month")
    assert lines[2].startswith("- recsys-small: ")
    assert lines[-1] == "See: costguard recommend --filter team=research"
    assert research.context["underused_usd"] == 1853.97
    nobody = rows[None]
    assert nobody.recipients == ["unattributed"]
    assert nobody.subject == "Underused GPUs, no team: $71 in 7 days on 1 instance"
    assert "- i-4: latency-bound" in nobody.body  # no name: the id


def test_a_disabled_digest_or_the_wrong_hour_sends_nothing(db: Database) -> None:
    verdicts = {("aws", "i-1"): verdict("research", 800.0, 3406.18)}
    with db.session() as s:
        assert enqueue_digests(s, verdicts, [], WeeklyDigest(enabled=False), MONDAY_9) == 0
        assert enqueue_digests(s, verdicts, [], CFG, MONDAY_9 + timedelta(days=2)) == 0
        assert s.exec(select(AlertRow)).all() == []
