"""A provider whose metrics calls may overlap is asked a few chunks at once: each call's
readings are stored and confirmed one call at a time, each call's gaps are its own, and
what the calls in flight ask for stays inside the telemetry budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from costguard.engine import fetch as fetch_module
from costguard.engine.cycle import MAX_TELEMETRY_LOOKBACK
from costguard.engine.fetch import IN_FLIGHT, fetcher
from costguard.errors import ProviderError
from costguard.minute_rows import MinuteRows
from costguard.model import Gap, GpuMinute, Instance, InstanceState, TelemetrySource
from costguard.providers.base import Readings
from tests.fakes.cloud import T0

START, END = T0, T0 + timedelta(minutes=15)


def _instance(n: int, region: str) -> Instance:
    return Instance(
        provider="aws", account="111111111111", region=region, zone=f"{region}a",
        instance_id=f"i-{region}-{n}", name=f"n{n}", instance_type="g5.xlarge",
        state=InstanceState.RUNNING, gpu_count=1, gpu_model="A10G",
        launch_time=T0 - timedelta(days=1), observed_at=T0)


def _fleet(scopes: int, per_scope: int) -> list[Instance]:
    return [_instance(n, f"region-{r:02d}") for r in range(scopes) for n in range(per_scope)]


class Overlapping:
    """Answers after `delay`, counting the calls and instance-minutes in flight; a scope in
    `down` is a gap of the call that asked it; a call of only `raising` scopes raises."""

    name = "aws"

    def __init__(self, *, overlap: bool = True, delay: float = 0.05) -> None:
        self.overlapping_metrics = overlap
        self.delay = delay
        self.down: set[str] = set()
        self.raising: set[str] = set()
        self.lock = threading.Lock()
        self.active = self.peak = self.weight = self.peak_weight = 0
        self.stored: list[Sequence[GpuMinute]] = []
        self.metric_gaps: list[Gap] = []
        # a call's first region -> (calls in flight as it began, and as it ended)
        self.beside: dict[str, tuple[int, int]] = {}

    def gpu_metrics(self, instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        weight = len(instances) * round((end - start) / timedelta(minutes=1))
        with self.lock:
            self.active += 1
            self.weight += weight
            self.peak = max(self.peak, self.active)
            self.peak_weight = max(self.peak_weight, self.weight)
            began = self.active
        try:
            time.sleep(self.delay)
            scopes = {f"{i.account}/{i.region}" for i in instances}
            if scopes <= self.raising:
                raise ProviderError("aws", sorted(scopes)[0], "AccessDenied")
            gaps = [Gap(provider="aws", scope=s, error="throttled") for s in sorted(scopes)
                    if s in self.down]
            rows = [GpuMinute(provider="aws", instance_id=i.instance_id, minute=start,
                              source=TelemetrySource.CLOUDWATCH, util_mean=50.0)
                    for i in instances if f"{i.account}/{i.region}" not in self.down]
            # `metric_gaps` names the last call to end: here, always another one, with no
            # gaps (a fetcher that reads it loses this call's)
            self.metric_gaps = []
            return Readings(MinuteRows.of(rows), gaps)
        finally:
            with self.lock:
                self.beside[instances[0].region] = (began, self.active)
                self.active -= 1
                self.weight -= weight

    def readings_stored(self, readings: Sequence[GpuMinute]) -> None:
        self.stored.append(readings)


class Sink:
    """Records what it is handed; fails if two calls' readings are handed over at once."""

    def __init__(self) -> None:
        self.busy = threading.Lock()
        self.ids: list[str] = []

    def __call__(self, readings: list[GpuMinute], since: datetime) -> None:
        assert self.busy.acquire(blocking=False), "two calls' readings handed over at once"
        try:
            time.sleep(0.01)
            self.ids += [m.instance_id for m in readings]
        finally:
            self.busy.release()


def _small_chunks(monkeypatch: pytest.MonkeyPatch, instances_per_call: int) -> None:
    """`TELEMETRY_CHUNK` such that a call over [START, END) holds `instances_per_call`."""
    monkeypatch.setattr(fetch_module, "TELEMETRY_CHUNK", instances_per_call * 15 * IN_FLIGHT)
    monkeypatch.setattr(fetch_module, "TELEMETRY_CHUNK_MIN", 1)


def test_calls_overlap_up_to_the_limit_and_are_handed_over_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_chunks(monkeypatch, 4)
    fleet = _fleet(scopes=12, per_scope=4)  # 12 chunks of one scope
    provider, sink = Overlapping(), Sink()

    gaps = fetcher("aws", provider, sink, readers=1)(fleet, START, END, None)

    assert gaps == []
    assert provider.peak == IN_FLIGHT
    assert provider.peak_weight <= fetch_module.TELEMETRY_CHUNK
    assert sorted(sink.ids) == sorted(i.instance_id for i in fleet)
    assert len(provider.stored) == 12  # each call's own readings, confirmed once stored
    assert all(isinstance(r, Readings) for r in provider.stored)


