"""Backtest of recommendations: had costguard recommended a cheaper fit at the start of the
stored history, what would the move have saved since, and would it have held?

The history [since, until) is cut in two: the first `recommend.window` (7 days) is what the
recommendation is judged on (the same verdict and fit as `costguard recommend` would have
given at the cut, from the readings and prices then); the rest is what happened after.
For each instance given a cheaper fit:

* held: what it used after the cut fits the type recommended: GPUs used (beyond those of
  the type, unless the fit deliberately gave fewer than were used before the cut, as for a
  starved data loader: then beyond those used before), the VRAM peak per GPU, host vCPUs
  busy (p95) and host memory peak where the host was measured. A fit
  that would not have held saves nothing: the job would have failed or been moved back.
* saved: its spend after the cut (the report's own figures, at the prices it was charged)
  times the share the fit's price is below the current type's. Extrapolated per month
  over the hours after the cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session

from costguard.recommend.fit import Fit, PriceLookup
from costguard.recommend.run import judge_instances, readings_of, spend_by_instance
from costguard.recommend.settings import RecommendSettings
from costguard.recommend.shapes import Shape
from costguard.recommend.words import words_for
from costguard.store.inventory import current_instances
from costguard.telemetry.efficiency import Efficiency, judge

MIN_AFTER = timedelta(hours=12)


@dataclass(frozen=True)
class Outcome:
    fit: Fit
    team: str
    after: Efficiency  # what the instance did after the cut
    spend_after_usd: float
    broke: tuple[str, ...]  # why the fit would not have held (empty: it held)

    @property
    def held(self) -> bool:
        return not self.broke

    @property
    def saved_usd(self) -> float:
        f = self.fit
        if not self.held or not f.usd_per_hour or f.to_usd_per_hour is None:
            return 0.0
        return round(self.spend_after_usd * max(0.0, 1 - f.to_usd_per_hour / f.usd_per_hour), 2)


@dataclass(frozen=True)
class RecommendationBacktest:
    since: datetime
    cut: datetime
    until: datetime
    judged: int  # GPU instances judged at the cut
    outcomes: list[Outcome]  # one per instance given a cheaper fit at the cut

    @property
    def saved_usd(self) -> float:
        return round(sum(o.saved_usd for o in self.outcomes), 2)

    @property
    def monthly_usd(self) -> float:
        """The saving per 730 hours of the period after the cut."""
        hours = (self.until - self.cut).total_seconds() / 3600
        return round(self.saved_usd * 730 / hours, 2) if hours else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": 1, "since": self.since.isoformat(), "cut": self.cut.isoformat(),
            "until": self.until.isoformat(), "judged": self.judged,
            "recommended": len(self.outcomes),
            "held": sum(o.held for o in self.outcomes),
            "saved_usd": self.saved_usd, "monthly_savings_usd": self.monthly_usd,
            "items": [{
                "provider": o.fit.instance.provider, "instance_id": o.fit.instance.instance_id,
                "name": o.fit.instance.name, "team": o.team,
                "instance_type": o.fit.instance.instance_type,
                "bottleneck": str(o.fit.efficiency.bottleneck),
                "to": o.fit.to.instance_type if o.fit.to else None,
                "recommended_monthly_savings_usd": o.fit.monthly_usd,
                "held": o.held, "broke": list(o.broke),
                "hours_after": o.after.hours, "spend_after_usd": o.spend_after_usd,
                "saved_usd": o.saved_usd,
            } for o in self.outcomes],
        }


def backtest_recommendations(session: Session, since: datetime, until: datetime,
                             price: PriceLookup, cfg: RecommendSettings
                             ) -> RecommendationBacktest:
    """Recommend at `since + cfg.window`, then score the fits on what followed."""
    cut = since + cfg.window
    if until - cut < MIN_AFTER:
        raise ValueError(
            f"a backtest needs the verdict's window ({_days(cfg.window)}) and 12 hours "
            f"after it: --since {_days(cfg.window + MIN_AFTER)} or more (or a shorter "
            "recommend.window)")
    instances = [i for i in current_instances(session, include_gone=True) if i.gpu_count > 0]
    spent, teams = spend_by_instance(session, since, cut)
    judged = judge_instances(session, instances, cut, price, cfg, spent, teams)
    fits = [r for r in judged if r.fit.to is not None and r.fit.monthly_usd > 0]
    after_spend, _ = spend_by_instance(session, cut, until)
    by_ref = {(r.fit.instance.provider, r.fit.instance.instance_id): r for r in fits}
    outcomes = []
    # what followed, read a few instances at a time as judging reads them
    for inst, readings in readings_of(session, [r.fit.instance for r in fits], cut, until):
        r = by_ref[(inst.provider, inst.instance_id)]
        after = judge(readings, window_start=cut, window_end=until, gpu_count=inst.gpu_count,
                      settings=cfg, words=words_for(inst))
        assert r.fit.to is not None
        outcomes.append(Outcome(r.fit, r.team, after,
                                round(after_spend.get(inst.instance_id, 0.0), 2),
                                would_break(r.fit.efficiency, after, r.fit.to)))
    outcomes.sort(key=lambda o: (-o.saved_usd, o.fit.instance.instance_id))
    return RecommendationBacktest(since, cut, until, len(judged), outcomes)


def would_break(before: Efficiency, after: Efficiency, to: Shape) -> tuple[str, ...]:
    """What the instance used after the cut that the type recommended at the cut (from
    `before`) could not hold."""
    out = []
    gpus = max(to.gpus, before.gpus_used or 0)
    if after.gpus_used is not None and after.gpus_used > gpus:
        out.append(f"{after.gpus_used} GPUs used, {to.instance_type} has {to.gpus}")
    vram = to.gpu_memory_mib * 2**20
    if after.vram_peak_bytes is not None and after.vram_peak_bytes > vram:
        out.append(f"VRAM peaked at {after.vram_peak_bytes / 1e9:.1f} GB, "
                   f"{to.instance_type} has {vram / 1e9:.1f} GB per GPU")
    if after.host_cpu_p95 is not None and after.host_cpus:
        busy = after.host_cpu_p95 / 100 * after.host_cpus
        if busy > to.vcpus:
            out.append(f"{busy:.1f} vCPUs busy (p95), {to.instance_type} has {to.vcpus}")
    if after.host_mem_peak_bytes is not None and after.host_mem_peak_bytes > to.memory_mib * 2**20:
        out.append(f"host memory peaked at {after.host_mem_peak_bytes / 2**30:.1f} GiB, "
                   f"{to.instance_type} has {to.memory_mib / 1024:.0f} GiB")
    return tuple(out)


def _days(d: timedelta) -> str:
    return f"{d.total_seconds() / 86400:g}d"
