"""Stored efficiency verdicts (#19): judged when due (missing first, then the oldest, a
capped number per cycle), replaced, read back only while young enough to trust, and summed
per team in SQL for the underused-spend metric; on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import select

from costguard.model import GpuSignal, Instance, InstanceState, Lifecycle
from costguard.recommend import stored
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.tables import EfficiencyRow
from costguard.recommend.verdict import settings_key
from costguard.store.db import Database
from costguard.telemetry.efficiency import Bottleneck, Efficiency

NOW = datetime(2026, 11, 16, 12, tzinfo=UTC)
CFG = RecommendSettings()


def inst(iid: str, gpus: int = 8, itype: str = "p4d.24xlarge") -> Instance:
    return Instance(provider="aws", account="111122223333", region="us-east-1",
                    instance_id=iid, instance_type=itype, lifecycle=Lifecycle.ON_DEMAND,
                    state=InstanceState.RUNNING, launch_time=NOW - timedelta(days=9),
                    observed_at=NOW, gpu_count=gpus, gpu_model="A100" if gpus else None)


def efficiency(underused: bool = True) -> dict[str, Any]:
    e = Efficiency(bottleneck=Bottleneck.HEALTHY if underused else Bottleneck.SATURATED,
                   underused=underused, evidence=("1 of 8 GPUs used",),
                   window_start=NOW - timedelta(days=7), window_end=NOW, hours=168,
                   span_hours=168, coverage=1.0, signal=GpuSignal.SM_ACTIVE, gpus_paid=8,
                   gpus_used=1 if underused else 8)
    return e.model_dump(mode="json")


def row(iid: str, judged: datetime, *, team: str = "research", usd: float = 100.0,
        monthly: float = 0.0, underused: bool = True, cfg: RecommendSettings = CFG
        ) -> EfficiencyRow:
    return EfficiencyRow(provider="aws", instance_id=iid, settings_key=settings_key(cfg),
                         judged_at=judged, bottleneck="healthy", underused=underused,
                         team=team, spend_usd=usd, monthly_usd=monthly,
                         fit_to="g5.xlarge" if monthly > 0 else None,
                         efficiency=efficiency(underused))


def test_due_is_missing_first_then_oldest_capped_per_cycle(db: Database) -> None:
    fleet = [inst("i-a"), inst("i-b"), inst("i-c"), inst("i-d"), inst("i-cpu", gpus=0)]
    with db.session() as s:
        s.add_all([row("i-b", NOW - timedelta(days=2)), row("i-c", NOW - timedelta(hours=30)),
                   row("i-d", NOW - timedelta(hours=1))])
    with db.session() as s:
        capped = stored.due(s, fleet, NOW, CFG.model_copy(update={"judge_per_cycle": 2}))
        every = stored.due(s, fleet, NOW, CFG)
    assert [i.instance_id for i in capped] == ["i-a", "i-b"]
    assert [i.instance_id for i in every] == ["i-a", "i-b", "i-c"]  # i-d is an hour old


def test_due_stops_at_the_gpu_minutes_a_cycle_may_judge(db: Database) -> None:
    # 8-GPU hosts with a week behind them: 80,640 GPU-minutes each; one launched an hour
    # ago can have 480 at most; the first due one is judged whatever its size
    week = 8 * 7 * 24 * 60
    young = inst("i-new").model_copy(update={"launch_time": NOW - timedelta(hours=1)})
    fleet = [inst("i-a"), inst("i-b"), young, inst("i-c")]
    cfg = CFG.model_copy(update={"judge_gpu_minutes_per_cycle": week + 480})
    with db.session() as s:
        assert [i.instance_id for i in stored.due(s, fleet, NOW, cfg)] == ["i-a"]
        assert len(stored.due(s, fleet, NOW, CFG)) == 4  # the default: 2,000,000
        s.add_all([row("i-a", NOW), row("i-b", NOW)])
    with db.session() as s:
        assert [i.instance_id for i in stored.due(s, fleet, NOW, cfg)] == ["i-c", "i-new"]
        tiny = cfg.model_copy(update={"judge_gpu_minutes_per_cycle": 1})
        assert [i.instance_id for i in stored.due(s, fleet, NOW, tiny)] == ["i-c"]


def test_refresh_judges_stores_and_replaces_once_a_day(db: Database) -> None:
    fleet = [inst("i-a"), inst("i-b", gpus=4, itype="g5.12xlarge")]
    with db.session() as s:
        assert stored.refresh(s, fleet, NOW, lambda i: None, CFG) == 2
    with db.session() as s:
        assert stored.refresh(s, fleet, NOW + timedelta(hours=23), lambda i: None, CFG) == 0
        assert stored.refresh(s, fleet, NOW + timedelta(days=1), lambda i: None, CFG) == 2
        # other thresholds are kept apart, judged on their own
        other = CFG.model_copy(update={"gpu_low": 20.0})
        assert settings_key(other) != settings_key(CFG)
        assert stored.refresh(s, fleet, NOW + timedelta(days=1), lambda i: None, other) == 2
    with db.session() as s:
        rows = s.exec(select(EfficiencyRow)).all()
        assert len(rows) == 4  # one per instance and thresholds, replaced in place
        got = stored.load(s, CFG, NOW + timedelta(days=1))
    # no readings: insufficient data, never underused
    assert {v.efficiency.bottleneck for v in got.values()} == {Bottleneck.INSUFFICIENT_DATA}
    assert not any(v.efficiency.underused for v in got.values())
    assert {v.judged_at for v in got.values()} == {NOW + timedelta(days=1)}


def test_verdicts_older_than_two_refresh_periods_are_not_trusted(db: Database) -> None:
    with db.session() as s:
        s.add_all([row("i-young", NOW - timedelta(hours=47)),
                   row("i-old", NOW - timedelta(hours=48))])
    with db.session() as s:
        assert set(stored.load(s, CFG, NOW)) == {("aws", "i-young")}
        assert set(stored.underused_by_team(s, CFG, NOW)) == {"research"}
        assert stored.underused_by_team(s, CFG, NOW)["research"] == (100.0, 0.0, 1)


def _replace(db: Database, iid: str, new: EfficiencyRow | None) -> None:
    with db.session() as s:
        old = s.get(EfficiencyRow, ("aws", iid, settings_key(CFG)))
        if old is not None:
            s.delete(old)
    if new is not None:
        with db.session() as s:
            s.add(new)


def test_reload_builds_only_the_verdicts_judged_since_and_reads_as_load(db: Database) -> None:
    earlier = NOW - timedelta(hours=3)
    with db.session() as s:
        s.add_all([row("i-same", earlier), row("i-again", earlier), row("i-gone", earlier),
                   row("i-stale", NOW - timedelta(hours=40))])
    with db.session() as s:
        held = stored.load(s, CFG, NOW)
    assert len(held) == 4
    later = NOW + timedelta(minutes=5)
    _replace(db, "i-again", row("i-again", later, team="vision", monthly=50.0))
    _replace(db, "i-gone", None)  # its instance was terminated
    _replace(db, "i-new", row("i-new", later, underused=False))
    at = NOW + timedelta(hours=9)  # i-stale is past trust (48 h) by now
    with db.session() as s:
        again = stored.reload(s, CFG, at, held)
        whole = stored.load(s, CFG, at)
    assert again == whole
    assert set(again) == {("aws", "i-same"), ("aws", "i-again"), ("aws", "i-new")}
    assert again[("aws", "i-same")] is held[("aws", "i-same")]  # not built again
    assert again[("aws", "i-again")].team == "vision"
    assert again[("aws", "i-again")].fit_to == "g5.xlarge"
    assert not again[("aws", "i-new")].efficiency.underused


def test_reload_builds_a_verdict_judged_at_its_now_again(db: Database) -> None:
    # a cycle that judges an instance twice at one `now` (a retried cycle, a frozen clock):
    # its held verdict has the same judged time as the new row, and is not the new row
    _replace(db, "i-a", row("i-a", NOW))
    with db.session() as s:
        held = stored.load(s, CFG, NOW)
    _replace(db, "i-a", row("i-a", NOW, team="vision"))
    with db.session() as s:
        assert stored.reload(s, CFG, NOW, held)[("aws", "i-a")].team == "vision"


def test_a_verdict_no_cycle_renews_for_a_window_is_deleted(db: Database) -> None:
    with db.session() as s:
        s.add_all([row("i-gone", NOW - timedelta(days=8)), row("i-here", NOW - timedelta(days=6))])
    with db.session() as s:
        stored.refresh(s, [], NOW, lambda i: None, CFG)
    with db.session() as s:
        assert [r.instance_id for r in s.exec(select(EfficiencyRow))] == ["i-here"]


def test_underused_spend_and_savings_per_team_are_summed_in_sql(db: Database) -> None:
    judged = NOW - timedelta(hours=2)
    with db.session() as s:
        s.add_all([
            row("i-1", judged, team="research", usd=1053.97, monthly=15294.70),
            row("i-2", judged, team="research", usd=200.5, monthly=-120.0),  # costs more: 0
            row("i-3", judged, team="research", usd=999.0, underused=False),  # not counted
            row("i-4", judged, team="vision", usd=272.26, monthly=1150.48),
            row("i-5", judged, team="vision", usd=50.0, monthly=10.0,
                cfg=CFG.model_copy(update={"window": timedelta(days=3)})),  # other key
        ])
    with db.session() as s:
        got = stored.underused_by_team(s, CFG, NOW)
    assert got == {"research": (1254.47, 15294.70, 2), "vision": (272.26, 1150.48, 1)}


def test_refresh_reads_the_spend_of_the_due_instances_only(db: Database, monkeypatch: Any
                                                          ) -> None:
    """A cycle judges at most `judge_per_cycle` instances: it asks the spend of those, not
    of the whole fleet's week (the fleet-wide read grew with the fleet and its history);
    past what one bound list holds, the whole fleet's, as before."""
    asked: list[object] = []
    real = stored.spend_by_instance

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("instance_ids"))
        return real(*args, **kwargs)

    monkeypatch.setattr(stored, "spend_by_instance", spy)
    fleet = [inst("i-a"), inst("i-b"), inst("i-c")]
    with db.session() as s:
        stored.refresh(s, fleet, NOW, lambda i: None,
                       CFG.model_copy(update={"judge_per_cycle": 2}))
    monkeypatch.setattr(stored, "_SPEND_BY_ID_MAX", 1)
    with db.session() as s:
        stored.refresh(s, fleet, NOW, lambda i: None,
                       CFG.model_copy(update={"judge_per_cycle": 2, "gpu_low": 30.0}))
    assert asked == [["i-a", "i-b"], None]
