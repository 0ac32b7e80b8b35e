"""Judge every GPU instance in the store over the window and fit each underused one: what
`costguard recommend`, the report's "Waste beyond idle" section and the `underused`
metric read.

Instances: the stored inventory's GPU instances (not those gone). Readings: the store's
GPU-minutes over [now - window, now). Spend and team: the report's own spend query over
the same window (the team each hour was attributed to then), so the dollars here add up
with `costguard report`.

Judging reads every reading of the window (~18 us a 5-minute point: a 10,000-instance
fleet's week is minutes), and the daemon's cycle already judges each GPU instance once per
`recommend.refresh` and stores the verdict (`recommend/stored.py`). So `recommend` takes
an instance's stored verdict under the same thresholds when it was judged within
`refresh` before `now` (what the `underused:` policies act on), fits it at today's prices,
and judges afresh only the others; `fresh=True` judges every one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from costguard.clock import utc
from costguard.costs.attribution import UNATTRIBUTED
from costguard.heap import cycle_collection
from costguard.model import Instance
from costguard.recommend.fit import Fit, PriceLookup, cheaper_fit
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.tables import judged_rows
from costguard.recommend.tpu_fit import tpu_fit
from costguard.recommend.verdict import settings_key
from costguard.recommend.words import words_for
from costguard.report.figures import Waste, WasteLine
from costguard.store.inventory import current_instances
from costguard.store.readings import read_shaped
from costguard.telemetry.efficiency import Bottleneck, Efficiency, JudgedRow, judge
from costguard.telemetry.efficiency_hours import history_reaches_further, judge_many

# GPU-minutes of readings read and judged at once: ~16 MB (~0.8 KB a reading: its tuple,
# ~0.4, and the judge's cells and slots)
READINGS_PER_READ = 20_000
_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Recommendation:
    fit: Fit
    team: str
    spend_usd: float  # the instance's estimated spend in the window

    @property
    def underused_usd(self) -> float:
        """The window's spend on an instance judged underused (0 for the others)."""
        return self.spend_usd if self.fit.efficiency.underused else 0.0


@dataclass(frozen=True)
class Recommendations:
    since: datetime
    until: datetime
    items: list[Recommendation]  # every GPU instance judged, largest saving first
    reused: int = 0  # of them, verdicts the daemon stored (judged within `refresh`)
    oldest_reused: datetime | None = None  # when the oldest of those was judged

    @property
    def underused(self) -> list[Recommendation]:
        return [r for r in self.items if r.fit.efficiency.underused]

    def by_team(self) -> dict[str, dict[str, float]]:
        """Per team: spend on underused instances in the window, and $/month the fits save."""
        out: dict[str, dict[str, float]] = defaultdict(
            lambda: {"underused_usd": 0.0, "monthly_savings_usd": 0.0, "instances": 0})
        for r in self.underused:
            row = out[r.team]
            row["underused_usd"] += r.underused_usd
            row["monthly_savings_usd"] += max(0.0, r.fit.monthly_usd)
            row["instances"] += 1
        return {team: {k: round(v, 2) for k, v in row.items()}
                for team, row in sorted(out.items(), key=lambda kv: -kv[1]["underused_usd"])}


def recommend(session: Session, now: datetime, price: PriceLookup,
              settings: RecommendSettings | None = None,
              filters: Mapping[str, str] | None = None, *,
              fresh: bool = False) -> Recommendations:
    """Every GPU instance's verdict and fit over the window ending `now`; `filters` (report
    dimensions, e.g. team=research) narrow it as they narrow a report. A verdict the daemon
    stored within `refresh` before `now` is taken as judged (`fresh`: none is)."""
    cfg = settings or RecommendSettings()
    since = now - cfg.window
    spent, teams = spend_by_instance(session, since, now, filters)
    instances = [i for i in current_instances(session) if i.gpu_count > 0
                 and (not filters or i.instance_id in spent)]
    known = {} if fresh else stored_verdicts(session, cfg, now)
    out = judge_instances(session, instances, now, price, cfg, spent, teams, known)
    out.sort(key=lambda r: (-r.fit.monthly_usd, -r.underused_usd,
                            r.fit.efficiency.bottleneck is Bottleneck.INSUFFICIENT_DATA,
                            r.fit.instance.instance_id))
    taken = [known[(i.provider, i.instance_id)][1] for i in instances
             if (i.provider, i.instance_id) in known]
    return Recommendations(since, now, out, len(taken), min(taken, default=None))


Ref = tuple[str, str]  # (provider, instance_id)


def stored_verdicts(session: Session, cfg: RecommendSettings, now: datetime
                    ) -> dict[Ref, tuple[Efficiency, datetime]]:
    """The verdicts stored under `cfg`'s thresholds judged in (now - refresh, now], and
    when: one judged later than `now` (a report that ends in the past) or longer ago is not
    the window asked about."""
    rows = judged_rows(session, settings_key(cfg), now - cfg.refresh, now)
    return {(r.provider, r.instance_id): (Efficiency.model_validate(r.efficiency),
                                          utc(r.judged_at)) for r in rows}