def test_as_many_smaller_calls_as_the_budget_holds_are_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scopes that do not pack into a call's share are calls of their own, each asking for
    less than a share: four of them fit the budget, and all four are asked at once (one
    call per share would leave the fourth waiting for a slot it does not need)."""
    _small_chunks(monkeypatch, 4)
    fleet = _fleet(scopes=4, per_scope=3)  # 3 + 3 > 4: a call each, 4 x 45 <= 180
    provider, sink = Overlapping(), Sink()
    fetcher("aws", provider, sink, readers=1)(fleet, START, END, None)
    assert provider.peak == 4
    assert provider.peak_weight == 4 * 3 * 15 <= fetch_module.TELEMETRY_CHUNK


def test_a_provider_whose_calls_may_not_overlap_is_asked_one_call_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_chunks(monkeypatch, 4)
    fleet = _fleet(scopes=6, per_scope=4)
    provider, sink = Overlapping(overlap=False), Sink()
    fetcher("aws", provider, sink, readers=1)(fleet, START, END, None)
    assert provider.peak == 1
    assert sorted(sink.ids) == sorted(i.instance_id for i in fleet)


def test_each_call_reports_its_own_gaps_and_a_raising_chunk_is_a_gap_of_its_scopes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`metric_gaps` names the last call to end: with calls in flight, a call's gaps come
    with its readings, or a down scope would be lost or named twice."""
    _small_chunks(monkeypatch, 4)
    fleet = _fleet(scopes=9, per_scope=4)
    provider, sink = Overlapping(delay=0.02), Sink()
    provider.down = {"111111111111/region-01", "111111111111/region-05"}
    provider.raising = {"111111111111/region-07"}

    gaps = fetcher("aws", provider, sink, readers=1)(fleet, START, END, None)

    assert sorted((g.scope, g.error) for g in gaps) == [
        ("111111111111/region-01 metrics", "throttled"),
        ("111111111111/region-05 metrics", "throttled"),
        ("111111111111/region-07 metrics", "aws 111111111111/region-07: AccessDenied")]
    assert sorted({i.rsplit("-", 1)[0] for i in sink.ids}) == [
        f"i-region-{r:02d}" for r in range(9) if r not in (1, 5, 7)]


def test_a_call_larger_than_the_budget_runs_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scope is never split, so one larger than a call's share is a call of its own:
    it waits for the calls in flight and none starts beside it."""
    _small_chunks(monkeypatch, 4)
    fleet = [*_fleet(scopes=4, per_scope=4),
             *[_instance(n, "huge") for n in range(4 * IN_FLIGHT + 1)],
             *[_instance(n, f"late-{r}") for r in range(4) for n in range(4)]]
    provider, sink = Overlapping(), Sink()
    fetcher("aws", provider, sink, readers=1)(fleet, START, END, None)
    assert provider.beside["huge"] == (1, 1)  # nothing in flight as it began or ended
    assert provider.peak == IN_FLIGHT
    assert sorted(sink.ids) == sorted(i.instance_id for i in fleet)


def test_when_every_chunk_raises_the_first_error_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_chunks(monkeypatch, 4)
    fleet = _fleet(scopes=5, per_scope=4)
    provider, sink = Overlapping(delay=0.01), Sink()
    provider.raising = {f"111111111111/region-{r:02d}" for r in range(5)}
    with pytest.raises(ProviderError, match="AccessDenied"):
        fetcher("aws", provider, sink, readers=1)(fleet, START, END, None)
    assert sink.ids == []


def test_a_store_that_fails_leaves_the_chunks_not_yet_asked_unasked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _small_chunks(monkeypatch, 4)
    fleet = _fleet(scopes=12, per_scope=4)
    provider = Overlapping(delay=0.02)
    asked: list[str] = []
    inner = provider.gpu_metrics

    def gpu_metrics(instances: Sequence[Instance], start: datetime, end: datetime
                    ) -> list[GpuMinute]:
        asked.append(instances[0].region)
        return inner(instances, start, end)

    provider.gpu_metrics = gpu_metrics  # type: ignore[method-assign]

    def failing(readings: list[GpuMinute], since: datetime) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        fetcher("aws", provider, failing, readers=1)(fleet, START, END, None)
    assert len(asked) < 12
    assert provider.stored == []  # nothing confirmed: it all comes back next cycle


def test_after_a_downtime_each_scope_is_asked_once_over_the_whole_span() -> None:
    """Two providers read at once, six hours down, scopes of 50 (the real budget): each
    call holds as many whole scopes as it can ask without cutting the span, so every
    instance is asked once. Chunks of at least 166 were each cut into two slices, and each
    scope asked twice (AWS's and Compute Engine's calls are per scope whatever the chunk)."""
    fleet = _fleet(scopes=6, per_scope=50)
    provider, sink = Overlapping(delay=0.0), Sink()
    end = START + MAX_TELEMETRY_LOOKBACK
    calls: list[tuple[int, datetime, datetime]] = []
    inner = provider.gpu_metrics

    def asked(instances: Sequence[Instance], start: datetime, stop: datetime
              ) -> list[GpuMinute]:
        calls.append((len(instances), start, stop))
        return inner(instances, start, stop)

    provider.gpu_metrics = asked  # type: ignore[method-assign]
    assert fetcher("aws", provider, sink, readers=2)(fleet, START, end, None) == []
    assert calls == [(100, START, end)] * 3  # two scopes a call, the span whole
    assert sorted(sink.ids) == sorted(i.instance_id for i in fleet)
    # what the calls in flight asked at once: within this provider's half of the budget
    assert provider.peak_weight <= fetch_module.TELEMETRY_CHUNK // 2
