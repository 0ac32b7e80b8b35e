"""A first cycle reads the idle window's history only where a recent minute does not decide."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlmodel import select

from costguard.clock import ManualClock
from costguard.engine.backfill import by_instance, decided, peak_of, rules_out_idle
from costguard.minute_rows import MinuteRows
from costguard.model import GpuMinute, Instance, TelemetrySource
from costguard.policy.conditions import IdleCondition
from costguard.store.db import Database
from costguard.store.readings import read_minutes
from costguard.store.tables import PolicyStateRow
from tests.engine.conftest import EngineFactory, record_metric_calls
from tests.fakes.cloud import T0, ScriptedCloud, always, until


def _no_model(self: MinuteRows, row: tuple[object, ...]) -> GpuMinute:
    raise AssertionError("a model built of a cloud's row")


@pytest.mark.parametrize("as_rows", [False, True])
def test_first_cycle_reads_history_only_for_gpus_that_could_be_idle(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database,
    as_rows: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = clock.now()
    cloud.add("i-idle", always("no_process"))  # idle for hours: warned
    cloud.add("i-busy", always("busy"))
    cloud.add("i-woke", until(now - timedelta(minutes=10), "no_process", "busy"))
    cloud.add("i-dozed", until(now - timedelta(minutes=30), "busy", "no_process"))
    cloud.add("i-tiny", always("tiny_kernels"))  # util_gpu ~12 %, SMs idle: SM decides
    if as_rows:  # answered as a cloud's rows (`MinuteRows`), as the simulated cloud does
        models = cloud.gpu_metrics

        def rows(instances: list[Instance], start: datetime, end: datetime) -> MinuteRows:
            return MinuteRows.of(models(instances, start, end))
        cloud.gpu_metrics = rows  # type: ignore[method-assign,assignment]
        # nothing on the way to the store, the window and the split read's decision builds
        # a model of a row (~2 KB each: a simulated fleet's first cycle doubled its peak)
        monkeypatch.setattr(MinuteRows, "minute", _no_model)
    calls = record_metric_calls(cloud)

    make_engine().run_cycle()  # the policy: idle below 5 % for 45 minutes, signal auto

    recent, older = calls
    assert recent == (["i-busy", "i-dozed", "i-idle", "i-tiny", "i-woke"],
                      now - timedelta(minutes=15), now)
    # busy (and just woken) GPUs are decided by their last quarter hour; the rest are read
    assert older == (["i-dozed", "i-idle", "i-tiny"], now - timedelta(hours=1),
                     now - timedelta(minutes=15))
    with db.session() as s:
        warned = sorted(st.instance_id for st in s.exec(select(PolicyStateRow))
                        if st.state == "warned")
    # idle 30 of 45 minutes is not idle; tiny kernels leave the SMs idle: idle by SM activity
    assert warned == ["i-idle", "i-tiny"]


@pytest.mark.parametrize("settle", [timedelta(0), timedelta(minutes=20)])
def test_a_provider_reading_the_window_once_is_asked_once_and_keeps_the_same_minutes(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock, db: Database,
    settle: timedelta,
) -> None:
    # Cloud Monitoring reads a project's every series whatever is asked, CloudWatch bills
    # each metric every time it is asked: a second call for the older minutes costs again.
    # One call; the older minutes of the GPUs their last quarter hour decides are not
    # stored, as if never asked for; those inside the settling span (asked again next
    # cycle) are kept.
    now = clock.now()

    def gpu_metrics_split(instances: list[Instance], start: datetime, end: datetime,
                          mid: datetime, decided: Callable[[list[GpuMinute]], set[str]]
                          ) -> list[GpuMinute]:
        # a provider reading the window once, as GcpProvider and AwsProvider do: the older
        # minutes of what `decided` names left out, those it reads again next cycle kept
        minutes = cloud.gpu_metrics(instances, start, end)
        keep_from = min(mid, end - settle)
        skip = decided([m for m in minutes if m.minute >= keep_from])
        return [m for m in minutes if m.minute >= keep_from or m.instance_id not in skip]

    cloud.gpu_metrics_split = gpu_metrics_split  # type: ignore[attr-defined]
    cloud.add("i-idle", always("no_process"))
    cloud.add("i-busy", always("busy"))
    cloud.add("i-woke", until(now - timedelta(minutes=10), "no_process", "busy"))
    cloud.add("i-dozed", until(now - timedelta(minutes=30), "busy", "no_process"))
    cloud.add("i-tiny", always("tiny_kernels"))
    calls = record_metric_calls(cloud)

    make_engine().run_cycle()

    assert calls == [(["i-busy", "i-dozed", "i-idle", "i-tiny", "i-woke"],
                      now - timedelta(hours=1), now)]
    refs = [("sim", i) for i in ("i-busy", "i-dozed", "i-idle", "i-tiny", "i-woke")]
    with db.session() as s:
        stored = read_minutes(s, refs, now - timedelta(hours=2), now)
    first = {ref[1]: min(m.minute for m in minutes) for ref, minutes in stored.items()}
    kept_from = min(now - timedelta(minutes=15), now - settle)
    assert first == {"i-busy": kept_from, "i-woke": kept_from,
                     "i-dozed": now - timedelta(hours=1), "i-idle": now - timedelta(hours=1),
                     "i-tiny": now - timedelta(hours=1)}
    assert len(stored[("sim", "i-idle")]) == 60
    with db.session() as s:
        warned = sorted(st.instance_id for st in s.exec(select(PolicyStateRow))
                        if st.state == "warned")
    assert warned == ["i-idle", "i-tiny"]  # as when asked twice


def test_later_cycles_read_every_gpu_from_the_watermark(
    make_engine: EngineFactory, cloud: ScriptedCloud, clock: ManualClock
) -> None:
    cloud.add("i-busy", always("busy"))
    engine = make_engine()
    engine.run_cycle()
    calls = record_metric_calls(cloud)
    clock.advance(timedelta(minutes=5))
    engine.run_cycle()
    assert [c[0] for c in calls] == [["i-busy"]]  # one read, from where the last one ended


def _minute(minute: int, util: float | None, sm: float | None) -> GpuMinute:
    return GpuMinute(provider="sim", instance_id="i-1", minute=T0 + timedelta(minutes=minute),
                     source=TelemetrySource.AGENT, util_mean=util, util_max=util,
                     sm_mean=sm, sm_max=sm)


@pytest.mark.parametrize(("signal", "minutes", "span", "window", "expected"), [
    # util_gpu decides alone: one busy minute is enough, all-quiet minutes are not
    ("util_gpu", [(40.0, None)], 15, 45, True),
    ("util_gpu", [(3.0, None), (4.9, None)], 15, 45, False),
    # auto without SM readings: a quarter hour of 45 minutes leaves SM unable to reach 80 %
    ("auto", [(40.0, None)], 15, 45, True),
    # ... but 5 minutes of 60 do not: older SM readings could still decide (and say idle)
    ("auto", [(40.0, None)], 5, 60, False),
    # tiny kernels: util_gpu busy, SMs idle; auto may choose SM activity, which says idle
    ("auto", [(12.0, 0.5)], 15, 45, False),
    ("auto", [(60.0, 55.0)], 15, 45, True),
    ("sm_active", [(60.0, 55.0)], 15, 45, True),
    ("sm_active", [(60.0, 1.0)], 15, 45, False),
])
def test_a_recent_minute_rules_idle_out_only_when_the_deciding_signal_says_busy(
    signal: str, minutes: list[tuple[float | None, float | None]], span: int, window: int,
    expected: bool,
) -> None:
    cond = IdleCondition.model_validate({"signal": signal, "below": 5, "for": f"{window}m",
                                         "min_coverage": 0.8})
    recent = [_minute(k, util, sm) for k, (util, sm) in enumerate(minutes)]
    assert rules_out_idle(peak_of(recent), cond, timedelta(minutes=span)) is expected


@settings(max_examples=150, deadline=None)
@given(batch=st.lists(st.builds(
    lambda iid, ago, span, util, sm: GpuMinute(
        provider="gcp", instance_id=iid, minute=T0 - timedelta(minutes=ago),
        span_minutes=span, source=TelemetrySource.CLOUD_MONITORING,
        util_mean=None if util is None else util / 2, util_max=util,
        sm_mean=None if sm is None else sm / 2, sm_max=sm),
    st.sampled_from(["vm-a", "vm-b", "vm-c"]), st.integers(0, 40), st.sampled_from([1, 5]),
    st.one_of(st.none(), st.sampled_from([0.0, 4.0, 5.0, 60.0])),
    st.one_of(st.none(), st.sampled_from([0.0, 4.0, 5.0, 60.0]))), max_size=12),
    signal=st.sampled_from(["util_gpu", "sm_active", "auto"]))
def test_a_clouds_rows_decide_as_the_readings_they_are(batch: list[GpuMinute], signal: str
                                                       ) -> None:
    """The split read's decision over a cloud's rows (`MinuteRows`, read without a model
    each) is the decision over the same readings as models."""
    cond = IdleCondition.model_validate({"signal": signal, "below": 5, "for": "45m",
                                         "min_coverage": 0.8})
    mid = T0 - timedelta(minutes=15)
    assert (decided(MinuteRows.of(batch), mid, T0, [cond])
            == decided(batch, mid, T0, [cond]))


def test_a_clouds_rows_are_grouped_as_light_readings_equal_to_the_models() -> None:
    batch = [GpuMinute(provider="sim", instance_id=iid, gpu_index=g,
                       minute=T0 - timedelta(minutes=ago), source=TelemetrySource.SIM,
                       util_mean=float(ago), sm_max=float(g), mem_used_bytes=2**30)
             for iid in ("vm-a", "vm-b") for ago in (1, 7) for g in (0, 3)]
    rows = by_instance(MinuteRows.of(batch))
    models = by_instance(batch)
    assert list(rows) == list(models) == ["vm-a", "vm-b"]
    for iid, readings in rows.items():
        assert not any(isinstance(r, GpuMinute) for r in readings)  # no model a row
        assert [(r.gpu_index, r.minute, r.util_mean, r.sm_max, r.mem_used_bytes)
                for r in readings] == [
            (m.gpu_index, m.minute, m.util_mean, m.sm_max, m.mem_used_bytes)
            for m in models[iid]]


@pytest.mark.parametrize("as_rows", [False, True])
def test_only_the_recent_spans_readings_decide(as_rows: bool) -> None:
    def reading(iid: str, ago: int, util: float, span: int = 1) -> GpuMinute:
        return GpuMinute(provider="gcp", instance_id=iid, minute=T0 - timedelta(minutes=ago),
                         span_minutes=span, source=TelemetrySource.CLOUD_MONITORING,
                         util_max=util)
    batch = [reading("vm-recent", 3, 60.0), reading("vm-old", 30, 60.0),
             reading("vm-old", 3, 1.0), reading("vm-straddles", 17, 60.0, span=5),
             reading("vm-now", 0, 60.0, span=1), reading("vm-quiet", 5, 4.9)]
    cond = IdleCondition.model_validate({"signal": "util_gpu", "below": 5, "for": "45m"})
    recent = MinuteRows.of(batch) if as_rows else batch
    # [T0 - 15m, T0 - 1m): vm-now's minute begins at T0, after the span
    assert decided(recent, T0 - timedelta(minutes=15), T0 - timedelta(minutes=1), [cond]) == {
        "vm-recent", "vm-straddles"}