def spend_by_instance(session: Session, since: datetime, until: datetime,
                      filters: Mapping[str, str] | None = None, *,
                      instance_ids: Collection[str] | None = None,
                      ) -> tuple[dict[str, float], dict[str, str]]:
    """Per instance id: its estimated spend in [since, until), and the team that spend was
    mostly attributed to (re-attributed mid-window: the larger share), from the report's own
    spend query. `instance_ids`: only those instances (None: all)."""
    from costguard.report.queries import spend  # the report's own figures

    rows = spend(session, ["instance", "team"], since, until, filters,
                 instance_ids=instance_ids).rows
    spent: dict[str, float] = defaultdict(float)
    teams: dict[str, tuple[float, str]] = {}
    for row in rows:
        iid, usd = row.key[0], row.cost_micros / 1e6
        spent[iid] += usd
        if usd > teams.get(iid, (-1.0, ""))[0]:
            teams[iid] = (usd, row.key[1] or UNATTRIBUTED)
    return dict(spent), {iid: team for iid, (_, team) in teams.items()}


def judge_instances(session: Session, instances: Sequence[Instance], now: datetime,
                    price: PriceLookup, cfg: RecommendSettings, spent: Mapping[str, float],
                    teams: Mapping[str, str],
                    known: Mapping[Ref, tuple[Efficiency, datetime]] | None = None,
                    ) -> list[Recommendation]:
    """The verdict and fit of each of `instances` over the window ending `now`; an
    instance in `known` keeps that verdict (its readings are not read).

    Their readings are read a few instances at a time (`reads`) and dropped once judged:
    a week of one GPU's minutes is 10,080 readings, ~8 MB while judged, so a fleet's
    week read at once (the report's waste section judges every GPU instance) would not
    fit in memory. A window that begins before the oldest raw minute kept is judged from
    the hourly history (`telemetry.efficiency_hours`)."""
    since = now - cfg.window
    known = known or {}
    verdicts: dict[Ref, Efficiency] = {
        (i.provider, i.instance_id): known[(i.provider, i.instance_id)][0]
        for i in instances if (i.provider, i.instance_id) in known}
    todo = [i for i in instances if (i.provider, i.instance_id) not in verdicts]
    if todo and history_reaches_further(session, since):
        # the window reaches past the raw minutes kept: judged from the hourly history
        verdicts.update(judge_many(session, [((i.provider, i.instance_id), i.gpu_count,
                                              words_for(i)) for i in todo], since, now, cfg))
        todo = []
    for inst, readings in readings_of(session, todo, since, now):
        verdicts[(inst.provider, inst.instance_id)] = judge(
            readings, window_start=since, window_end=now, gpu_count=inst.gpu_count,
            settings=cfg, words=words_for(inst))
    return [Recommendation(fit_of(inst, verdicts[(inst.provider, inst.instance_id)], price,
                                  cfg),
                           teams.get(inst.instance_id, UNATTRIBUTED),
                           round(spent.get(inst.instance_id, 0.0), 2))
            for inst in instances]


def fit_of(inst: Instance, e: Efficiency, price: PriceLookup,
           cfg: RecommendSettings) -> Fit:
    """A TPU node's fit (a smaller slice of its generation, recommend/tpu_fit.py), else the
    cheaper instance type (recommend/fit.py)."""
    return tpu_fit(inst, e) or cheaper_fit(inst, e, price, cfg)


def gpu_minutes(inst: Instance, start: datetime, end: datetime) -> int:
    """The readings `inst` can have over [start, end) at one a GPU-minute: its GPUs (one
    for an instance without) from `start` or its launch, whichever is later."""
    begin = max(start, utc(inst.launch_time))
    return max(1, inst.gpu_count) * max(1, math.ceil((end - begin) / _MINUTE))


def readings_of(session: Session, instances: Sequence[Instance], start: datetime,
                end: datetime) -> Iterator[tuple[Instance, list[JudgedRow]]]:
    """Each of `instances`, in order, with its readings over [start, end) as the verdict
    reads them: read a few instances at a time (`reads`), each minute of the span converted
    once. Meanwhile the collector's youngest generation is collected as seldom as in a
    cycle: a read's readings are thousands of live tuples, which it walked every 700
    allocations (a fifth to a third of judging; costguard/heap.py)."""
    minutes: dict[Any, datetime] = {}
    with cycle_collection():
        for chunk in reads(instances, start, end):
            readings = read_shaped(session, [(i.provider, i.instance_id) for i in chunk],
                                   start, end, JudgedRow, minutes=minutes)
            for inst in chunk:
                yield inst, readings.pop((inst.provider, inst.instance_id), [])


def reads(instances: Sequence[Instance], start: datetime, end: datetime,
          most: int = READINGS_PER_READ) -> Iterator[list[Instance]]:
    """`instances` in order, in runs whose readings over [start, end) (`gpu_minutes`) stay
    within `most`; an instance that alone has more is a run of its own."""
    run: list[Instance] = []
    held = 0
    for inst in instances:
        need = gpu_minutes(inst, start, end)
        if run and held + need > most:
            yield run
            run, held = [], 0
        run.append(inst)
        held += need
    if run:
        yield run


def waste_of(recs: Recommendations, top: int = 5) -> Waste:
    """The report's "Waste beyond idle" section: per team, and the largest fits."""
    under = recs.underused
    lines = tuple(
        WasteLine(r.fit.instance.name or r.fit.instance.instance_id, r.team,
                  str(r.fit.efficiency.bottleneck),
                  f"{r.fit.efficiency.gpus_used}/{r.fit.efficiency.gpus_paid}",
                  r.fit.to.instance_type if r.fit.to else None, r.fit.monthly_usd)
        for r in under[:top])
    return Waste(recs.since, recs.until, len(recs.items), len(under),
                 round(sum(r.underused_usd for r in under), 2),
                 round(sum(max(0.0, r.fit.monthly_usd) for r in under), 2),
                 recs.by_team(), lines, recs.reused, recs.oldest_reused)
